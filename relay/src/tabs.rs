//! The Socket.IO side: how a tab connects and binds its key, and what happens when it leaves.
//!
//! A tab binds either in the handshake (`auth: {token}`, checked by the connect middleware, so a
//! bad token is a `connect_error` with a code) or later with `voice-agent:register` (the older
//! way, acknowledged) with the token, or with the bare key once when `RELAY_ALLOW_BARE_KEYS` is
//! on (for older frontends; off by default, as a participant who sees the key in the room's
//! metadata could race the tab to bind it). Each bound socket also joins a room named after its key (its digest), which
//! is how another node's emits reach it through the Redis adapter.
//!
//! Handlers are generic over the Socket.IO adapter (in memory or Redis); with several nodes, a
//! bind, a release and a handshake's revocation check go through Redis first (see `store`).

use std::sync::Arc;

use relay_wire::{
    Declaration, ErrorCode, ErrorObject, HandlesAck, ModeEvent, RegisterAck, RevokeReason,
    RevokedEvent, events, is_api_key,
};
use serde_json::Value;
use socketioxide::SocketIo;
use socketioxide::adapter::LocalAdapter;
use socketioxide::extract::{AckSender, Data, SocketRef, State, TryData};
use socketioxide::handler::ConnectHandler;

use crate::admission::Admission;
use crate::app::App;
use crate::delivery::{dismiss, room};
use crate::sockets::{
    BoundKey, ClusterAdapter, DeclaredTools, HandshakeBind, RelayAdapter, TabSocket,
};
use crate::store::keys::{BindError, Proof};
use crate::store::{Bound, KeyStore};
use crate::tokens::{TokenError, VerifiedToken};
use relay_wire::Fp;

/// A handshake token that passed verification, handed from the middleware to the handler.
#[derive(Clone)]
struct HandshakeToken(Arc<VerifiedToken>);

/// The handshake's place among the binds this node runs at once ([`crate::admission`]), held
/// from the token check until the connect handler has bound the key.
#[derive(Clone)]
struct Turn(#[allow(dead_code)] Arc<Admission>);

/// A refused handshake. Its `Display` is the JSON object the client's `connect_error` receives:
/// `err.message` and `err.data = {code, message}`.
#[derive(Debug)]
pub struct Refusal(ErrorObject);

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let body = serde_json::json!({"message": self.0.message, "data": self.0});
        write!(f, "{body}")
    }
}

fn error_object(code: ErrorCode, message: impl Into<String>) -> ErrorObject {
    ErrorObject {
        code: code.as_str().to_owned(),
        message: message.into(),
    }
}

fn token_refusal(err: &TokenError) -> ErrorObject {
    error_object(ErrorCode::Unauthorized, err.to_string())
}

fn bind_refusal(err: BindError) -> ErrorObject {
    let code = match err {
        BindError::Unknown | BindError::Revoked => ErrorCode::UnknownKey,
        BindError::TokenRequired | BindError::Expired => ErrorCode::Unauthorized,
    };
    error_object(code, err.to_string())
}

/// Registers the default namespace's handlers (single node).
pub fn attach_local(io: &SocketIo<LocalAdapter>) {
    io.ns(
        "/",
        on_connect::<LocalAdapter>
            .with(authenticate::<LocalAdapter>)
            .with(check_origin::<LocalAdapter>),
    );
}

/// Registers the default namespace's handlers on the Redis adapter (which subscribes to its
/// channels here).
pub async fn attach_cluster(io: &SocketIo<ClusterAdapter>) -> anyhow::Result<()> {
    io.ns(
        "/",
        on_connect::<ClusterAdapter>
            .with(authenticate::<ClusterAdapter>)
            .with(check_origin::<ClusterAdapter>),
    )
    .await
    .map_err(|e| anyhow::anyhow!("the Socket.IO Redis adapter could not start: {e}"))
}

