//! The catalog checks: the default catalog, an app's own, and broken ones, each refused with
//! its problem named at its place.

use serde_json::{Value, json};

use super::export::{Format, Target, export};
use super::*;

fn parse(doc: Value) -> Result<Catalog, Vec<Problem>> {
    Catalog::parse("app.json", &serde_json::to_string_pretty(&doc).unwrap())
}

fn tool(name: &str, modes: Option<&[&str]>) -> Value {
    let mut t = json!({"name": name, "description": format!("{name} does something"),
        "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}, "additionalProperties": false}});
    if let Some(modes) = modes {
        t["modes"] = json!(modes);
    }
    t
}

/// A diagram editor's catalog: its own tools and modes, one of them nested.
fn diagram_app() -> Value {
    json!({
        "initialMode": "editing",
        "modes": [
            {"id": "editing", "instructions": "Edit diagrams.", "next": ["review", "help"]},
            {"id": "review", "instructions": "Review the diagram.", "next": ["editing"]},
            {"id": "help", "instructions": "Answer questions.", "next": [], "nested": true}
        ],
        "tools": [
            tool("CreateDiagram", Some(&["editing"])),
            tool("SaveDiagram", Some(&["editing", "review"])),
            tool("ShowHelp", None),
        ]
    })
}

#[test]
fn the_default_catalog_is_valid() {
    let catalog = Catalog::default_catalog().unwrap();
    assert_eq!(catalog.initial_mode(), "default");
    let names: Vec<&str> = catalog.tools().map(|t| t.spec.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "OpenPopover",
            "pin_note",
            "draw_card",
            "show_card",
            "present_to_cassette",
            "loading_status"
        ]
    );
    let draw = catalog.tool("draw_card").unwrap();
    assert!(draw.spec.await_result);
    assert_eq!(draw.spec.timeout_ms, Some(120_000));
    draw.validate(&json!({"positionLabel": "Past", "promptRole": "What shaped this"}))
        .unwrap();
    assert!(draw.validate(&json!({"positionLabel": "Past"})).is_err());
    let show = catalog.tool("show_card").unwrap();
    show.validate(&json!({"cardId": "the-fool", "reversed": true}))
        .unwrap();
    assert!(
        show.validate(&json!({"cardId": "The Fool", "reversed": true}))
            .is_err()
    );
    assert!(show.answer_fits(&json!({"success": true, "cardId": "x", "reversed": false})));
    assert!(!show.answer_fits(&json!({"success": true})));
    let spread: Vec<&str> = catalog
        .tools_for("spread")
        .map(|t| t.spec.name.as_str())
        .collect();
    assert_eq!(spread, ["draw_card"]);
    assert!(catalog.claims("enter_spread"));
    assert!(!catalog.claims("enter_nowhere"));
}

#[test]
fn an_apps_own_tools_and_modes() {
    let catalog = parse(diagram_app()).unwrap();
    assert_eq!(catalog.initial_mode(), "editing");
    let in_review: Vec<&str> = catalog
        .tools_for("review")
        .map(|t| t.spec.name.as_str())
        .collect();
    assert_eq!(
        in_review,
        ["SaveDiagram", "ShowHelp"],
        "no modes = every mode"
    );
    assert!(catalog.mode("help").unwrap().nested);
    assert!(catalog.claims("leave_help"));
    assert!(
        catalog
            .summary()
            .contains("3 tools, 3 modes, starting in editing")
    );
}

#[test]
fn a_catalog_without_modes_has_one() {
    let catalog = parse(json!({"tools": [tool("Ping", None)]})).unwrap();
    assert_eq!(catalog.initial_mode(), IMPLICIT_MODE);
    assert_eq!(catalog.tools_for(IMPLICIT_MODE).count(), 1);
    // Comments and trailing commas are accepted in the file.
    let text = "{\n  // the app's tools\n  \"tools\": [\n    {\"name\": \"Ping\", \"description\": \"p\", \"parameters\": {\"type\": \"object\"},},\n  ],\n}\n";
    assert!(Catalog::parse("app.json", text).is_ok());
}

/// Each broken catalog is refused, and its first problem names the place and says what.
#[test]
fn broken_catalogs_are_refused_with_their_place() {
    let cases: Vec<(&str, Value, &str, &str)> = vec![
        (
            "a schema that does not compile",
            json!({"tools": [{"name": "A", "description": "a", "parameters": {"type": "object", "properties": {"x": {"type": "nope"}}}}]}),
            "tools[0].parameters",
            "does not compile",
        ),
        (
            "parameters that are not an object schema",
            json!({"tools": [{"name": "A", "description": "a", "parameters": {"type": "string"}}]}),
            "tools[0].parameters",
            "\"type\": \"object\"",
        ),
        (
            "an unknown mode in a tool",
            json!({"modes": [{"id": "m"}], "tools": [tool("A", Some(&["m", "ghost"]))]}),
            "tools[0].modes[1]",
            "\"ghost\", which is not declared",
        ),
        (
            "a duplicate mode",
            json!({"modes": [{"id": "m", "next": []}, {"id": "m"}], "tools": []}),
            "modes[1].id",
            "declared twice",
        ),
        (
            "a duplicate tool",
            json!({"tools": [tool("A", None), tool("B", None), tool("A", None)]}),
            "tools[2].name",
            "declared twice (first at tools[0])",
        ),
        (
            "a name the relay would refuse",
            json!({"tools": [tool("draw card", None)]}),
            "tools[0].name",
            "not a tool name the relay accepts",
        ),
        (
            "a reserved name",
            json!({"tools": [tool("cancel", None)]}),
            "tools[0].name",
            "not a tool name the relay accepts",
        ),
        (
            "a timeout out of bounds",
            json!({"tools": [{"name": "A", "description": "a", "parameters": {"type": "object"}, "awaitResult": true, "timeoutMs": 600000}]}),
            "tools[0].timeoutMs",
            "600000 is out of bounds (1 to 120000 ms)",
        ),
        (
            "an unreachable mode",
            json!({"initialMode": "a", "modes": [{"id": "a", "next": ["b"]}, {"id": "b"}, {"id": "island"}], "tools": []}),
            "modes[2].id",
            "unreachable",
        ),
        (
            "a move to an undeclared mode",
            json!({"modes": [{"id": "a", "next": ["nowhere"]}], "tools": []}),
            "modes[0].next[0]",
            "\"nowhere\", which is not declared",
        ),
        (
            "an unknown initial mode",
            json!({"initialMode": "start", "modes": [{"id": "a"}], "tools": []}),
            "initialMode",
            "\"start\", which is not declared",
        ),
        (
            "a misspelt field",
            json!({"tools": [{"name": "A", "description": "a", "parameters": {"type": "object"}, "awaitResults": true}]}),
            "tools[0].awaitResults",
            "is not a tool field (expected name, description, parameters, outputSchema, awaitResult, timeoutMs, modes)",
        ),
        (
            "a tool named like a mode move",
            json!({"modes": [{"id": "quiz"}], "tools": [tool("enter_quiz", None)]}),
            "tools[0].name",
            "move of mode \"quiz\"",
        ),
        (
            "an output schema on a tool that does not wait",
            json!({"tools": [{"name": "A", "description": "a", "parameters": {"type": "object"}, "outputSchema": {"type": "object"}}]}),
            "tools[0].outputSchema",
            "awaitResult is false",
        ),
        (
            "a mode id that cannot name its moves",
            json!({"modes": [{"id": "two words"}], "tools": []}),
            "modes[0].id",
            "not a mode id",
        ),
        (
            "no tools at all",
            json!({"modes": [{"id": "a"}]}),
            "",
            "has no \"tools\" array",
        ),
        (
            "an unknown top-level field",
            json!({"tools": [], "tool": []}),
            "tool",
            "not a catalog field",
        ),
    ];
    assert!(cases.len() >= 10);
    for (what, doc, path, message) in cases {
        let problems = parse(doc).expect_err(what);
        let first = &problems[0];
        assert_eq!(first.place.path, path, "{what}: {first}");
        assert!(first.message.contains(message), "{what}: {first}");
        assert!(first.place.line.is_some(), "{what}: {first}");
        assert!(
            first.to_string().starts_with("app.json:"),
            "{what}: {first}"
        );
    }
}

#[test]
fn every_problem_is_listed_at_once() {
    let problems = parse(json!({
        "modes": [{"id": "a", "next": ["zz"]}],
        "tools": [tool("x y", None), {"name": "B", "description": "", "parameters": {"type": "object"}}]
    }))
    .unwrap_err();
    let paths: Vec<&str> = problems.iter().map(|p| p.place.path.as_str()).collect();
    assert_eq!(
        paths,
        ["modes[0].next[0]", "tools[0].name", "tools[1].description"]
    );
    // Syntax errors come with their line.
    let syntax = Catalog::parse("app.json", "{\n \"tools\": [\n  {\"name\": }\n ]\n}").unwrap_err();
    assert_eq!(syntax.len(), 1);
    assert!(
        syntax[0].to_string().starts_with("app.json:3:"),
        "{}",
        syntax[0]
    );
    assert!(Catalog::parse("app.json", "[]").is_err());
}

#[test]
fn every_unknown_field_is_named_and_problems_come_in_the_files_order() {
    // Tools before modes in the file; two misspelt fields in one tool, one in a mode.
    let text = r#"{
  "tools": [
    {"name": "A", "description": "a", "parameters": {"type": "object"},
     "awaitResults": true,
     "timeout": 5000,
     "modes": ["b"]}
  ],
  "modes": [
    {"id": "a", "next": ["b"], "nest": true},
    {"id": "b", "next": ["zz"]}
  ]
}"#;
    let problems = Catalog::parse("app.json", text).unwrap_err();
    let listed: Vec<String> = problems.iter().map(ToString::to_string).collect();
    let paths: Vec<&str> = problems.iter().map(|p| p.place.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "tools[0].awaitResults",
            "tools[0].timeout",
            "modes[0].nest",
            "modes[1].next[0]"
        ],
        "{listed:#?}"
    );
    let lines: Vec<usize> = problems.iter().map(|p| p.place.line.unwrap().0).collect();
    assert_eq!(lines, [4, 5, 9, 10], "{listed:#?}");

    // What is missing is named, and the rest of the tool is checked all the same.
    let problems = Catalog::parse("app.json", r#"{"tools": [{"name": "x y"}]}"#).unwrap_err();
    let messages: Vec<String> = problems.iter().map(ToString::to_string).collect();
    assert_eq!(messages.len(), 3, "{messages:#?}");
    assert!(
        messages[0].ends_with(
            "tools[0]: has no description (a tool needs a name, a description and parameters)"
        ),
        "{messages:#?}"
    );
    assert!(
        messages[1].contains("tools[0]: has no parameters"),
        "{messages:#?}"
    );
    assert!(
        messages[2].contains("tools[0].name: \"x y\" is not a tool name"),
        "{messages:#?}"
    );
}

