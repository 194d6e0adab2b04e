//! A raw HTTP/1.1 fault server: one scripted fault per accepted connection.
//!
//! The classification truth table (`http_table`, `http_safety`) runs on it rather than on the
//! test kit's upstream: it needs faults the kit does not offer (a response head cut off
//! mid-line, a connection held without an answer) and a ground truth the kit does not keep
//! (bytes read, each connection served to its end). Its replies are the kit's [`Reply`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

pub use retry_testkit::Reply;

use super::{GroundTruth, Script, SeenRequest};

/// What the server does with one connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum H1Fault {
    /// Accept, then close (FIN) without reading anything.
    CloseBeforeRead,
    /// Accept, then reset (RST, linger 0) without reading anything.
    ResetBeforeRead,
    /// Read the whole request, then reset. The request counts as processed.
    ReadThenReset,
    /// Read the whole request, then close (FIN) without answering. Processed.
    ReadThenClose,
    /// Read the request, send a truncated status line/head, close. Processed.
    PartialHead,
    /// Read the request, send complete headers (`Content-Length: 1000`) and part of the body,
    /// then reset. Processed.
    HeadersThenReset,
    /// Read the request and never answer (holds the connection for a minute). Processed.
    Stall,
    /// Read the request and answer. Processed.
    Respond(Reply),
}

/// A running HTTP/1.1 fault server on 127.0.0.1.
#[derive(Debug)]
pub struct H1Server {
    addr: SocketAddr,
    truth: Arc<GroundTruth>,
    task: JoinHandle<()>,
}

impl Drop for H1Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl H1Server {
    /// Starts a server applying `script` to successive connections, then answering 200.
    pub async fn start(script: impl IntoIterator<Item = H1Fault>) -> H1Server {
        H1Server::start_with_default(script, H1Fault::Respond(Reply::ok("ok"))).await
    }

    /// Starts a server applying `script` to successive connections, then `default` forever.
    pub async fn start_with_default(
        script: impl IntoIterator<Item = H1Fault>,
        default: H1Fault,
    ) -> H1Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let truth = Arc::new(GroundTruth::default());
        let script = Arc::new(Script::new(script, default));
        let t = truth.clone();
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                t.connection();
                let fault = script.next();
                conns.spawn(serve(stream, fault, t.clone()));
                while conns.try_join_next().is_some() {}
            }
        });
        H1Server { addr, truth, task }
    }

    /// The server's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:port{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// What the server saw.
    pub fn truth(&self) -> &Arc<GroundTruth> {
        &self.truth
    }
}

/// Resets the connection (RST instead of FIN) by setting SO_LINGER to zero before closing.
pub fn reset(stream: TcpStream) {
    let _ = socket2::SockRef::from(&stream).set_linger(Some(Duration::ZERO));
    drop(stream);
}

async fn serve(mut stream: TcpStream, fault: H1Fault, truth: Arc<GroundTruth>) {
    let _serving = truth.serving();
    match fault {
        H1Fault::CloseBeforeRead => return drop(stream),
        H1Fault::ResetBeforeRead => return reset(stream),
        _ => {}
    }
    let Some(mut seen) = read_request(&mut stream, &truth).await else {
        return;
    };
    seen.processed = true;
    truth.request(seen);
    match fault {
        H1Fault::CloseBeforeRead | H1Fault::ResetBeforeRead => unreachable!("handled above"),
        H1Fault::ReadThenReset => reset(stream),
        H1Fault::ReadThenClose => drop(stream),
        H1Fault::PartialHead => {
            let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Le").await;
            let _ = stream.flush().await;
            drop(stream);
        }
        H1Fault::HeadersThenReset => {
            let head = "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\nContent-Type: application/json\r\n\r\n{\"partial\":";
            let _ = stream.write_all(head.as_bytes()).await;
            let _ = stream.flush().await;
            // Let the client read the headers before the reset discards unread data.
            tokio::time::sleep(Duration::from_millis(50)).await;
            reset(stream);
        }
        H1Fault::Stall => {
            tokio::time::sleep(Duration::from_secs(60)).await;
            drop(stream);
        }
        H1Fault::Respond(reply) => {
            if !reply.delay.is_zero() {
                tokio::time::sleep(reply.delay).await;
            }
            let mut head = format!(
                "HTTP/1.1 {} X\r\nContent-Length: {}\r\nConnection: close\r\n",
                reply.status,
                reply.body.len()
            );
            for (name, value) in &reply.headers {
                head.push_str(&format!("{name}: {value}\r\n"));
            }
            head.push_str("\r\n");
            head.push_str(&reply.body);
            let _ = stream.write_all(head.as_bytes()).await;
            let _ = stream.flush().await;
            let _ = stream.shutdown().await;
            // Drain until the client closes so the close is a FIN, never an RST over unread data.
            let mut sink = [0u8; 1024];
            let _ = tokio::time::timeout(Duration::from_secs(5), async {
                while let Ok(n) = stream.read(&mut sink).await {
                    if n == 0 {
                        break;
                    }
                }
            })
            .await;
        }
    }
}

/// Reads one request (head and body, Content-Length or chunked). `None` if the client went away.
async fn read_request(stream: &mut TcpStream, truth: &GroundTruth) -> Option<SeenRequest> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = find(&buf, b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > 64 * 1024 {
            return None;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        truth.read(n);
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut start = lines.next()?.split(' ');
    let mut seen = SeenRequest {
        method: start.next()?.to_owned(),
        path: start.next()?.to_owned(),
        ..SeenRequest::default()
    };
    let mut content_length = 0usize;
    let mut chunked = false;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim().to_owned();
        match name.trim().to_ascii_lowercase().as_str() {
            "content-length" => content_length = value.parse().unwrap_or(0),
            "transfer-encoding" => chunked = value.eq_ignore_ascii_case("chunked"),
            "idempotency-key" | "x-request-key" => seen.key = Some(value),
            "retry-attempt" => seen.attempt = Some(value),
            "retry-deadline-ms" => seen.deadline_ms = Some(value),
            _ => {}
        }
    }
    let mut body = buf.split_off(head_end);
    loop {
        let complete = if chunked {
            find(&body, b"0\r\n\r\n").is_some()
        } else {
            body.len() >= content_length
        };
        if complete {
            return Some(seen);
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        truth.read(n);
        body.extend_from_slice(&chunk[..n]);
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