/// Refuses browser sockets from origins other than the relay's own and those
/// `RELAY_ALLOWED_ORIGINS` lists; the refusal names the origin and is logged. Clients that send
/// no `Origin` (agents, servers) are not browsers and pass.
async fn check_origin<A: RelayAdapter>(
    s: SocketRef<A>,
    State(app): State<Arc<App>>,
) -> Result<(), Refusal> {
    let Some(origin) = s.req_parts().headers.get("origin") else {
        return Ok(());
    };
    let text = origin.to_str().unwrap_or_default();
    if app.origin_allowed(text, s.req_parts().headers.get("host")) {
        return Ok(());
    }
    app.origins.refused(origin, "socket");
    let shown: String = text.chars().take(200).collect();
    Err(Refusal(error_object(
        ErrorCode::Unauthorized,
        format!(
            "the relay refused this page's origin {shown}: RELAY_ALLOWED_ORIGINS does not list it"
        ),
    )))
}

/// Verifies a handshake token. No `auth.token` at all lets the socket connect unbound (it may
/// register later); a token that is present but empty, malformed, forged or expired is refused.
///
/// This is the last middleware, and the event handlers are attached here rather than in
/// `on_connect`: socketioxide sends CONNECT to the client before it spawns the connect handler,
/// so a client that emits `voice-agent:register` at once would otherwise race the handler's
/// registration and lose its event.
async fn authenticate<A: RelayAdapter>(
    s: SocketRef<A>,
    State(app): State<Arc<App>>,
    TryData(auth): TryData<Value>,
) -> Result<(), Refusal> {
    let tab = A::tab(&s);
    check_token(&tab, &app, auth.ok()).await?;
    s.on(events::REGISTER, on_register::<A>);
    s.on(events::HANDLES, on_handles::<A>);
    s.on_disconnect(on_disconnect::<A>);
    if s.extensions.get::<HandshakeToken>().is_none() {
        close_if_never_bound(tab, app.config.unbound_socket);
    }
    Ok(())
}

/// A socket that came without a token must register within the bound, or it is closed: idle
/// unbound sockets would otherwise hold memory for nothing.
fn close_if_never_bound(s: TabSocket, bound: std::time::Duration) {
    tokio::spawn(async move {
        tokio::time::sleep(bound).await;
        if s.connected() && s.extensions().get::<BoundKey>().is_none() {
            tracing::debug!(sid = %s.id(), "closing a socket that never bound a key");
            s.disconnect();
        }
    });
}

async fn is_revoked(app: &App, key: &str) -> Result<bool, ErrorObject> {
    app.store.is_revoked(key).await.map_err(|_| unavailable())
}

/// Waits for a place among the binds this node runs at once; refused as `unavailable` (which
/// the client retries) when none comes within `RELAY_BIND_WAIT_MS`.
async fn take_turn(app: &App) -> Result<Admission, ErrorObject> {
    app.binds.admit(app.config.bind_wait).await.ok_or_else(|| {
        app.metrics.binds_refused_busy.inc();
        tracing::debug!("bind refused: this node is binding as many tabs as it can");
        error_object(
            ErrorCode::Unavailable,
            "this relay is busy binding other tabs; try again shortly",
        )
    })
}

fn unavailable() -> ErrorObject {
    let e = crate::error::ApiError::unavailable();
    error_object(e.code, e.message)
}

async fn check_token(s: &TabSocket, app: &App, auth: Option<Value>) -> Result<(), Refusal> {
    let token = match auth.as_ref().and_then(|a| a.get("token")) {
        None => return Ok(()),
        Some(Value::String(t)) => t.clone(),
        Some(_) => {
            return Err(Refusal(error_object(
                ErrorCode::Unauthorized,
                "auth.token must be a string",
            )));
        }
    };
    let verified = app.tokens.verify(&token).map_err(|err| {
        tracing::info!(token = %Fp(&token), reason = %err, "handshake refused");
        Refusal(token_refusal(&err))
    })?;
    // Only a token that verifies waits for a place among the binds.
    let turn = take_turn(app).await.map_err(Refusal)?;
    match is_revoked(app, &verified.api_key).await {
        Ok(true) => {
            tracing::info!(key = %Fp(&verified.api_key), "handshake refused: key revoked");
            Err(Refusal(bind_refusal(BindError::Revoked)))
        }
        Ok(false) => {
            s.extensions().insert(HandshakeToken(Arc::new(verified)));
            s.extensions().insert(Turn(Arc::new(turn)));
            s.extensions()
                .insert(HandshakeBind(Arc::new(tokio::sync::Notify::new())));
            Ok(())
        }
        Err(e) => Err(Refusal(e)),
    }
}

