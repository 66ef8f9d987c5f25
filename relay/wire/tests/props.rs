//! Property tests for every parser of outside input in the wire crate: none panics on any input,
//! each agrees with a plain statement of its rule, and where a value can be printed and parsed
//! back, parse ∘ print is the identity.

use proptest::prelude::*;
use relay_wire::{
    CallMeta, ErrorBody, ErrorCode, ErrorObject, KeyState, KeyStatus, ParticipantMetadata,
    RegisterAck, TabAnswer, TokenRequest, TokenResponse, ToolCallRequest, headers, is_api_key,
    is_tool_name,
};
use serde_json::{Value, json};

/// The key rule as the contract states it: `va_` + 64 lowercase hex characters.
fn key_rule(s: &str) -> bool {
    s.len() == 67
        && s.starts_with("va_")
        && s[3..]
            .chars()
            .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
}

/// The tool-name rule: `^[A-Za-z][A-Za-z0-9_-]{0,63}$`.
fn tool_rule(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic())
        && s.chars().count() <= 64
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Any JSON value, nested a few levels.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        ".{0,20}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(".{0,8}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn opt_string() -> impl Strategy<Value = Option<String>> {
    prop::option::of(".{0,40}")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn keys_follow_the_rule(s in ".{0,80}") {
        prop_assert_eq!(is_api_key(&s), key_rule(&s));
        prop_assert_eq!(relay_wire::ApiKey::parse(s.clone()).is_some(), key_rule(&s));
    }

    #[test]
    fn well_formed_keys_pass(hex in "[0-9a-f]{64}") {
        let key = format!("va_{hex}");
        prop_assert!(is_api_key(&key));
        prop_assert!(!is_api_key(&key.to_uppercase()));
        prop_assert!(!is_api_key(&key[..66]));
    }

    #[test]
    fn tool_names_follow_the_rule(s in ".{0,80}") {
        prop_assert_eq!(is_tool_name(&s), tool_rule(&s));
        prop_assert_eq!(relay_wire::ToolName::parse(s.clone()).is_some(), tool_rule(&s));
    }

    #[test]
    fn generated_tool_names_pass(s in "[A-Za-z][A-Za-z0-9_-]{0,63}") {
        prop_assert!(is_tool_name(&s));
    }

    #[test]
    fn bearer_never_panics(s in ".{0,200}") {
        let _ = headers::bearer(&s);
    }

    #[test]
    fn bearer_reads_back_what_was_printed(scheme in "(?i)bearer", credential in "[!-~]{1,80}") {
        let header = format!("{scheme} {credential}");
        prop_assert_eq!(headers::bearer(&header), Some(credential.as_str()));
        let basic = format!("Basic {credential}");
        prop_assert_eq!(headers::bearer(&basic), None);
    }

    #[test]
    fn request_bodies_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        let _ = serde_json::from_slice::<ToolCallRequest>(&bytes);
        let _ = serde_json::from_slice::<TokenRequest>(&bytes);
        let _ = serde_json::from_slice::<ParticipantMetadata>(&bytes);
        let _ = serde_json::from_slice::<ErrorBody>(&bytes);
    }

    #[test]
    fn tab_answers_never_panic_and_read_envelopes(value in json_value()) {
        let _ = TabAnswer::from_ack(value.clone());
        prop_assert_eq!(
            TabAnswer::from_ack(json!({"ok": true, "result": value.clone()})),
            TabAnswer::Result(value.clone())
        );
        // A value that is not an envelope is the result itself.
        if !value.as_object().is_some_and(|o| o.contains_key("ok")) {
            prop_assert_eq!(TabAnswer::from_ack(value.clone()), TabAnswer::Result(value));
        }
    }

    #[test]
    fn tab_errors_read_back(code in ".{0,20}", message in ".{0,40}") {
        let ack = json!({"ok": false, "error": {"code": code, "message": message}});
        prop_assert_eq!(TabAnswer::from_ack(ack), TabAnswer::Error(ErrorObject { code, message }));
    }

    #[test]
    fn token_request_round_trips(
        participant_name in opt_string(),
        room_name in opt_string(),
        identity in opt_string(),
    ) {
        let req = TokenRequest { participant_name, room_name, identity };
        let printed = serde_json::to_string(&req).unwrap();
        prop_assert_eq!(serde_json::from_str::<TokenRequest>(&printed).unwrap(), req);
    }

    #[test]
    fn token_response_round_trips(
        token in ".{0,60}", url in ".{0,30}", room_name in ".{0,20}", identity in ".{0,20}",
        hex in "[0-9a-f]{64}", expires_at in any::<u64>(),
    ) {
        let r = TokenResponse {
            agent_token: format!("{token}.agent"), agent_session_id: format!("s_{hex}"),
            agent_token_expires_at: expires_at / 2,
            token, url, room_name, identity, api_key: format!("va_{hex}"), expires_at,
        };
        let printed = serde_json::to_string(&r).unwrap();
        prop_assert_eq!(serde_json::from_str::<TokenResponse>(&printed).unwrap(), r);
    }

    #[test]
    fn tool_call_request_round_trips(
        hex in "[0-9a-f]{64}", tool in "[A-Za-z][A-Za-z0-9_-]{0,63}", params in prop::option::of(json_value()),
        await_result in any::<bool>(), timeout_ms in prop::option::of(any::<u64>()),
    ) {
        let body = json!({
            "apiKey": format!("va_{hex}"), "toolName": tool, "params": params,
            "awaitResult": await_result, "timeoutMs": timeout_ms,
        });
        let text = serde_json::to_string(&body).unwrap();
        let parsed: ToolCallRequest = serde_json::from_str(&text).unwrap();
        let printed = serde_json::to_string(&parsed).unwrap();
        let reparsed: ToolCallRequest = serde_json::from_str(&printed).unwrap();
        prop_assert_eq!(&parsed.api_key, &reparsed.api_key);
        prop_assert_eq!(&parsed.tool_name, &reparsed.tool_name);
        prop_assert_eq!(parsed.await_result, reparsed.await_result);
        prop_assert_eq!(parsed.timeout_ms, reparsed.timeout_ms);
        // Params travel as raw JSON text: the very bytes the agent sent come out again.
        let raw = |r: &ToolCallRequest| r.params.as_ref().map(|p| p.get().to_owned());
        prop_assert_eq!(raw(&parsed), raw(&reparsed));
        let sent = params.filter(|p| !p.is_null()).map(|p| serde_json::to_string(&p).unwrap());
        prop_assert_eq!(raw(&parsed).filter(|p| p != "null"), sent);
    }

    #[test]
    fn error_bodies_round_trip(call_id in opt_string(), message in ".{0,40}", which in 0usize..13) {
        let code = ErrorCode::ALL[which % ErrorCode::ALL.len()];
        let body = ErrorBody::new(code, message, call_id);
        let printed = serde_json::to_string(&body).unwrap();
        prop_assert_eq!(serde_json::from_str::<ErrorBody>(&printed).unwrap(), body);
    }

    #[test]
    fn small_payloads_round_trip(
        call_id in ".{0,30}", expects in any::<bool>(), deadline in prop::option::of(any::<u64>()),
        since in any::<u64>(), grace in prop::option::of(any::<u64>()), state in 0u8..3, ok in any::<bool>(),
    ) {
        let meta = CallMeta { call_id: call_id.clone(), expects_result: expects, deadline_ms: deadline };
        prop_assert_eq!(serde_json::from_str::<CallMeta>(&serde_json::to_string(&meta).unwrap()).unwrap(), meta);
        let state = [KeyState::Issued, KeyState::Online, KeyState::Offline][state as usize];
        let handles = deadline.map(|n| vec![format!("tool{}", n % 7)]);
        let mode = grace.map(|n| format!("mode{}", n % 5));
        let status = KeyStatus {
            ok, state, fingerprint: call_id, since_ms: since, grace_ends_ms: grace,
            token_expires_ms: grace.map(|g| g / 3), revision: since / 2, handles, page_tools: None, mode,
        };
        prop_assert_eq!(serde_json::from_str::<KeyStatus>(&serde_json::to_string(&status).unwrap()).unwrap(), status);
        let ack = RegisterAck { ok, error: (!ok).then(|| ErrorObject { code: "unauthorized".into(), message: "m".into() }) };
        prop_assert_eq!(serde_json::from_str::<RegisterAck>(&serde_json::to_string(&ack).unwrap()).unwrap(), ack);
    }
}
