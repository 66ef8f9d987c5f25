use super::*;
use serde_json::json;

#[test]
fn bearer_credentials() {
    assert_eq!(headers::bearer("Bearer abc"), Some("abc"));
    assert_eq!(headers::bearer("bearer  abc "), Some("abc"));
    assert_eq!(headers::bearer("Basic abc"), None);
    assert_eq!(headers::bearer("Bearer "), None);
    assert_eq!(headers::bearer("Bearerabc"), None);
}

#[test]
fn api_key_shape() {
    let good = format!("va_{}", "a1".repeat(32));
    assert!(is_api_key(&good));
    assert!(!is_api_key(&good.to_uppercase()));
    assert!(!is_api_key(&good[..good.len() - 1]));
    assert!(!is_api_key(&format!("vb_{}", "a1".repeat(32))));
    assert!(!is_api_key(&format!("va_{}", "g1".repeat(32))));
    assert!(!is_api_key(""));
}

#[test]
fn tool_names() {
    for ok in [
        "OpenPopover",
        "draw_card",
        "a",
        "x-1",
        &format!("a{}", "b".repeat(63)),
    ] {
        assert!(is_tool_name(ok), "{ok}");
    }
    for bad in [
        "",
        "1abc",
        "_x",
        "connect error",
        "a:b",
        "ü",
        "register",
        "cancel",
        "revoked",
        &format!("a{}", "b".repeat(64)),
    ] {
        assert!(!is_tool_name(bad), "{bad}");
    }
}

#[test]
fn every_code_has_one_status_and_round_trips() {
    for code in ErrorCode::ALL {
        let text = serde_json::to_string(&code).unwrap();
        assert_eq!(text, format!("\"{}\"", code.as_str()));
        assert_eq!(serde_json::from_str::<ErrorCode>(&text).unwrap(), code);
        assert!((400..600).contains(&code.http_status()));
    }
}

#[test]
fn tab_answers() {
    assert_eq!(
        TabAnswer::from_ack(json!({"ok": true, "result": {"cardId": "the-fool"}})),
        TabAnswer::Result(json!({"cardId": "the-fool"}))
    );
    assert_eq!(
        TabAnswer::from_ack(json!({"ok": true})),
        TabAnswer::Result(json!(null))
    );
    assert_eq!(
        TabAnswer::from_ack(json!({"ok": false, "error": {"code": "no_handler", "message": "m"}})),
        TabAnswer::Error(ErrorObject {
            code: "no_handler".into(),
            message: "m".into()
        })
    );
    assert_eq!(
        TabAnswer::from_ack(json!({"ok": false, "error": "boom"})),
        TabAnswer::Error(ErrorObject {
            code: "tool_failed".into(),
            message: "boom".into()
        })
    );
    // Not an envelope: the whole value is the result.
    assert_eq!(TabAnswer::from_ack(json!(42)), TabAnswer::Result(json!(42)));
    assert_eq!(
        TabAnswer::from_ack(json!({"ok": true, "count": 3})),
        TabAnswer::Result(json!({"ok": true, "count": 3}))
    );
    assert_eq!(
        TabAnswer::from_ack(json!({"success": true, "cardId": "x"})),
        TabAnswer::Result(json!({"success": true, "cardId": "x"}))
    );
}

#[test]
fn tool_call_request_keeps_params_raw() {
    let body = r#"{"apiKey":"k","toolName":"t","params":{"b":1,  "a":[1,2]}}"#;
    let req: ToolCallRequest = serde_json::from_str(body).unwrap();
    assert_eq!(req.params.unwrap().get(), r#"{"b":1,  "a":[1,2]}"#);
    assert!(!req.await_result);
}
