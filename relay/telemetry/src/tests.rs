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

#[test]
fn the_sampler_decides_as_the_variables_say() {
    use crate::{Root, Sampling, decide};
    let sampling = |vars: &[(&str, &str)]| {
        let mut all = vec![("OTEL_TRACES_EXPORTER", "otlp")];
        all.extend_from_slice(vars);
        export(&all).sampling
    };
    let kept = relay_wire::TraceContext::from_values(
        Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
        None,
    );
    let dropped = relay_wire::TraceContext::from_values(
        Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"),
        None,
    );
    let (kept, dropped) = (kept.as_ref(), dropped.as_ref());
    assert!(kept.is_some() && dropped.is_some());
    let never = || -> f64 { panic!("no draw when the decision is made without one") };

    // The default: the caller's choice, and every trace that starts here.
    let default = sampling(&[]);
    assert_eq!(
        default,
        Sampling {
            parent_based: true,
            root: Root::Always
        }
    );
    assert!(decide(&default, kept, never));
    assert!(!decide(&default, dropped, never));
    assert!(decide(&default, None, never));

    let ratio = sampling(&[
        ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
        ("OTEL_TRACES_SAMPLER_ARG", "0.25"),
    ]);
    assert_eq!(ratio.root, Root::Ratio(0.25));
    assert!(!decide(&ratio, dropped, never));
    assert!(decide(&ratio, kept, never));
    assert!(decide(&ratio, None, || 0.2));
    assert!(!decide(&ratio, None, || 0.25));

    // Not parent-based: the caller's flag is not asked.
    let plain = sampling(&[
        ("OTEL_TRACES_SAMPLER", "traceidratio"),
        ("OTEL_TRACES_SAMPLER_ARG", "0.5"),
    ]);
    assert!(!plain.parent_based);
    assert!(decide(&plain, dropped, || 0.1));
    assert!(!decide(&plain, kept, || 0.9));

    let off = sampling(&[("OTEL_TRACES_SAMPLER", "always_off")]);
    assert!(!decide(&off, kept, never));
    assert!(!decide(&off, None, never));
    let parent_off = sampling(&[("OTEL_TRACES_SAMPLER", "parentbased_always_off")]);
    assert!(decide(&parent_off, kept, never));
    assert!(!decide(&parent_off, None, never));
}