#[test]
fn exports_for_platforms_that_keep_their_own_tools() {
    let catalog = parse(diagram_app()).unwrap();
    let target = Target {
        mode: Some("review"),
        worker_url: Some("https://worker.example.com/"),
    };
    let openai = export(&catalog, Format::Openai, &target).unwrap();
    let names = |v: &Value, pointer: &str| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|t| t.pointer(pointer).unwrap().as_str().unwrap().to_owned())
            .collect()
    };
    // The review mode's tool, and its move back to editing.
    assert_eq!(
        names(&openai, "/function/name"),
        ["SaveDiagram", "ShowHelp", "enter_editing"]
    );
    assert_eq!(
        openai[2]["function"]["parameters"],
        json!({"type": "object", "properties": {}, "additionalProperties": false})
    );
    assert!(
        openai[2]["function"]["description"]
            .as_str()
            .unwrap()
            .contains("Edit diagrams."),
        "a move says what the mode it leads to is for"
    );
    let vapi = export(&catalog, Format::Vapi, &target).unwrap();
    assert_eq!(
        vapi[0]["server"]["url"],
        "https://worker.example.com/vapi/webhook"
    );
    assert_eq!(vapi[0]["async"], true);
    assert_eq!(vapi[2]["async"], false, "a move's answer is read");
    let url = Target {
        mode: None,
        worker_url: Some("https://w.example"),
    };
    let eleven = export(&catalog, Format::Elevenlabs, &url).unwrap();
    // Every tool, then every move: into each mode some mode lists, out of the nested one.
    assert_eq!(
        names(&eleven, "/name"),
        [
            "CreateDiagram",
            "SaveDiagram",
            "ShowHelp",
            "enter_review",
            "enter_help",
            "enter_editing",
            "leave_help"
        ]
    );
    assert_eq!(
        eleven[0]["api_schema"]["url"],
        "https://w.example/agent/tools/CreateDiagram"
    );
    assert_eq!(
        eleven[6]["api_schema"]["url"],
        "https://w.example/agent/tools/leave_help"
    );
    assert_eq!(
        eleven[0]["api_schema"]["request_headers"]["X-Voice-Agent-Key"],
        "{{apiKey}}"
    );
    // The conversation's own session token, never a server's secret.
    assert_eq!(
        eleven[0]["api_schema"]["request_headers"]["Authorization"],
        "{{secret__agentAuthorization}}"
    );
    // The formats that call the worker back need its URL; a mode must exist.
    let no_url = export(&catalog, Format::Vapi, &Target::default()).unwrap_err();
    assert!(no_url.to_string().contains("--worker-url"), "{no_url}");
    assert!(
        export(&catalog, Format::Elevenlabs, &Target::default()).is_err(),
        "no silent placeholder URL"
    );
    assert!(export(&catalog, Format::Openai, &Target::default()).is_ok());
    let bad = Target {
        mode: None,
        worker_url: Some("worker.example.com"),
    };
    assert!(export(&catalog, Format::Vapi, &bad).is_err());
    let unknown = Target {
        mode: Some("nope"),
        worker_url: None,
    };
    assert!(export(&catalog, Format::Openai, &unknown).is_err());
}

#[test]
fn a_shared_catalog_swaps_whole() {
    let shared = Shared::new(Catalog::default_catalog().unwrap());
    let before = shared.current();
    let old = shared.replace(parse(diagram_app()).unwrap());
    assert!(std::sync::Arc::ptr_eq(&before, &old));
    assert_eq!(shared.current().initial_mode(), "editing");
    assert_eq!(
        before.initial_mode(),
        "default",
        "a holder keeps its catalog"
    );
}
