//! A `redis-server` of the test's own on TLS only, with a certificate signed by a private CA
//! made here with `openssl`, and an ACL user (the default user disabled): the store suite runs
//! on it through `rediss://user:password@…` trusting that CA.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::RedisServer;

pub const USER: &str = "relay-node";
pub const PASSWORD: &str = "tls-acl-password-0123";

/// A scratch directory removed when dropped.
pub struct Scratch(pub PathBuf);

impl Scratch {
    /// A fresh directory under the system's temporary one, named `<prefix>-<random hex>`.
    pub fn new(prefix: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "{prefix}-{}",
            hex::encode(rand::random::<[u8; 6]>())
        ));
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl must be installed for the TLS store suite");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA, and a server certificate it signed for 127.0.0.1 and localhost.
pub fn make_certificates() -> Scratch {
    let scratch = Scratch::new("relay-tls");
    let dir = scratch.0.clone();
    openssl(
        &dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "1",
            "-subj",
            "/CN=relay test CA",
        ],
    );
    openssl(
        &dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=localhost",
        ],
    );
    std::fs::write(
        dir.join("ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
    )
    .expect("ext");
    openssl(
        &dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.crt",
            "-days",
            "1",
            "-extfile",
            "ext",
        ],
    );
    scratch
}

/// Starts `redis-server` on TLS only (no plain port), with [`USER`] as its only user.
pub fn start_tls_redis(certs: &Path) -> RedisServer {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let file = |name: &str| certs.join(name).to_string_lossy().into_owned();
    let child = Command::new("redis-server")
        .args([
            "--port",
            "0",
            "--tls-port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
        ])
        .args([
            "--tls-cert-file",
            &file("server.crt"),
            "--tls-key-file",
            &file("server.key"),
        ])
        .args([
            "--tls-ca-cert-file",
            &file("ca.crt"),
            "--tls-auth-clients",
            "no",
        ])
        .args(["--save", "", "--appendonly", "no"])
        .args(["--user", "default", "off"])
        .args([
            "--user",
            USER,
            "on",
            &format!(">{PASSWORD}"),
            "~*",
            "&*",
            "+@all",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server must be installed for the store suite");
    RedisServer { child, port }
}

/// Runs the relay binary with `args` on Redis at `url` (trusting `ca`, when given) and the other
/// settings it needs; its exit code and everything it printed.
pub fn run_relay(url: &str, ca: Option<&Path>, args: &[&str]) -> (Option<i32>, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_relay"));
    cmd.args(args)
        .env_clear()
        .env("LIVEKIT_API_KEY", "devkey")
        .env("LIVEKIT_API_SECRET", "test-livekit-secret-0123456789abcdef")
        .env("RELAY_WORKER_SECRET", "test-worker-secret-0123456789")
        .env(
            "RELAY_SESSION_KEYS",
            "k1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        )
        .env("RELAY_TOKEN_ISSUER_SECRET", "test-issuer-secret-0123456789")
        .env("RELAY_ADDR", "127.0.0.1:0")
        .env("RELAY_REDIS_URL", url);
    if let Some(ca) = ca {
        cmd.env("RELAY_REDIS_CA_FILE", ca);
    }
    let out = cmd.output().expect("the relay runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

/// The relay binary: `check-config --connect` and a start with a wrong password, or without the
/// CA, fail with a clear reason and never print the password; with both right it connects.
#[test]
fn the_binary_names_a_wrong_password_or_an_untrusted_certificate() {
    let certs = make_certificates();
    let server = start_tls_redis(&certs.0);
    let ca = certs.0.join("ca.crt");
    let url = |password: &str| format!("rediss://{USER}:{password}@127.0.0.1:{}", server.port);
    let run = run_relay;
    // The server may still be starting: the right settings are tried until they connect.
    let mut ok = (None, String::new());
    for _ in 0..50 {
        ok = run(&url(PASSWORD), Some(&ca), &["check-config", "--connect"]);
        if ok.0 == Some(0) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(ok.0, Some(0), "{}", ok.1);
    assert!(ok.1.contains("Redis answers"), "{}", ok.1);
    assert!(!ok.1.contains(PASSWORD), "{}", ok.1);
    let wrong = "wrong-password-0987";
    for args in [&["check-config", "--connect"][..], &[][..]] {
        let (code, text) = run(&url(wrong), Some(&ca), args);
        assert_eq!(code, Some(1), "{args:?}: {text}");
        assert!(text.contains("refused the credentials"), "{args:?}: {text}");
        assert!(!text.contains(wrong), "{args:?}: {text}");
        let (code, text) = run(&url(PASSWORD), None, args);
        assert_eq!(code, Some(1), "{args:?}: {text}");
        assert!(text.contains("not trusted"), "{args:?}: {text}");
        assert!(!text.contains(PASSWORD), "{args:?}: {text}");
    }
    // Without --connect, check-config stays offline and a CA for a plain URL is a mistake.
    let (code, text) = run(
        &format!("redis://127.0.0.1:{}", server.port),
        Some(&ca),
        &["check-config"],
    );
    assert_eq!(code, Some(64), "{text}");
    assert!(text.contains("RELAY_REDIS_CA_FILE is set but"), "{text}");
}