async fn on_connect<A: RelayAdapter>(s: SocketRef<A>, State(app): State<Arc<App>>) {
    let Some(HandshakeToken(verified)) = s.extensions.remove::<HandshakeToken>() else {
        return;
    };
    let proof = Proof::Token { exp: verified.exp };
    let tab = A::tab(&s);
    let bound = bind(&app, &tab, &verified.api_key, proof).await;
    s.extensions.remove::<Turn>();
    if let Some(HandshakeBind(done)) = s.extensions.remove::<HandshakeBind>() {
        done.notify_waiters();
    }
    if let Err(err) = bound {
        // The middleware checked the key; it was revoked in between: tell the tab and drop it.
        // When Redis is unreachable the tab is only dropped, so the client reconnects later.
        tracing::info!(key = %Fp(&verified.api_key), reason = %err.message, "bind refused");
        if err.code != ErrorCode::Unavailable.as_str() {
            let _ = tab.emit(
                events::REVOKED,
                &RevokedEvent {
                    reason: RevokeReason::Revoked,
                },
            );
        }
        tab.disconnect();
    }
}

async fn on_register<A: RelayAdapter>(
    s: SocketRef<A>,
    State(app): State<Arc<App>>,
    Data(arg): Data<Value>,
    ack: AckSender<A>,
) {
    let s = A::tab(&s);
    let outcome = match &arg {
        Value::String(k) if is_api_key(k) && !app.config.allow_bare_keys => {
            tracing::info!(key = %Fp(k), "register refused: bare keys are off");
            Err(error_object(
                ErrorCode::Unauthorized,
                "this relay does not bind bare keys; present the token (auth.token in the \
                 handshake, or voice-agent:register with the token)",
            ))
        }
        Value::String(k) if is_api_key(k) => bind_in_turn(&app, &s, k, Proof::BareKey).await,
        Value::String(k) if k.starts_with(relay_wire::API_KEY_PREFIX) => Err(error_object(
            ErrorCode::InvalidRequest,
            "a key is va_ followed by 64 lowercase hex characters",
        )),
        Value::String(jwt) => match app.tokens.verify(jwt) {
            Ok(v) => bind_in_turn(&app, &s, &v.api_key, Proof::Token { exp: v.exp }).await,
            Err(err) => {
                tracing::info!(token = %Fp(jwt), reason = %err, "register refused");
                Err(token_refusal(&err))
            }
        },
        Value::Object(o) => match o.get("token").or_else(|| o.get("apiKey")) {
            Some(Value::String(_)) => Err(error_object(
                ErrorCode::InvalidRequest,
                "pass the key or the token itself as the argument",
            )),
            _ => Err(error_object(
                ErrorCode::InvalidRequest,
                "expected a key or a token",
            )),
        },
        _ => Err(error_object(
            ErrorCode::InvalidRequest,
            "expected a key or a token",
        )),
    };
    let answer = match outcome {
        Ok(()) => RegisterAck {
            ok: true,
            error: None,
        },
        Err(error) => RegisterAck {
            ok: false,
            error: Some(error),
        },
    };
    let _ = ack.send(&answer);
}

/// [`bind`] once a place among the binds is free (a registration; a handshake takes its place in
/// the middleware).
async fn bind_in_turn(
    app: &App,
    s: &TabSocket,
    key: &str,
    proof: Proof,
) -> Result<(), ErrorObject> {
    let _turn = take_turn(app).await?;
    bind(app, s, key, proof).await
}

