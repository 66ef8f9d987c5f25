//! What a tab declares it handles and the session mode: only the socket holding a key declares,
//! an equal declaration changes nothing, the mode is kept for the next bind, and a wait for a
//! change ends at the change or at its deadline.

use std::time::Duration;

use relay::store::keys::{NotBound, Proof};
use relay::store::{KeyStore, TabAt};
use relay_wire::Declaration;
use serde_json::json;
use tokio::time::Instant;

use super::tabs::Tabs;
use super::{fresh_key, in_an_hour};

pub async fn cases(store: &impl KeyStore, tabs: &Tabs) {
    a_declaration_is_kept_and_counted(store, tabs).await;
    only_the_holding_socket_declares(store, tabs).await;
    the_mode_waits_for_the_next_bind(store, tabs).await;
    a_wait_ends_at_the_change_or_the_deadline(store, tabs).await;
}

fn declaration(value: serde_json::Value) -> Declaration {
    Declaration::parse(&value, 120_000).expect("a valid declaration")
}

fn token() -> Proof {
    Proof::Token { exp: in_an_hour() }
}

async fn a_declaration_is_kept_and_counted(store: &impl KeyStore, tabs: &Tabs) {
    let key = fresh_key();
    let a = tabs.socket();
    store.issue(&key, in_an_hour()).await.unwrap();
    store.bind(&key, token(), &a).await.unwrap().bound.unwrap();
    let status = store.status(&key).await.unwrap().unwrap();
    assert_eq!(
        (
            status.revision,
            status.handles,
            status.page_tools,
            status.mode
        ),
        (0, None, None, None),
        "never declared: handles every tool"
    );

    let first = declaration(json!({"tools": ["zoom", "CreateDiagram", "zoom"]}));
    assert_eq!(store.declare(&key, &a, first.clone()).await.unwrap(), Ok(1));
    let status = store.status(&key).await.unwrap().unwrap();
    assert_eq!(status.revision, 1);
    assert_eq!(
        status.handles.as_deref(),
        Some(&["CreateDiagram".to_owned(), "zoom".to_owned()][..])
    );
    assert_eq!(
        store.declare(&key, &a, first).await.unwrap(),
        Ok(1),
        "the same set again changes nothing"
    );

    let page_tool = json!({"name": "zoom", "description": "Zoom the canvas.",
                           "parameters": {"type": "object"}, "timeoutMs": 3000});
    let second = declaration(json!({"tools": ["zoom"], "pageTools": [page_tool]}));
    assert_eq!(store.declare(&key, &a, second).await.unwrap(), Ok(2));
    let status = store.status(&key).await.unwrap().unwrap();
    assert_eq!(status.handles.as_deref(), Some(&["zoom".to_owned()][..]));
    assert_eq!(status.page_tools, Some(vec![page_tool]));

    let none = declaration(json!({"tools": []}));
    assert_eq!(store.declare(&key, &a, none).await.unwrap(), Ok(3));
    let status = store.status(&key).await.unwrap().unwrap();
    assert_eq!(
        status.handles,
        Some(vec![]),
        "an empty set is not 'never said'"
    );
    assert_eq!(status.page_tools, None);
}

async fn only_the_holding_socket_declares(store: &impl KeyStore, tabs: &Tabs) {
    let key = fresh_key();
    let (a, b) = (tabs.socket(), tabs.socket());
    store.issue(&key, in_an_hour()).await.unwrap();
    let set = || declaration(json!({"tools": ["a"]}));
    assert_eq!(
        store.declare(&key, &a, set()).await.unwrap(),
        Err(NotBound),
        "issued, not bound"
    );
    store.bind(&key, token(), &a).await.unwrap().bound.unwrap();
    assert_eq!(store.declare(&key, &b, set()).await.unwrap(), Err(NotBound));
    store.bind(&key, token(), &b).await.unwrap().bound.unwrap();
    assert_eq!(
        store.declare(&key, &a, set()).await.unwrap(),
        Err(NotBound),
        "a replaced socket"
    );
    assert_eq!(store.declare(&key, &b, set()).await.unwrap(), Ok(1));
    store.release(&key, &b).await;
    assert_eq!(
        store.declare(&key, &b, set()).await.unwrap(),
        Err(NotBound),
        "released"
    );
    let status = store.status(&key).await.unwrap().unwrap();
    assert_eq!(status.revision, 1, "kept while the key waits for its tab");
    let unknown = fresh_key();
    assert_eq!(
        store.declare(&unknown, &a, set()).await.unwrap(),
        Err(NotBound)
    );
}

