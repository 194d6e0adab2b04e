//! HTTP/1.1 by hand over a `TcpStream`: one step per connection, so a reset or a truncated
//! head is exactly what the script says (a server library would tidy it up).

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::reset;
use crate::record::{Log, Request};
use crate::script::{Reply, Step};

/// The largest request head read; a larger one ends the connection unrecorded.
const MAX_HEAD: usize = 64 * 1024;

pub(super) async fn serve(mut stream: TcpStream, step: Step, log: Arc<Log>, connection: usize) {
    match step {
        Step::CloseBeforeRead => return drop(stream),
        Step::RefuseBeforeRead => return reset(stream),
        _ => {}
    }
    let Some(mut request) = read_request(&mut stream, &log, connection).await else {
        return;
    };
    request.processed = true;
    log.push(request);
    match step {
        Step::CloseBeforeRead | Step::RefuseBeforeRead | Step::CloseAfterRead => drop(stream),
        Step::ResetAfterRead => reset(stream),
        Step::TruncatedBody => {
            let head = "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\nContent-Type: application/json\r\n\r\n{\"partial\":";
            let _ = stream.write_all(head.as_bytes()).await;
            let _ = stream.flush().await;
            // The client must read the head before the reset discards what it has not read;
            // its read is what the script is about, so wait for it rather than for a time.
            wait_for_close_or(&mut stream, Duration::from_millis(50)).await;
            reset(stream);
        }
        Step::Respond(reply) => respond(stream, reply).await,
    }
}

async fn respond(mut stream: TcpStream, reply: Reply) {
    if !reply.delay.is_zero() {
        tokio::time::sleep(reply.delay).await;
    }
    let mut head = format!(
        "HTTP/1.1 {} {}\r\nContent-Length: {}\r\nConnection: close\r\n",
        reply.status,
        reason(reply.status),
        reply.body.len()
    );
    for (name, value) in &reply.headers {
        head.push_str(name);
        head.push_str(": ");
        head.push_str(value);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    head.push_str(&reply.body);
    if stream.write_all(head.as_bytes()).await.is_err() {
        return;
    }
    let _ = stream.flush().await;
    let _ = stream.shutdown().await;
    // Drain until the client closes, so the close is a FIN and never a reset over unread data.
    wait_for_close_or(&mut stream, Duration::from_secs(5)).await;
}

/// Reads until the peer closes, or `limit` passes.
async fn wait_for_close_or(stream: &mut TcpStream, limit: Duration) {
    let mut sink = [0u8; 1024];
    let _ = tokio::time::timeout(limit, async {
        while let Ok(n) = stream.read(&mut sink).await {
            if n == 0 {
                break;
            }
        }
    })
    .await;
}

fn reason(status: u16) -> &'static str {
    http::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("Status")
}

/// Reads one request: head, then the body (`Content-Length` or chunked). `None` if the client
/// went away first.
async fn read_request(stream: &mut TcpStream, log: &Log, connection: usize) -> Option<Request> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = find(&buf, b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > MAX_HEAD {
            return None;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let at = log.since_start();
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut start = lines.next()?.split(' ');
    let method = start.next()?.to_owned();
    let path = start.next()?.to_owned();
    let mut headers = Vec::new();
    let mut content_length = 0usize;
    let mut chunked = false;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let (name, value) = (name.trim().to_ascii_lowercase(), value.trim().to_owned());
        match name.as_str() {
            "content-length" => content_length = value.parse().unwrap_or(0),
            "transfer-encoding" => chunked = value.eq_ignore_ascii_case("chunked"),
            _ => {}
        }
        headers.push((name, value));
    }
    let mut body = buf.split_off(head_end);
    loop {
        let complete = match chunked {
            true => find(&body, b"0\r\n\r\n").is_some(),
            false => body.len() >= content_length,
        };
        if complete {
            break;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    if chunked {
        body = dechunk(&body);
    }
    Some(Request {
        method,
        path,
        headers,
        body,
        at,
        processed: false,
        connection,
    })
}

/// The payload of a chunked body (extensions and trailers dropped).
fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(line_end) = find(raw, b"\r\n") {
        let size = std::str::from_utf8(&raw[..line_end])
            .ok()
            .and_then(|l| usize::from_str_radix(l.split(';').next()?.trim(), 16).ok())
            .unwrap_or(0);
        raw = &raw[line_end + 2..];
        if size == 0 || raw.len() < size {
            break;
        }
        out.extend_from_slice(&raw[..size]);
        raw = raw.get(size + 2..).unwrap_or_default();
    }
    out
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::dechunk;

    #[test]
    fn a_chunked_body_is_reassembled() {
        assert_eq!(dechunk(b"3\r\nabc\r\n2;x=1\r\nde\r\n0\r\n\r\n"), b"abcde");
    }
}
