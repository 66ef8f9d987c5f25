//! `relay healthcheck <url>`: a plain-HTTP probe for container health checks, so the runtime
//! image needs no curl. Only `http://host:port/path` URLs on a reachable address.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// GETs `url`; `Ok` on a 2xx status.
pub fn probe(url: &str, timeout: Duration) -> Result<(), String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or("only http:// URLs are supported")?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let addr = authority
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {authority}: {e}"))?
        .next()
        .ok_or_else(|| format!("no address for {authority}"))?;
    let mut stream = TcpStream::connect_timeout(&addr, timeout)
        .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
    stream
        .set_read_timeout(Some(timeout))
        .and_then(|()| stream.set_write_timeout(Some(timeout)))
        .map_err(|e| e.to_string())?;
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: {authority}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| format!("cannot send the request: {e}"))?;
    // Read until the status line is complete (or the answer ends).
    let mut head = Vec::with_capacity(64);
    let mut chunk = [0u8; 64];
    while !head.contains(&b'\n') && head.len() < 1024 {
        let n = stream
            .read(&mut chunk)
            .map_err(|e| format!("no answer: {e}"))?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&chunk[..n]);
    }
    let line = String::from_utf8_lossy(&head);
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or("not an HTTP answer")?;
    if (200..300).contains(&status) {
        Ok(())
    } else {
        Err(format!("{url} answered {status}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_what_it_cannot_probe() {
        assert!(probe("https://x/", Duration::from_millis(100)).is_err());
        // Nothing listens on port 9 on loopback.
        assert!(probe("http://127.0.0.1:9/readyz", Duration::from_millis(300)).is_err());
    }

    #[test]
    fn probes_a_live_server() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            for answer in [
                "HTTP/1.1 200 OK\r\n\r\n",
                "HTTP/1.1 503 Service Unavailable\r\n\r\n",
            ] {
                let (mut s, _) = listener.accept().unwrap();
                // Read the whole request first: closing with unread bytes would reset the
                // connection under the answer.
                let mut request = Vec::new();
                let mut buf = [0u8; 256];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    let n = s.read(&mut buf).unwrap();
                    if n == 0 {
                        break;
                    }
                    request.extend_from_slice(&buf[..n]);
                }
                s.write_all(answer.as_bytes()).unwrap();
            }
        });
        let url = format!("http://{addr}/readyz");
        assert!(probe(&url, Duration::from_secs(2)).is_ok());
        assert!(
            probe(&url, Duration::from_secs(2))
                .unwrap_err()
                .contains("503")
        );
        server.join().unwrap();
    }
}
