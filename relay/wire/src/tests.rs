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

#[test]
fn timed_tab_answers() {
    // A relay that asked for the handler's time reads it beside the envelope.
    assert_eq!(
        TabAnswer::from_timed_ack(json!({"ok": true, "result": 1, "handlerMs": 12.5})),
        (TabAnswer::Result(json!(1)), Some(12.5))
    );
    assert_eq!(
        TabAnswer::from_timed_ack(
            json!({"ok": false, "error": {"code": "no_handler", "message": "m"}, "handlerMs": 0})
        ),
        (
            TabAnswer::Error(ErrorObject {
                code: "no_handler".into(),
                message: "m".into()
            }),
            Some(0.0)
        )
    );
    assert_eq!(
        TabAnswer::from_timed_ack(json!({"ok": true, "result": 1})),
        (TabAnswer::Result(json!(1)), None)
    );
    // A handler time that is not a number of milliseconds: no envelope, the value is the result.
    for bad in [json!(-1), json!("5"), json!(null), json!([1])] {
        let value = json!({"ok": true, "result": 1, "handlerMs": bad});
        assert_eq!(
            TabAnswer::from_timed_ack(value.clone()),
            (TabAnswer::Result(value), None)
        );
    }
    // A relay that never asked never takes the field out of what the tab answered: an older
    // relay hands such an answer to the agent whole, and so does this reading.
    let value = json!({"ok": true, "result": 1, "handlerMs": 3});
    assert_eq!(TabAnswer::from_ack(value.clone()), TabAnswer::Result(value));
}

#[test]
fn call_meta_names_what_the_relay_accepts() {
    let meta = CallMeta {
        call_id: "c_1".into(),
        expects_result: true,
        deadline_ms: Some(10),
        traceparent: None,
        tracestate: None,
        accepts_handler_ms: false,
    };
    // Without a trace and without the handler's time, the meta is what it always was.
    assert_eq!(
        serde_json::to_value(&meta).unwrap(),
        json!({"callId": "c_1", "expectsResult": true, "deadlineMs": 10})
    );
    let meta = CallMeta {
        traceparent: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into()),
        tracestate: Some("congo=t61rcWkgMzE".into()),
        accepts_handler_ms: true,
        ..meta
    };
    assert_eq!(
        serde_json::to_value(&meta).unwrap(),
        json!({"callId": "c_1", "expectsResult": true, "deadlineMs": 10,
            "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "tracestate": "congo=t61rcWkgMzE", "acceptsHandlerMs": true})
    );
}

#[test]
fn traceparent_grammar() {
    let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let parsed = TraceParent::parse(good).unwrap();
    assert_eq!(parsed.as_str(), good);
    assert_eq!(parsed.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(parsed.parent_id(), "00f067aa0ba902b7");
    assert!(parsed.sampled());
    assert!(
        !TraceParent::parse(&good.replace("-01", "-00"))
            .unwrap()
            .sampled()
    );
    assert!(
        TraceParent::parse(&good.replace("-01", "-03"))
            .unwrap()
            .sampled()
    );
    assert_eq!(
        TraceParent::parse(&format!(" {good}\t")).unwrap().as_str(),
        good
    );
    // A later version: its first 55 characters, followed by a dash, kept as version 00.
    let later = "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-comes-next";
    assert_eq!(TraceParent::parse(later).unwrap().as_str(), good);
    for bad in [
        "",
        "00",
        // version ff is forbidden, version 00 is exactly 55 characters
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",
        "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
        // upper case, all-zero ids, wrong lengths, wrong separators, not hex
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
        "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b-701",
        "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
        "0g-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01é",
    ] {
        assert_eq!(TraceParent::parse(bad), None, "{bad:?}");
    }
    let built = TraceParent::new("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", true);
    assert_eq!(built.unwrap().as_str(), good);
}

#[test]
fn tracestate_grammar() {
    let ok = |v: &str| TraceState::parse(v).map(|s| s.as_str().to_owned());
    assert_eq!(ok("congo=t61rcWkgMzE"), Some("congo=t61rcWkgMzE".into()));
    assert_eq!(
        ok("rojo=00f067aa0ba902b7 , congo=t61rcWkgMzE,,"),
        Some("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE".into())
    );
    assert_eq!(
        ok("fw529a3039@dt=value"),
        Some("fw529a3039@dt=value".into())
    );
    assert_eq!(ok("a=b c"), Some("a=b c".into()));
    // Blanks around members are optional whitespace, not part of a value.
    assert_eq!(ok(" a=b , c=d "), Some("a=b,c=d".into()));
    for bad in [
        "",
        " , ",
        "Congo=x",
        "1abc=x",
        "a=",
        "a=b=c",
        "a=x,a=y",
        "a@=x",
        "@b=x",
        "a@B=x",
        "a@abcdefghijklmno=x",
        "a=\u{7f}",
        "a=é",
    ] {
        assert_eq!(ok(bad), None, "{bad:?}");
    }
    let members: Vec<String> = (0..33).map(|i| format!("k{i}=v")).collect();
    assert_eq!(ok(&members.join(",")), None, "33 members");
    assert!(ok(&members[..32].join(",")).is_some(), "32 members");
    let long = format!("a={}", "x".repeat(257));
    assert_eq!(ok(&long), None, "a value of 257 characters");
    let big: Vec<String> = (0..5)
        .map(|i| format!("k{i}={}", "x".repeat(120)))
        .collect();
    assert_eq!(ok(&big.join(",")), None, "over 512 characters");
}

#[test]
fn trace_context_from_headers() {
    let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let ctx = TraceContext::from_values(Some(tp), Some("congo=x")).unwrap();
    assert_eq!(ctx.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(ctx.state.unwrap().as_str(), "congo=x");
    // A bad tracestate is dropped, the traceparent kept.
    let ctx = TraceContext::from_values(Some(tp), Some("Bad=x")).unwrap();
    assert_eq!(ctx.state, None);
    // No valid traceparent: no context, whatever the tracestate.
    assert_eq!(TraceContext::from_values(None, Some("congo=x")), None);
    assert_eq!(
        TraceContext::from_values(Some("00-x"), Some("congo=x")),
        None
    );
}

#[test]
fn server_timing_prints_and_reads_back() {
    let t = ServerTiming {
        relay_ms: 0.4124,
        delivery_ms: Some(1.03),
        tab_ms: Some(12.5),
    };
    assert_eq!(
        t.header_value(),
        "relay;dur=0.412, delivery;dur=1.030, tab;dur=12.500"
    );
    let back = ServerTiming::parse(&t.header_value()).unwrap();
    assert_eq!(back.delivery_ms, Some(1.03));
    assert_eq!(back.tab_ms, Some(12.5));
    let only = ServerTiming {
        relay_ms: 2.0,
        delivery_ms: None,
        tab_ms: None,
    };
    assert_eq!(only.header_value(), "relay;dur=2.000");
    assert_eq!(ServerTiming::parse("relay;dur=2.000"), Some(only));
    // Other metrics and descriptions are skipped; no relay duration, no timing.
    let parsed = ServerTiming::parse("cdn;dur=5, relay;desc=\"x\";dur=1.5, tab;dur=3").unwrap();
    assert_eq!((parsed.relay_ms, parsed.tab_ms), (1.5, Some(3.0)));
    assert_eq!(ServerTiming::parse("tab;dur=3"), None);
    assert_eq!(ServerTiming::parse("relay;dur=-1"), None);
    assert_eq!(ServerTiming::parse(""), None);
}
