use super::*;

fn proofs() -> Arc<SigningKeys> {
    Arc::new(SigningKeys::parse(&SigningKeys::generate_entry()).unwrap())
}

fn service_with(secret: &str, proofs: Arc<SigningKeys>) -> TokenService {
    TokenService::new(
        "devkey",
        &Secret::new(secret),
        "ws://127.0.0.1:7880",
        Duration::from_secs(600),
        proofs,
    )
}

fn service() -> TokenService {
    service_with("secret-secret-secret-secret-1234", proofs())
}

/// A LiveKit token for `key` as anyone holding the LiveKit secret could make it (LiveKit's own
/// builder): valid for LiveKit, without the relay's bind proof.
fn livekit_only(secret: &str, key: &str) -> String {
    livekit_api::access_token::AccessToken::with_api_key("devkey", secret)
        .with_identity("intruder")
        .with_metadata(&format!(r#"{{"apiKey":"{key}"}}"#))
        .with_grants(VideoGrants {
            room_join: true,
            room: "room-1".into(),
            ..Default::default()
        })
        .to_jwt()
        .unwrap()
}

#[test]
fn keys_are_fresh_and_well_formed() {
    let a = new_api_key();
    let b = new_api_key();
    assert!(is_api_key(&a) && is_api_key(&b));
    assert_ne!(a, b);
}

fn request(name: Option<&str>, room: Option<&str>, identity: Option<&str>) -> TokenRequest {
    TokenRequest {
        participant_name: name.map(str::to_owned),
        room_name: room.map(str::to_owned),
        identity: identity.map(str::to_owned),
    }
}

fn fresh() -> Subject {
    Subject::for_request(&Caller::Anonymous, &TokenRequest::default()).unwrap()
}

#[test]
fn minted_token_verifies_and_carries_the_key() {
    let s = service();
    let subject = Subject::for_request(
        &Caller::Issuer,
        &request(Some("Ada"), Some("room-1"), Some("user-7")),
    )
    .unwrap();
    let minted = s.mint(&subject).unwrap();
    assert_eq!(minted.room_name, "room-1");
    assert_eq!(minted.identity, "user-7");
    let v = s.verify(&minted.token).unwrap();
    assert_eq!(v.api_key, minted.api_key);
    assert_eq!(v.exp, minted.expires_at);
    // LiveKit's own verifier accepts it (the bind proof is a claim it ignores).
    let claims = livekit_api::access_token::TokenVerifier::with_api_key(
        "devkey",
        "secret-secret-secret-secret-1234",
    )
    .verify(&minted.token)
    .unwrap();
    assert_eq!(claims.sub, "user-7");
    assert_eq!(claims.name, "Ada");
    assert!(claims.video.room_join && claims.video.can_publish_data());
    assert!(!claims.video.can_update_own_metadata());
}

#[test]
fn anonymous_callers_get_fresh_rooms_and_identities_only() {
    let s = service();
    let a = s.mint(&fresh()).unwrap();
    let b = s.mint(&fresh()).unwrap();
    assert_ne!(a.room_name, b.room_name);
    assert_ne!(a.identity, b.identity);
    assert!(a.identity.starts_with("tab-") && a.room_name.starts_with("voice-"));
    let named = Subject::for_request(&Caller::Anonymous, &request(Some("Bo"), None, None)).unwrap();
    assert_eq!(named.name.as_deref(), Some("Bo"));
    for refused in [
        request(None, Some("room-1"), None),
        request(None, None, Some("me")),
    ] {
        let err = Subject::for_request(&Caller::Anonymous, &refused).unwrap_err();
        assert_eq!(err.code, relay_wire::ErrorCode::InvalidRequest, "{err}");
    }
    // An empty roomName is no room at all.
    assert!(Subject::for_request(&Caller::Anonymous, &request(None, Some(" "), None)).is_ok());
}

#[test]
fn app_claims_give_identity_name_and_room() {
    let claims = AppClaims {
        subject: "user-42".into(),
        name: Some("Ada\u{7}Lovelace".into()),
        room: Some("team-7".into()),
    };
    let subject = Subject::for_request(
        &Caller::App(claims.clone()),
        &request(Some("Mallory"), None, None),
    )
    .unwrap();
    assert_eq!(subject.identity.as_deref(), Some("user-42"));
    assert_eq!(subject.name.as_deref(), Some("AdaLovelace"));
    assert_eq!(subject.room.as_deref(), Some("team-7"));
    // No name claim: the body's name; no room claim: a fresh room.
    let plain = AppClaims {
        name: None,
        room: None,
        ..claims.clone()
    };
    let subject =
        Subject::for_request(&Caller::App(plain), &request(Some("Ada"), None, None)).unwrap();
    assert_eq!(subject.name.as_deref(), Some("Ada"));
    assert_eq!(subject.room, None);
    // The body may not override the claims.
    for refused in [
        request(None, Some("other"), None),
        request(None, None, Some("admin")),
    ] {
        let err = Subject::for_request(&Caller::App(claims.clone()), &refused).unwrap_err();
        assert_eq!(err.code, relay_wire::ErrorCode::InvalidRequest);
    }
    let bad_room = AppClaims {
        room: Some("no spaces please".into()),
        ..claims
    };
    let err = Subject::for_request(&Caller::App(bad_room), &TokenRequest::default()).unwrap_err();
    assert_eq!(err.code, relay_wire::ErrorCode::Unauthorized);
}

#[test]
fn foreign_and_broken_tokens_are_refused() {
    let s = service();
    let other = service_with("another-secret-another-secret-12", proofs());
    let forged = other.mint(&fresh()).unwrap().token;
    assert!(matches!(s.verify(&forged), Err(TokenError::Invalid(_))));
    assert!(matches!(s.verify(""), Err(TokenError::Missing)));
    assert!(matches!(s.verify("a.b.c"), Err(TokenError::Invalid(_))));
    // A valid signature without our metadata does not bind.
    let bare = livekit_api::access_token::AccessToken::with_api_key(
        "devkey",
        "secret-secret-secret-secret-1234",
    )
    .with_identity("x")
    .to_jwt()
    .unwrap();
    assert!(matches!(s.verify(&bare), Err(TokenError::NoKey)));
}

#[test]
fn the_livekit_secret_alone_binds_nothing() {
    let keys = proofs();
    let s = service_with("secret-secret-secret-secret-1234", keys.clone());
    let minted = s.mint(&fresh()).unwrap();
    // The same key in a token signed with the LiveKit secret, without the relay's proof.
    let forged = livekit_only("secret-secret-secret-secret-1234", &minted.api_key);
    assert!(matches!(s.verify(&forged), Err(TokenError::NotIssuedHere)));
    // Another relay's proof (other signing keys, same LiveKit secret) does not bind here either.
    let elsewhere = service_with("secret-secret-secret-secret-1234", proofs());
    let theirs = elsewhere.mint(&fresh()).unwrap();
    assert!(matches!(
        s.verify(&theirs.token),
        Err(TokenError::NotIssuedHere)
    ));
    // A second relay process with the same keys (another node, or after a restart) accepts it.
    let twin = service_with("secret-secret-secret-secret-1234", keys);
    assert_eq!(twin.verify(&minted.token).unwrap().api_key, minted.api_key);
}

#[test]
fn names_are_bounded() {
    let issuer = |r: TokenRequest| Subject::for_request(&Caller::Issuer, &r);
    assert!(issuer(request(Some(&"x".repeat(65)), None, None)).is_err());
    assert!(issuer(request(None, Some("a b"), None)).is_err());
    assert!(issuer(request(None, None, Some(&"i".repeat(129)))).is_err());
    assert!(issuer(request(None, None, Some("a\u{0}b"))).is_err());
    assert!(issuer(request(None, None, Some(&"i".repeat(128)))).is_ok());
}
