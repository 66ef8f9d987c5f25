//! Whether spans are exported, read from the standard OpenTelemetry variables. Export is off
//! unless asked for: `OTEL_TRACES_EXPORTER=otlp`, or an OTLP endpoint
//! (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) with no exporter named;
//! `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none` keep it off. The SDK itself reads the
//! rest (headers, sampler, batching, resource attributes). What this build cannot do (another
//! exporter, another protocol, a ratio that is not one) is a start-up error rather than a
//! silent fallback.

use std::time::Duration;

/// The export's settings as read at start; `export` is `None` when it is off.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Settings {
    pub export: Option<Export>,
}

/// Where spans go and how many, for the start-up line (never a header value, never the
/// endpoint's user information).
#[derive(Debug, Clone, PartialEq)]
pub struct Export {
    pub endpoint: String,
    pub sampler: String,
    /// The same sampler, read: what [`crate::sampled`] decides with.
    pub sampling: Sampling,
    /// Each export request's bound (`OTEL_EXPORTER_OTLP_TRACES_TIMEOUT`,
    /// `OTEL_EXPORTER_OTLP_TIMEOUT`; 10 s by default).
    pub timeout: Duration,
    /// Whether `OTEL_SERVICE_NAME` names the service (else the server's own name is used).
    pub named: bool,
}

/// Which traces are kept (`OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG`): a trace that a
/// caller started follows the caller's choice when `parent_based`; one that starts here keeps
/// `root`'s.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampling {
    pub parent_based: bool,
    pub root: Root,
}

/// What a sampler decides for a trace that starts here.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Root {
    Always,
    Never,
    /// Kept at this ratio (from 0 to 1).
    Ratio(f64),
}

impl Sampling {
    fn read(name: &str, ratio: f64) -> Sampling {
        let root = match name.trim_start_matches("parentbased_") {
            "always_on" => Root::Always,
            "always_off" => Root::Never,
            _ => Root::Ratio(ratio),
        };
        Sampling {
            parent_based: name.starts_with("parentbased_"),
            root,
        }
    }
}

const DEFAULT_ENDPOINT: &str = "http://localhost:4318";
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
const SAMPLERS: [&str; 6] = [
    "always_on",
    "always_off",
    "traceidratio",
    "parentbased_always_on",
    "parentbased_always_off",
    "parentbased_traceidratio",
];

impl Settings {
    /// From the process's environment.
    pub fn from_env() -> Result<Settings, String> {
        Settings::from_vars(|name| std::env::var(name).ok())
    }

    /// From `var` (a variable's value by name; an empty value counts as unset).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Settings, String> {
        let get = |name: &str| {
            var(name)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        if get("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
            return Ok(Settings::default());
        }
        let traces_endpoint = get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
        let endpoint = get("OTEL_EXPORTER_OTLP_ENDPOINT");
        let on = match get("OTEL_TRACES_EXPORTER").as_deref() {
            None => traces_endpoint.is_some() || endpoint.is_some(),
            Some("none") => false,
            Some("otlp") => true,
            Some(other) => {
                return Err(format!(
                    "OTEL_TRACES_EXPORTER={other}: this build exports over OTLP only (otlp or none)"
                ));
            }
        };
        if !on {
            return Ok(Settings::default());
        }
        let protocol = get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            .or_else(|| get("OTEL_EXPORTER_OTLP_PROTOCOL"));
        if let Some(p) = protocol.filter(|p| p != "http/protobuf") {
            return Err(format!(
                "OTEL_EXPORTER_OTLP_PROTOCOL={p}: this build sends OTLP over HTTP with protobuf only (http/protobuf)"
            ));
        }
        let endpoint = match (traces_endpoint, endpoint) {
            (Some(url), _) => url,
            (None, Some(base)) => format!("{}/v1/traces", base.trim_end_matches('/')),
            (None, None) => format!("{DEFAULT_ENDPOINT}/v1/traces"),
        };
        let endpoint = shown_endpoint(&endpoint)?;
        let sampler = get("OTEL_TRACES_SAMPLER").unwrap_or_else(|| "parentbased_always_on".into());
        if !SAMPLERS.contains(&sampler.as_str()) {
            return Err(format!(
                "OTEL_TRACES_SAMPLER={sampler}: one of {}",
                SAMPLERS.join(", ")
            ));
        }
        let (sampling, sampler) = if sampler.ends_with("traceidratio") {
            let arg = get("OTEL_TRACES_SAMPLER_ARG").unwrap_or_else(|| "1.0".into());
            match arg.parse::<f64>() {
                Ok(r) if (0.0..=1.0).contains(&r) => {
                    (Sampling::read(&sampler, r), format!("{sampler} {r}"))
                }
                _ => {
                    return Err(format!(
                        "OTEL_TRACES_SAMPLER_ARG={arg}: a ratio from 0 to 1 for {sampler}"
                    ));
                }
            }
        } else {
            (Sampling::read(&sampler, 1.0), sampler)
        };
        let timeout = match get("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT")
            .or_else(|| get("OTEL_EXPORTER_OTLP_TIMEOUT"))
        {
            None => DEFAULT_TIMEOUT,
            Some(ms) => match ms.parse::<u64>() {
                Ok(ms) if ms > 0 => Duration::from_millis(ms),
                _ => {
                    return Err(format!(
                        "OTEL_EXPORTER_OTLP_TIMEOUT={ms}: a number of milliseconds above 0"
                    ));
                }
            },
        };
        Ok(Settings {
            export: Some(Export {
                endpoint,
                sampler,
                sampling,
                timeout,
                named: get("OTEL_SERVICE_NAME").is_some(),
            }),
        })
    }
}

/// The endpoint as a start-up line may show it: an `http` or `https` URL without its user
/// information and its query (either may hold a credential).
fn shown_endpoint(url: &str) -> Result<String, String> {
    let (scheme, rest) = url
        .split_once("://")
        .filter(|(s, _)| *s == "http" || *s == "https")
        .ok_or_else(|| {
            format!("the OTLP endpoint must be an http:// or https:// URL, not {url:?}")
        })?;
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let path = path.split(['?', '#']).next().unwrap_or_default();
    if host.is_empty() {
        return Err("the OTLP endpoint names no host".into());
    }
    Ok(format!("{scheme}://{host}{path}"))
}