/// Binds `key` to socket `s`, unbinding whatever key `s` held before and displacing whatever
/// socket held `key` (on this node directly, on another node through the adapter).
async fn bind(app: &App, s: &TabSocket, key: &str, proof: Proof) -> Result<(), ErrorObject> {
    if let Some(BoundKey(previous)) = s.extensions().get::<BoundKey>()
        && &*previous != key
    {
        release(app, &previous, s).await;
        s.leave(room(&previous));
    }
    let outcome = app
        .store
        .bind(key, proof, s)
        .await
        .map_err(|_| unavailable())?;
    if let Some(node) = &outcome.replaced_on {
        tracing::info!(key = %Fp(key), "tab on another node replaced");
        if let Some(io) = app.io.get() {
            io.dismiss_in_room(room(key), app.server_of(node), key, RevokeReason::Replaced)
                .await;
        }
    }
    let displaced = match outcome.bound {
        Ok(Bound::Same) => return Ok(()),
        Ok(Bound::Bound { displaced }) => displaced,
        Err(err) => return Err(bind_refusal(err)),
    };
    let key: Arc<str> = key.into();
    s.join(room(&key));
    if s.extensions()
        .get::<BoundKey>()
        .is_some_and(|BoundKey(k)| k != key)
    {
        // What the socket declared was for the key it held before.
        s.extensions().remove::<DeclaredTools>();
    }
    s.extensions().insert(BoundKey(key.clone()));
    if !s.connected() {
        // The socket closed while binding; its disconnect handler may have run before the key
        // was recorded, so release here too (releasing twice is harmless).
        release(app, &key, s).await;
        return Ok(());
    }
    tracing::info!(key = %Fp(&key), sid = %s.id(), via = ?proof_kind(proof), "tab bound");
    if let Some(old) = displaced {
        tracing::info!(key = %Fp(&key), old_sid = %old.binding.sid(), "older tab replaced");
        dismiss(old);
    }
    if let Some(mode) = outcome.mode {
        // The session's mode, set before this tab bound: it shows it from the start.
        let _ = s.emit(events::MODE, &ModeEvent { mode: mode.into() });
    }
    Ok(())
}

/// `voice-agent:handles`: the tab says which tools it handles now (the whole set each time) and,
/// optionally, the tools its page defines. Only the socket that holds a key may declare.
async fn on_handles<A: RelayAdapter>(
    s: SocketRef<A>,
    State(app): State<Arc<App>>,
    TryData(arg): TryData<Value>,
    ack: AckSender<A>,
) {
    let s = A::tab(&s);
    let answer = match declare(&app, &s, arg.ok()).await {
        Ok(revision) => HandlesAck {
            ok: true,
            revision: Some(revision),
            error: None,
        },
        Err(error) => HandlesAck {
            ok: false,
            revision: None,
            error: Some(error),
        },
    };
    let _ = ack.send(&answer);
}

/// The key `s` holds, once its handshake bind (if one runs) is over (at most
/// [`crate::sockets::BIND_WAIT`]).
async fn bound_key(s: &TabSocket) -> Option<Arc<str>> {
    crate::sockets::settled_key(s, crate::sockets::BIND_WAIT).await
}

async fn declare(app: &App, s: &TabSocket, arg: Option<Value>) -> Result<u64, ErrorObject> {
    let Some(key) = bound_key(s).await else {
        return Err(error_object(
            ErrorCode::Unauthorized,
            "bind a key before declaring the tools this tab handles",
        ));
    };
    let max_timeout_ms = u64::try_from(app.config.max_timeout.as_millis()).unwrap_or(u64::MAX);
    let declared = Declaration::parse(&arg.unwrap_or(Value::Null), max_timeout_ms)
        .map_err(|why| error_object(ErrorCode::InvalidRequest, why))?;
    let names: Arc<str> = declared.joined().into();
    match app.store.declare(&key, s, declared).await {
        Ok(Ok(revision)) => {
            s.extensions().insert(DeclaredTools(names));
            tracing::debug!(key = %Fp(&key), revision, "tab declared its tools");
            Ok(revision)
        }
        Ok(Err(_)) => Err(error_object(
            ErrorCode::Unauthorized,
            "this socket no longer holds its key",
        )),
        Err(_) => Err(unavailable()),
    }
}

/// Releases `key` from socket `s` (on this node and, with several nodes, in Redis).
async fn release(app: &App, key: &str, s: &TabSocket) {
    app.store.release(key, s).await;
}

fn proof_kind(proof: Proof) -> &'static str {
    match proof {
        Proof::Token { .. } => "token",
        Proof::BareKey => "key",
    }
}

async fn on_disconnect<A: RelayAdapter>(s: SocketRef<A>, State(app): State<Arc<App>>) {
    if let Some(BoundKey(key)) = s.extensions.get::<BoundKey>() {
        release(&app, &key, &A::tab(&s)).await;
        tracing::info!(key = %Fp(&key), sid = %s.id, "tab left; key offline");
    }
}