async fn the_mode_waits_for_the_next_bind(store: &impl KeyStore, tabs: &Tabs) {
    assert!(
        store
            .set_mode(&fresh_key(), "default")
            .await
            .unwrap()
            .is_none(),
        "unknown key"
    );
    let key = fresh_key();
    store.issue(&key, in_an_hour()).await.unwrap();
    assert!(matches!(
        store.set_mode(&key, "intro").await.unwrap(),
        Some(TabAt::Nowhere)
    ));
    let a = tabs.socket();
    let outcome = store.bind(&key, token(), &a).await.unwrap();
    assert_eq!(outcome.mode.as_deref(), Some("intro"), "told on bind");
    match store.set_mode(&key, "reading").await.unwrap() {
        Some(TabAt::Here(binding)) => assert_eq!(binding.sid(), a.id()),
        _ => panic!("a bound tab of this node is found"),
    }
    assert_eq!(
        store.status(&key).await.unwrap().unwrap().mode.as_deref(),
        Some("reading")
    );
    store.release(&key, &a).await;
    assert!(matches!(
        store.set_mode(&key, "followup").await.unwrap(),
        Some(TabAt::Nowhere)
    ));
    let b = tabs.socket();
    let outcome = store.bind(&key, token(), &b).await.unwrap();
    assert_eq!(outcome.mode.as_deref(), Some("followup"));
    store.revoke(&key).await.unwrap();
    assert!(
        store.set_mode(&key, "default").await.unwrap().is_none(),
        "revoked"
    );
}

async fn a_wait_ends_at_the_change_or_the_deadline(store: &impl KeyStore, tabs: &Tabs) {
    let missing = fresh_key();
    let soon = Instant::now() + Duration::from_millis(100);
    assert!(
        store
            .wait_status(&missing, 0, soon)
            .await
            .unwrap()
            .is_none()
    );

    let key = fresh_key();
    let a = tabs.socket();
    store.issue(&key, in_an_hour()).await.unwrap();
    store.bind(&key, token(), &a).await.unwrap().bound.unwrap();

    // Nothing changes: the answer comes at the deadline, as the key is.
    let started = Instant::now();
    let deadline = started + Duration::from_millis(300);
    let status = store.wait_status(&key, 0, deadline).await.unwrap().unwrap();
    assert_eq!(status.revision, 0);
    assert!(Instant::now() >= deadline, "answered before the deadline");

    // A declaration during the wait ends it early.
    let started = Instant::now();
    let deadline = started + Duration::from_secs(5);
    let (status, declared) = tokio::join!(store.wait_status(&key, 0, deadline), async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        store
            .declare(&key, &a, declaration(json!({"tools": ["x"]})))
            .await
    });
    assert_eq!(declared.unwrap(), Ok(1));
    let status = status.unwrap().unwrap();
    assert_eq!(status.revision, 1);
    assert_eq!(status.handles.as_deref(), Some(&["x".to_owned()][..]));
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "woken by the change, not the deadline ({:?})",
        started.elapsed()
    );

    // Behind already: at once.
    let started = Instant::now();
    let status = store
        .wait_status(&key, 0, started + Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.revision, 1);
    assert!(started.elapsed() < Duration::from_secs(1));
}
