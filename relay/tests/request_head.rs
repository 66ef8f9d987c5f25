//! The request head a Socket.IO socket keeps for its whole life holds only what is read from it
//! (`relay::SOCKET_REQUEST_HEADERS`): a tab connects over a real WebSocket with the headers a
//! browser sends (user agent, `accept-*`, a cookie), and the head its socket kept is inspected.
//!
//! The WebSocket client is written by hand over a `TcpStream` (a handshake and two frames), so
//! the test needs no client library.

use std::net::SocketAddr;
use std::time::Duration;

use axum::http::{self, HeaderValue, header};
use relay::delivery::Io;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

mod common;

/// Every wait of this test is bounded by this.
const WAIT: Duration = Duration::from_secs(10);

/// A cookie like a signed-in page's, 200 bytes.
fn cookie() -> String {
    format!(
        "session={}; _ga=GA1.1.{}",
        "a1B2c3D4e5".repeat(12),
        "7".repeat(60)
    )
}

async fn spawn_relay() -> (SocketAddr, Io) {
    common::serve_with_io(&["--token-mode", "open"]).await
}

/// Reads one (unmasked, unfragmented) frame from the server and returns its text.
async fn read_frame(tcp: &mut TcpStream) -> String {
    let mut head = [0u8; 2];
    tcp.read_exact(&mut head).await.unwrap();
    let len = match head[1] & 0x7f {
        126 => {
            let mut ext = [0u8; 2];
            tcp.read_exact(&mut ext).await.unwrap();
            u16::from_be_bytes(ext) as usize
        }
        127 => panic!("unexpectedly large frame"),
        n => n as usize,
    };
    let mut payload = vec![0u8; len];
    tcp.read_exact(&mut payload).await.unwrap();
    String::from_utf8(payload).unwrap()
}

/// Sends one short text frame, masked (with a zero key) as a client must.
async fn write_frame(tcp: &mut TcpStream, text: &str) {
    assert!(text.len() < 126);
    let mut frame = vec![0x81, 0x80 | text.len() as u8, 0, 0, 0, 0];
    frame.extend_from_slice(text.as_bytes());
    tcp.write_all(&frame).await.unwrap();
}

/// Opens a Socket.IO connection the way a browser tab does and waits for the namespace's
/// CONNECT answer.
async fn connect_like_a_browser(addr: SocketAddr) -> TcpStream {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "GET /socket.io/?EIO=4&transport=websocket HTTP/1.1\r\n\
         Host: {addr}\r\n\
         Connection: Upgrade\r\n\
         Pragma: no-cache\r\n\
         Cache-Control: no-cache\r\n\
         User-Agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/140.0.0.0 Safari/537.36\r\n\
         Upgrade: websocket\r\n\
         Origin: http://{addr}\r\n\
         Sec-WebSocket-Version: 13\r\n\
         Accept-Encoding: gzip, deflate, br, zstd\r\n\
         Accept-Language: en-US,en;q=0.9,de;q=0.8\r\n\
         Cookie: {}\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
         Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n\r\n",
        cookie()
    );
    tcp.write_all(request.as_bytes()).await.unwrap();
    // The 101 answer, up to its blank line.
    let mut answer = Vec::new();
    while !answer.ends_with(b"\r\n\r\n") {
        answer.push(tcp.read_u8().await.unwrap());
    }
    let answer = String::from_utf8(answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 101"), "{answer}");
    let open = read_frame(&mut tcp).await;
    assert!(open.starts_with('0'), "Engine.IO open packet: {open}");
    write_frame(&mut tcp, "40").await;
    loop {
        let packet = read_frame(&mut tcp).await;
        if packet.starts_with("40") {
            return tcp;
        }
        assert_eq!(
            packet, "2",
            "only a ping may come before the CONNECT answer"
        );
        write_frame(&mut tcp, "3").await;
    }
}

#[tokio::test]
async fn a_socket_keeps_only_the_request_headers_the_relay_reads() {
    let (addr, io) = spawn_relay().await;
    let _tab = tokio::time::timeout(WAIT, connect_like_a_browser(addr))
        .await
        .expect("the tab connects");

    let Io::Local(io) = io else {
        panic!("one node runs the in-memory adapter")
    };
    let sockets = io.sockets();
    assert_eq!(sockets.len(), 1);
    let head = sockets[0].req_parts();

    let kept: Vec<&str> = head.headers.keys().map(|n| n.as_str()).collect();
    for name in &kept {
        assert!(
            relay::SOCKET_REQUEST_HEADERS.iter().any(|k| k == name),
            "the socket kept {name}, which nothing reads: {kept:?}"
        );
    }
    // What the origin check reads is there, as sent.
    let origin = format!("http://{addr}");
    assert_eq!(head.headers.get(header::ORIGIN).unwrap(), origin.as_str());
    assert_eq!(
        head.headers.get(header::HOST).unwrap(),
        addr.to_string().as_str()
    );
    for dropped in [
        header::COOKIE,
        header::USER_AGENT,
        header::ACCEPT_LANGUAGE,
        header::ACCEPT_ENCODING,
        header::SEC_WEBSOCKET_EXTENSIONS,
    ] {
        assert!(head.headers.get(&dropped).is_none(), "{dropped} was kept");
    }
    // One value per kept header, in a map no larger than that.
    assert_eq!(head.headers.len(), kept.len());
    assert!(
        head.headers.capacity() <= relay::SOCKET_REQUEST_HEADERS.len(),
        "a head map with room for {} headers",
        head.headers.capacity()
    );
    // The URI is the request's (engineioxide reads its query), and axum's copy of it is gone.
    assert_eq!(head.uri, "/socket.io/?EIO=4&transport=websocket");
    assert!(
        head.extensions
            .get::<axum::extract::OriginalUri>()
            .is_none()
    );
}

#[tokio::test]
async fn only_socket_io_requests_lose_headers() {
    let request = |path: &str| {
        http::Request::get(path)
            .header(header::HOST, "relay.example")
            .header(header::ORIGIN, "https://app.example")
            .header(header::COOKIE, cookie())
            .header(header::USER_AGENT, "Mozilla/5.0")
            .header(header::CONTENT_TYPE, "text/plain;charset=UTF-8")
            .header("x-forwarded-for", "203.0.113.7")
            .body(axum::body::Body::empty())
            .unwrap()
    };

    let kept = relay::detach_request_head(request("/socket.io/?EIO=4&transport=polling")).await;
    let mut names: Vec<&str> = kept.headers().keys().map(|n| n.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["content-type", "host", "origin"]);
    assert_eq!(
        kept.headers().get(header::ORIGIN),
        Some(&HeaderValue::from_static("https://app.example"))
    );

    let other = relay::detach_request_head(request("/token")).await;
    assert_eq!(other.headers().len(), 6);
}
