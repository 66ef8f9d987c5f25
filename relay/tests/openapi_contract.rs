//! The published contract: `GET /openapi.json` describes every operation of the HTTP API with
//! its security and every error body and status of the error table; and no request path leads
//! the static-file service to a 500. `relay::run` on port 0, driven with reqwest over loopback.

use std::path::PathBuf;

use relay_wire::ErrorCode;
use serde_json::{Value, json};

const ISSUER_SECRET: &str = "test-issuer-secret-0123456789abcdef";

mod common;

struct TestApp {
    relay: common::Relay,
    web_dir: PathBuf,
}

/// A relay in issuer mode serving a demo directory of its own (an `index.html` and a `lib/`).
async fn spawn_app(name: &str) -> TestApp {
    let web_dir = std::env::temp_dir().join(format!("relay-test-{name}-{}", std::process::id()));
    std::fs::create_dir_all(web_dir.join("lib")).unwrap();
    std::fs::write(
        web_dir.join("index.html"),
        "<!doctype html><title>t</title>",
    )
    .unwrap();
    std::fs::write(web_dir.join("lib/app.js"), "export {};").unwrap();
    let relay = common::start(&[
        "--default-timeout-ms",
        "5000",
        "--max-timeout-ms",
        "7000",
        "--token-mode",
        "issuer",
        "--token-issuer-secret",
        ISSUER_SECRET,
        "--web-dir",
        web_dir.to_str().unwrap(),
    ])
    .await;
    TestApp { relay, web_dir }
}

impl TestApp {
    async fn status(&self, method: reqwest::Method, path: &str) -> u16 {
        self.relay
            .http
            .request(method, self.relay.url(path))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    }

    async fn shutdown(self) {
        self.relay.shutdown().await;
        let _ = std::fs::remove_dir_all(&self.web_dir);
    }
}

/// `(METHOD, path)` of every operation in the document.
fn operations(doc: &Value) -> Vec<(String, String)> {
    let mut ops = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            ops.push((method.to_uppercase(), path.clone()));
        }
    }
    ops.sort();
    ops
}

#[tokio::test]
async fn the_document_describes_every_operation_and_the_error_table() {
    let app = spawn_app("openapi").await;
    let r = app
        .relay
        .http
        .get(app.relay.url("/openapi.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(
        r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/json")
    );
    let doc: Value = r.json().await.unwrap();
    assert_eq!(doc["openapi"], "3.1.0");

    let expected: Vec<(String, String)> = [
        ("DELETE", "/api/voice-agent/keys/{apiKey}"),
        ("DELETE", "/api/voice-agent/sessions/{sessionId}"),
        ("GET", "/api/voice-agent/keys/{apiKey}"),
        ("GET", "/api/voice-agent/session-keys"),
        ("GET", "/healthz"),
        ("GET", "/metrics"),
        ("GET", "/openapi.json"),
        ("GET", "/readyz"),
        ("GET", "/token"),
        ("POST", "/api/voice-agent/sessions"),
        ("POST", "/api/voice-agent/tool-call"),
        ("POST", "/api/voice-agent/tool-call/cancel"),
        ("POST", "/token"),
        ("PUT", "/api/voice-agent/keys/{apiKey}/mode"),
    ]
    .iter()
    .map(|(m, p)| (m.to_string(), p.to_string()))
    .collect();
    assert_eq!(operations(&doc), expected);

    // The closed list of codes, in table order.
    let codes: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
    assert_eq!(
        doc["components"]["schemas"]["ErrorCode"]["enum"],
        json!(codes)
    );
    assert_eq!(
        doc["components"]["schemas"]["ErrorObject"]["properties"]["code"]["$ref"],
        "#/components/schemas/ErrorCode"
    );
    assert_eq!(
        doc["components"]["schemas"]["ErrorBody"]["properties"]["ok"]["enum"],
        json!([false])
    );

    // Every status of the table is a documented answer of the tool-call endpoint, with the one
    // failure body; and every 4xx/5xx answer anywhere in the API (but readiness's) has that body.
    let tool_call = &doc["paths"]["/api/voice-agent/tool-call"]["post"];
    for code in ErrorCode::ALL {
        let status = code.http_status().to_string();
        let response = &tool_call["responses"][&status];
        assert_eq!(
            response["content"]["application/json"]["schema"]["$ref"],
            "#/components/schemas/ErrorBody",
            "{code} ({status}) is documented with the error body"
        );
        assert!(
            response["description"]
                .as_str()
                .unwrap()
                .contains(&format!("`{code}`")),
            "{code} is named under {status}"
        );
    }
    for (method, path) in operations(&doc) {
        let responses = &doc["paths"][&path][method.to_lowercase()]["responses"];
        for (status, response) in responses.as_object().unwrap() {
            if status.as_str() >= "400" && path != "/readyz" {
                assert_eq!(
                    response["content"]["application/json"]["schema"]["$ref"],
                    "#/components/schemas/ErrorBody",
                    "{method} {path} {status}"
                );
            }
        }
    }

    // Security: a session token on the agent API, the servers' secrets where they reach; the
    // token service's three modes.
    let schemes = &doc["components"]["securitySchemes"];
    for name in [
        "session_token",
        "worker_secret",
        "operator_secret",
        "issuer_secret",
        "app_jwt",
    ] {
        assert_eq!(schemes[name]["scheme"], "bearer", "{name}");
    }
    assert_eq!(schemes["app_jwt"]["bearerFormat"], "JWT");
    assert_eq!(schemes["session_token"]["bearerFormat"], "JWT");
    assert_eq!(
        doc["paths"]["/api/voice-agent/keys/{apiKey}"]["delete"]["security"],
        json!([{"worker_secret": []}, {"operator_secret": []}]),
        "a session token never revokes"
    );
    for op in ["post", "get"] {
        assert_eq!(
            doc["paths"]["/token"][op]["security"],
            json!([{"issuer_secret": []}, {"app_jwt": []}, {}])
        );
    }
    assert_eq!(tool_call["security"], json!([{"session_token": []}]));
    let idempotency = tool_call["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "Idempotency-Key")
        .expect("the Idempotency-Key header is documented");
    assert_eq!(idempotency["in"], "header");
    assert_eq!(idempotency["required"], false);

    // This relay's own limit.
    assert_eq!(
        doc["components"]["schemas"]["ToolCallRequest"]["properties"]["timeoutMs"]["maximum"],
        7000
    );
    app.shutdown().await;
}

#[tokio::test]
async fn no_request_path_makes_the_static_files_fail() {
    use reqwest::Method;
    let app = spawn_app("static").await;
    assert_eq!(app.status(Method::GET, "/").await, 200);
    assert_eq!(app.status(Method::GET, "/lib/app.js").await, 200);
    let long = "a".repeat(300);
    for path in [
        format!("/{long}"),
        format!("/lib/{long}"),
        format!("/{long}/index.html"),
        format!("/{}", "%C3%A9".repeat(200)),
        format!("/{}", "b".repeat(255)),
        "/index.html/x".to_owned(),
        "/nothing-here".to_owned(),
    ] {
        // ServeDir answered 500 for a segment over the file system's 255-byte name limit.
        assert_eq!(app.status(Method::GET, &path).await, 404, "GET {path}");
        assert_eq!(app.status(Method::HEAD, &path).await, 404, "HEAD {path}");
    }
    app.shutdown().await;
}
