use std::collections::HashMap;
use std::time::Duration;

use super::settings::{Export, Settings};

fn settings(vars: &[(&str, &str)]) -> Result<Settings, String> {
    let vars: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    Settings::from_vars(|name| vars.get(name).cloned())
}

fn export(vars: &[(&str, &str)]) -> Export {
    settings(vars).unwrap().export.expect("export on")
}

#[test]
fn export_is_off_unless_asked_for() {
    assert_eq!(settings(&[]).unwrap().export, None);
    assert_eq!(
        settings(&[("OTEL_SERVICE_NAME", "x")]).unwrap().export,
        None
    );
    assert_eq!(
        settings(&[
            ("OTEL_TRACES_EXPORTER", "none"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")
        ])
        .unwrap()
        .export,
        None
    );
    assert_eq!(
        settings(&[
            ("OTEL_SDK_DISABLED", "TRUE"),
            ("OTEL_TRACES_EXPORTER", "otlp")
        ])
        .unwrap()
        .export,
        None
    );
    // An empty value is unset.
    assert_eq!(
        settings(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")])
            .unwrap()
            .export,
        None
    );
}

#[test]
fn an_endpoint_or_the_otlp_exporter_turns_it_on() {
    let e = export(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/")]);
    assert_eq!(e.endpoint, "http://collector:4318/v1/traces");
    assert_eq!(e.sampler, "parentbased_always_on");
    assert_eq!(e.timeout, Duration::from_secs(10));
    assert!(!e.named);
    let e = export(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://ignored:1"),
        (
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "https://user:pw@c.example/otlp/traces?token=t",
        ),
        ("OTEL_SERVICE_NAME", "relay-eu"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
    ]);
    // The start-up line never shows the endpoint's credentials.
    assert_eq!(e.endpoint, "https://c.example/otlp/traces");
    assert_eq!(e.timeout, Duration::from_millis(2500));
    assert!(e.named);
    let e = export(&[("OTEL_TRACES_EXPORTER", "otlp")]);
    assert_eq!(e.endpoint, "http://localhost:4318/v1/traces");
}

#[test]
fn samplers_are_checked() {
    let e = export(&[
        ("OTEL_TRACES_EXPORTER", "otlp"),
        ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
        ("OTEL_TRACES_SAMPLER_ARG", "0.01"),
    ]);
    assert_eq!(e.sampler, "parentbased_traceidratio 0.01");
    for (sampler, arg) in [
        ("traceidratio", "2"),
        ("traceidratio", "x"),
        ("sometimes", ""),
    ] {
        let err = settings(&[
            ("OTEL_TRACES_EXPORTER", "otlp"),
            ("OTEL_TRACES_SAMPLER", sampler),
            ("OTEL_TRACES_SAMPLER_ARG", arg),
        ])
        .unwrap_err();
        assert!(err.contains("OTEL_TRACES_SAMPLER"), "{err}");
    }
}

#[test]
fn what_this_build_cannot_do_is_refused() {
    for vars in [
        vec![("OTEL_TRACES_EXPORTER", "zipkin")],
        vec![("OTEL_TRACES_EXPORTER", "otlp,console")],
        vec![
            ("OTEL_TRACES_EXPORTER", "otlp"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ],
        vec![
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c"),
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json"),
        ],
        vec![("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318")],
        vec![("OTEL_EXPORTER_OTLP_ENDPOINT", "http://")],
        vec![
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "0"),
        ],
    ] {
        assert!(settings(&vars).is_err(), "{vars:?}");
    }
}
