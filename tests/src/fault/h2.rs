//! A raw HTTP/2 (prior knowledge) fault server: one scripted fault per stream, in arrival
//! order across connections.
//!
//! The test kit's h2c upstream cannot stand in for it: the kit speaks through the `h2` crate,
//! which picks a GOAWAY's last-stream-id itself and keeps the protocol well-formed, while the
//! truth table needs a GOAWAY below or at a given stream and resets with any error code,
//! written frame by frame.
//!
//! It writes frames by hand (no codec): the client preface is checked, an empty SETTINGS is
//! sent and the client's SETTINGS and PINGs are acknowledged. Request headers are HPACK-encoded
//! and not decoded, so [`SeenRequest`] records only the stream id and whether it was processed.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use super::{GroundTruth, Script, SeenRequest};

/// HTTP/2 error codes (RFC 9113 §7).
pub mod code {
    /// Graceful shutdown.
    pub const NO_ERROR: u32 = 0x0;
    /// Internal error.
    pub const INTERNAL_ERROR: u32 = 0x2;
    /// "closed prior to any processing": safe to retry, even a write.
    pub const REFUSED_STREAM: u32 = 0x7;
    /// The stream is no longer needed.
    pub const CANCEL: u32 = 0x8;
    /// The peer is generating excessive load.
    pub const ENHANCE_YOUR_CALM: u32 = 0xb;
}

/// What the server does with one stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum H2Fault {
    /// Answer with this status and a short body. Processed.
    Respond(u16),
    /// RST_STREAM with `code` before any response headers. Processed unless the code is
    /// REFUSED_STREAM ("closed prior to any processing").
    ResetBeforeHeaders(u32),
    /// Response headers (200) and part of the body, then RST_STREAM with `code`. Processed.
    ResetAfterHeaders(u32),
    /// GOAWAY whose last-stream-id is below this stream (with `code`), then close: the stream
    /// was not processed.
    GoAwayBelow(u32),
    /// GOAWAY whose last-stream-id is this stream (NO_ERROR), then close without answering:
    /// the stream may have been processed (it counts as processed).
    GoAwayAbove,
    /// Nothing: the stream is never answered, the connection stays open. Processed.
    Silent,
}

/// A running HTTP/2 fault server on 127.0.0.1.
#[derive(Debug)]
pub struct H2Server {
    addr: SocketAddr,
    truth: Arc<GroundTruth>,
    task: JoinHandle<()>,
}

impl Drop for H2Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl H2Server {
    /// Starts a server applying `script` to successive streams, then answering 200.
    pub async fn start(script: impl IntoIterator<Item = H2Fault>) -> H2Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let truth = Arc::new(GroundTruth::default());
        let script = Arc::new(Script::new(script, H2Fault::Respond(200)));
        let t = truth.clone();
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                t.connection();
                conns.spawn(serve(stream, script.clone(), t.clone()));
                while conns.try_join_next().is_some() {}
            }
        });
        H2Server { addr, truth, task }
    }

    /// `http://127.0.0.1:port{path}` (use a client with `http2_prior_knowledge()`).
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// What the server saw.
    pub fn truth(&self) -> &Arc<GroundTruth> {
        &self.truth
    }
}

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = Vec::with_capacity(9 + payload.len());
    f.extend_from_slice(&len.to_be_bytes()[1..]);
    f.push(kind);
    f.push(flags);
    f.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// `:status` as an HPACK literal without indexing, name from static index 8, raw value.
fn status_block(status: u16) -> Vec<u8> {
    if status == 200 {
        return vec![0x88];
    }
    let digits = status.to_string();
    let mut b = vec![0x08, digits.len() as u8];
    b.extend_from_slice(digits.as_bytes());
    b
}

async fn serve(mut stream: TcpStream, script: Arc<Script<H2Fault>>, truth: Arc<GroundTruth>) {
    let _serving = truth.serving();
    let mut preface = [0u8; 24];
    if stream.read_exact(&mut preface).await.is_err() || preface != PREFACE {
        return;
    }
    truth.read(preface.len());
    if stream.write_all(&frame(SETTINGS, 0, 0, &[])).await.is_err() {
        return;
    }
    loop {
        let mut header = [0u8; 9];
        if stream.read_exact(&mut header).await.is_err() {
            return;
        }
        let len = u32::from_be_bytes([0, header[0], header[1], header[2]]) as usize;
        let (kind, flags) = (header[3], header[4]);
        let id = u32::from_be_bytes([header[5], header[6], header[7], header[8]]) & 0x7fff_ffff;
        let mut payload = vec![0u8; len];
        if stream.read_exact(&mut payload).await.is_err() {
            return;
        }
        truth.read(9 + len);
        let out = match kind {
            SETTINGS if flags & ACK == 0 => frame(SETTINGS, ACK, 0, &[]),
            PING if flags & ACK == 0 => frame(PING, ACK, 0, &payload),
            HEADERS => {
                let fault = script.next();
                let processed = !matches!(
                    fault,
                    H2Fault::ResetBeforeHeaders(code::REFUSED_STREAM) | H2Fault::GoAwayBelow(_)
                );
                truth.request(SeenRequest {
                    stream: id,
                    processed,
                    ..SeenRequest::default()
                });
                match fault {
                    H2Fault::Silent => continue,
                    H2Fault::Respond(status) => {
                        let mut out = frame(HEADERS, END_HEADERS, id, &status_block(status));
                        out.extend(frame(DATA, END_STREAM, id, b"ok"));
                        out
                    }
                    H2Fault::ResetBeforeHeaders(c) => frame(RST_STREAM, 0, id, &c.to_be_bytes()),
                    H2Fault::ResetAfterHeaders(c) => {
                        let mut out = frame(HEADERS, END_HEADERS, id, &status_block(200));
                        out.extend(frame(DATA, 0, id, b"{\"partial\":"));
                        if stream.write_all(&out).await.is_err() {
                            return;
                        }
                        // Let the client see the headers before the reset.
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        frame(RST_STREAM, 0, id, &c.to_be_bytes())
                    }
                    H2Fault::GoAwayBelow(_) | H2Fault::GoAwayAbove => {
                        let (last, c) = match fault {
                            H2Fault::GoAwayBelow(c) => (id.saturating_sub(2), c),
                            _ => (id, code::NO_ERROR),
                        };
                        let mut p = last.to_be_bytes().to_vec();
                        p.extend_from_slice(&c.to_be_bytes());
                        let _ = stream.write_all(&frame(GOAWAY, 0, 0, &p)).await;
                        let _ = stream.flush().await;
                        // Give the client time to read the GOAWAY before the connection ends.
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        return;
                    }
                }
            }
            _ => continue,
        };
        if stream.write_all(&out).await.is_err() {
            return;
        }
    }
}
