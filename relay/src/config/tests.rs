use clap::Parser;

use super::*;

fn parse(args: &[&str]) -> Result<Config, ConfigError> {
    // Flags only: tests never touch the process environment.
    let mut full = vec!["relay"];
    full.extend_from_slice(args);
    let cli = Cli::try_parse_from(full).expect("flags parse");
    Config::from_options(cli.options)
}

/// A signing-key entry (`kid:seed`), a zero seed.
const SESSION_KEYS: &str = "k1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";

const GOOD: &[&str] = &[
    "--session-keys",
    SESSION_KEYS,
    "--livekit-api-key",
    "devkey",
    "--livekit-api-secret",
    "secret",
    "--worker-secret",
    "0123456789abcdef,fedcba9876543210",
    "--token-issuer-secret",
    "issuer-secret-0123456789",
];
/// GOOD up to its issuer secret.
const NO_ISSUER: usize = 8;

fn fixture(name: &str) -> String {
    format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// GOOD in app-jwt mode (without its issuer secret) plus `extra`.
fn app_jwt(extra: &[&str]) -> Result<Config, ConfigError> {
    let mut args = GOOD[..NO_ISSUER].to_vec();
    args.extend_from_slice(&["--token-mode", "app-jwt"]);
    args.extend_from_slice(extra);
    parse(&args)
}

const ISS_AUD: &[&str] = &[
    "--app-jwt-issuer",
    "https://app.example",
    "--app-jwt-audience",
    "voice-relay",
];

#[test]
fn issuer_mode_is_the_default_and_needs_its_secret() {
    let c = parse(GOOD).unwrap();
    assert_eq!(c.token_mode, TokenMode::Issuer);
    assert_eq!(c.issuer_secrets.len(), 1);
    assert!(!c.allow_bare_keys, "bare keys are off by default");
    assert!(c.trusted_proxies.is_empty());
    let err = parse(&GOOD[..NO_ISSUER]).unwrap_err().to_string();
    assert!(
        err.contains("RELAY_TOKEN_ISSUER_SECRET is required"),
        "{err}"
    );
    assert!(err.contains("RELAY_TOKEN_MODE=open"), "{err}");
    let mut short = GOOD.to_vec();
    short[9] = "good-enough-secret-1,short";
    let err = parse(&short).unwrap_err().to_string();
    assert!(
        err.contains("RELAY_TOKEN_ISSUER_SECRET entry 2 is shorter than 16"),
        "{err}"
    );
    let mut same = GOOD.to_vec();
    same[9] = "0123456789abcdef";
    let err = parse(&same).unwrap_err().to_string();
    assert!(
        err.contains("must differ from RELAY_WORKER_SECRET and RELAY_OPERATOR_SECRET"),
        "{err}"
    );
}

#[test]
fn open_mode_and_unknown_modes() {
    let mut args = GOOD[..NO_ISSUER].to_vec();
    args.extend_from_slice(&["--token-mode", "open", "--allow-bare-keys", "true"]);
    let c = parse(&args).unwrap();
    assert_eq!(c.token_mode, TokenMode::Open);
    assert!(c.allow_bare_keys);
    let mut args = GOOD.to_vec();
    args.extend_from_slice(&["--token-mode", "public", "--allow-bare-keys", "maybe"]);
    let err = parse(&args).unwrap_err().to_string();
    assert!(
        err.contains("RELAY_TOKEN_MODE \"public\" is not a mode"),
        "{err}"
    );
    assert!(err.contains("RELAY_ALLOW_BARE_KEYS"), "{err}");
}

#[test]
fn app_jwt_mode_needs_one_key_an_issuer_and_an_audience() {
    let secret = "an-hmac-secret-of-at-least-32-chars!";
    let c = app_jwt(&[&["--app-jwt-secret", secret][..], ISS_AUD].concat()).unwrap();
    assert_eq!(c.token_mode, TokenMode::AppJwt);
    assert!(c.app_jwt.is_some());
    assert!(
        !format!("{c:?}").contains(secret),
        "the HMAC secret is not printed"
    );

    let err = app_jwt(ISS_AUD).unwrap_err().to_string();
    assert!(err.contains("needs the key"), "{err}");
    let err = app_jwt(&["--app-jwt-secret", secret])
        .unwrap_err()
        .to_string();
    assert!(err.contains("RELAY_APP_JWT_ISSUER"), "{err}");
    assert!(err.contains("RELAY_APP_JWT_AUDIENCE"), "{err}");
    let rsa = fixture("app-rsa.pub");
    let two = [
        &["--app-jwt-secret", secret][..],
        &["--app-jwt-public-key-file", &rsa],
        ISS_AUD,
    ]
    .concat();
    assert!(app_jwt(&two).unwrap_err().to_string().contains("only one"));
    let short = [&["--app-jwt-secret", "too-short"][..], ISS_AUD].concat();
    assert!(
        app_jwt(&short)
            .unwrap_err()
            .to_string()
            .contains("shorter than 32")
    );
    let leeway = [
        &["--app-jwt-secret", secret, "--app-jwt-leeway-secs", "3600"][..],
        ISS_AUD,
    ]
    .concat();
    assert!(app_jwt(&leeway).unwrap_err().to_string().contains("LEEWAY"));
}

#[test]
fn app_jwt_key_files_must_parse() {
    for (flag, path) in [
        ("--app-jwt-public-key-file", fixture("app-rsa.pub")),
        ("--app-jwt-public-key-file", fixture("app-ec.pub")),
        ("--app-jwt-jwks-file", fixture("app.jwks.json")),
    ] {
        let good = [flag, path.as_str()];
        let c = app_jwt(&[&good[..], ISS_AUD].concat());
        assert!(c.is_ok(), "{good:?}: {:?}", c.err());
    }
    let cases = [
        (
            "--app-jwt-public-key-file",
            fixture("app-rsa.key"),
            "private key",
        ),
        (
            "--app-jwt-public-key-file",
            fixture("README.md"),
            "not a PEM public key",
        ),
        (
            "--app-jwt-public-key-file",
            fixture("missing.pem"),
            "cannot read",
        ),
        ("--app-jwt-jwks-file", fixture("app-rsa.pub"), "not JSON"),
        (
            "--app-jwt-jwks-file",
            fixture("missing.json"),
            "cannot read",
        ),
    ];
    for (flag, path, expected) in cases {
        let err = app_jwt(&[&[flag, path.as_str()][..], ISS_AUD].concat())
            .unwrap_err()
            .to_string();
        assert!(err.contains(expected), "{path}: {err}");
    }
}

#[test]
fn proxies_and_forwarded_header() {
    let mut args = GOOD.to_vec();
    args.extend_from_slice(&["--trusted-proxies", "10.0.0.0/8, 127.0.0.1"]);
    let c = parse(&args).unwrap();
    assert_eq!(c.trusted_proxies.len(), 2);
    assert_eq!(c.forwarded_header, ForwardedHeader::XForwardedFor);
    let mut args = GOOD.to_vec();
    args.extend_from_slice(&[
        "--trusted-proxies",
        "10.0.0.0/40",
        "--forwarded-header",
        "x-real-ip",
    ]);
    let err = parse(&args).unwrap_err().to_string();
    assert!(
        err.contains("RELAY_TRUSTED_PROXIES entry \"10.0.0.0/40\""),
        "{err}"
    );
    assert!(err.contains("RELAY_FORWARDED_HEADER"), "{err}");
}

#[test]
fn valid_config_with_rotation() {
    let c = parse(GOOD).unwrap();
    assert_eq!(c.worker_secrets.len(), 2);
    assert!(c.operator_secrets.is_empty());
    assert_eq!(c.session_keys.signer().0, "k1");
    assert_eq!(c.session_max_inflight, 8);
    assert_eq!(c.addr.to_string(), "127.0.0.1:3001");
    assert_eq!(c.reconnect_grace, Duration::from_secs(30));
    assert_eq!(c.max_body_bytes, 65536);
}

#[test]
fn missing_secrets_are_all_reported() {
    let err = parse(&[]).unwrap_err().to_string();
    assert!(err.contains("LIVEKIT_API_KEY is required"), "{err}");
    assert!(err.contains("LIVEKIT_API_SECRET is required"), "{err}");
    assert!(err.contains("RELAY_WORKER_SECRET is required"), "{err}");
    assert!(err.contains("RELAY_SESSION_KEYS is required"), "{err}");
}

#[test]
fn the_single_agent_secret_is_refused_and_server_secrets_stay_apart() {
    let mut args = GOOD.to_vec();
    args.extend_from_slice(&["--legacy-agent-secret", "0123456789abcdef"]);
    let err = parse(&args).unwrap_err().to_string();
    assert!(
        err.contains("RELAY_AGENT_SECRET is no longer read"),
        "{err}"
    );
    assert!(err.contains("RELAY_WORKER_SECRET"), "{err}");
    let mut args = GOOD.to_vec();
    args.extend_from_slice(&["--operator-secret", "fedcba9876543210"]);
    let err = parse(&args).unwrap_err().to_string();
    assert!(
        err.contains("RELAY_OPERATOR_SECRET must differ from every RELAY_WORKER_SECRET"),
        "{err}"
    );
    let mut args = GOOD.to_vec();
    args[1] = "k1:not-a-seed";
    let err = parse(&args).unwrap_err().to_string();
    assert!(err.contains("not 32 bytes in base64url"), "{err}");
    // One session may not take every slot of its key.
    let mut args = GOOD.to_vec();
    args.extend_from_slice(&["--session-max-inflight", "16"]);
    let err = parse(&args).unwrap_err().to_string();
    assert!(err.contains("RELAY_SESSION_MAX_INFLIGHT (16)"), "{err}");
}

#[test]
fn short_agent_secret_and_bad_values_are_refused() {
    let mut args = GOOD.to_vec();
    args[7] = "short";
    args.extend_from_slice(&["--allowed-origins", "ftp://x", "--max-body-bytes", "0"]);
    let err = parse(&args).unwrap_err().to_string();
    assert!(err.contains("shorter than 16"), "{err}");
    assert!(err.contains("ftp://x"), "{err}");
    assert!(err.contains("RELAY_MAX_BODY_BYTES"), "{err}");
    assert!(
        !err.contains("short\""),
        "the secret itself is not echoed: {err}"
    );
}

#[test]
fn secrets_debug_as_fingerprints() {
    let s = Secret::new("super-secret-value");
    let shown = format!("{s:?}");
    assert!(!shown.contains("super-secret-value"));
    assert_eq!(
        shown,
        format!("Secret({})", fingerprint("super-secret-value"))
    );
    assert_eq!(fingerprint("x").len(), 8);
}

#[test]
fn the_idempotency_window_covers_the_longest_call() {
    let c = parse(GOOD).unwrap();
    assert_eq!(
        c.idempotency_window,
        Duration::from_secs(300),
        "the contract's 5 minutes"
    );
    let mut args = GOOD.to_vec();
    args.extend_from_slice(&[
        "--idempotency-window-secs",
        "30",
        "--max-timeout-ms",
        "20000",
    ]);
    assert_eq!(
        parse(&args).unwrap().idempotency_window,
        Duration::from_secs(30)
    );
    let mut args = GOOD.to_vec();
    args.extend_from_slice(&["--idempotency-window-secs", "60"]);
    let err = parse(&args).unwrap_err().to_string();
    assert!(
        err.contains("RELAY_IDEMPOTENCY_WINDOW_SECS must be between"),
        "{err}"
    );
}

#[test]
fn runtime_kinds() {
    assert_eq!(parse(GOOD).unwrap().runtime, RuntimeKind::MultiThread);
    let mut args = GOOD.to_vec();
    args.extend_from_slice(&["--runtime", "current-thread"]);
    let c = parse(&args).unwrap();
    assert_eq!(c.runtime.resolve(), RuntimeKind::CurrentThread);
    let mut args = GOOD.to_vec();
    args.extend_from_slice(&["--runtime", "auto"]);
    let resolved = parse(&args).unwrap().runtime.resolve();
    assert_ne!(
        resolved,
        RuntimeKind::Auto,
        "auto resolves to a concrete runtime"
    );
    let mut args = GOOD.to_vec();
    args.extend_from_slice(&["--runtime", "green-threads"]);
    assert!(Cli::try_parse_from([&["relay"][..], &args].concat()).is_err());
}

#[test]
fn the_examples_placeholders_are_refused() {
    let mut args = GOOD.to_vec();
    args[7] = "replace-me-with-32-random-bytes-hex";
    args[9] = "replace-me-with-other-32-random-bytes-hex";
    let err = parse(&args).unwrap_err().to_string();
    assert!(
        err.contains("RELAY_WORKER_SECRET entry 1 is still the example's placeholder"),
        "{err}"
    );
    assert!(
        err.contains("RELAY_TOKEN_ISSUER_SECRET entry 1 is still the example's placeholder"),
        "{err}"
    );
}
