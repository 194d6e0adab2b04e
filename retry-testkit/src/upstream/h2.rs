//! h2c (HTTP/2 over plain TCP, prior knowledge) with the `h2` crate: one step per stream, in
//! arrival order across connections.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use h2::server::SendResponse;
use h2::{Reason, RecvStream};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use crate::record::{Log, Request};
use crate::script::{Reply, Script, Step};

/// What a stream's task asks of its connection.
enum Order {
    /// `GOAWAY` and close (the stream named or not by its last-stream-id is the h2 crate's
    /// choice: see [`Step::CloseBeforeRead`]).
    GoAway,
    /// Drop the connection without a frame.
    Drop,
}

pub(super) async fn serve(
    stream: TcpStream,
    script: Arc<Script>,
    log: Arc<Log>,
    connection: usize,
) {
    // SO_LINGER 0: dropping the connection for `CloseAfterRead` is a reset, as a crash is.
    let _ = socket2::SockRef::from(&stream).set_linger(Some(Duration::ZERO));
    let Ok(mut conn) = h2::server::handshake(stream).await else {
        return;
    };
    let (orders, mut ordered) = mpsc::unbounded_channel();
    loop {
        tokio::select! {
            accepted = conn.accept() => {
                let Some(Ok((request, respond))) = accepted else { return };
                let step = script.next();
                if step == Step::CloseBeforeRead {
                    // Before the stream is handed to anything: the GOAWAY's last-stream-id
                    // is the stream before it.
                    conn.abrupt_shutdown(Reason::NO_ERROR);
                    drain(conn).await;
                    return;
                }
                let at = log.since_start();
                tokio::spawn(stream_step(request, respond, step, log.clone(), connection, at, orders.clone()));
            }
            Some(order) = ordered.recv() => match order {
                Order::GoAway => {
                    conn.abrupt_shutdown(Reason::NO_ERROR);
                    drain(conn).await;
                    return;
                }
                Order::Drop => return,
            },
        }
    }
}

/// Drives the connection until it has flushed its GOAWAY and closed.
async fn drain(mut conn: h2::server::Connection<TcpStream, Bytes>) {
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        while let Some(Ok(_)) = conn.accept().await {}
    })
    .await;
}

async fn stream_step(
    request: http::Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
    step: Step,
    log: Arc<Log>,
    connection: usize,
    at: Duration,
    orders: mpsc::UnboundedSender<Order>,
) {
    let (parts, body) = request.into_parts();
    let mut seen = Request {
        method: parts.method.to_string(),
        path: parts
            .uri
            .path_and_query()
            .map_or_else(|| "/".to_owned(), |p| p.to_string()),
        headers: parts
            .headers
            .iter()
            .map(|(n, v)| {
                (
                    n.as_str().to_owned(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body: Vec::new(),
        at,
        processed: false,
        connection,
    };
    if step == Step::RefuseBeforeRead {
        log.push(seen);
        respond.send_reset(Reason::REFUSED_STREAM);
        return;
    }
    let Some(bytes) = read_body(body).await else {
        log.push(seen);
        return;
    };
    seen.body = bytes;
    seen.processed = true;
    log.push(seen);
    match step {
        Step::Respond(reply) => send_reply(respond, reply).await,
        Step::ResetAfterRead => respond.send_reset(Reason::INTERNAL_ERROR),
        Step::CloseAfterRead => {
            let _ = orders.send(Order::Drop);
        }
        Step::TruncatedBody => {
            let head = http::Response::builder()
                .status(200)
                .header("content-length", "1000")
                .body(())
                .unwrap_or_default();
            if let Ok(mut send) = respond.send_response(head, false) {
                let _ = send.send_data(Bytes::from_static(b"{\"partial\":"), false);
                // Let the frames go out before the reset overtakes them.
                tokio::time::sleep(Duration::from_millis(50)).await;
                send.send_reset(Reason::INTERNAL_ERROR);
            }
        }
        Step::RefuseBeforeRead | Step::CloseBeforeRead => {
            let _ = orders.send(Order::GoAway);
        }
    }
}

async fn read_body(mut body: RecvStream) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.ok()?;
        let _ = body.flow_control().release_capacity(chunk.len());
        out.extend_from_slice(&chunk);
    }
    Some(out)
}

async fn send_reply(mut respond: SendResponse<Bytes>, reply: Reply) {
    if !reply.delay.is_zero() {
        tokio::time::sleep(reply.delay).await;
    }
    let mut head = http::Response::builder()
        .status(reply.status)
        .header("content-length", reply.body.len());
    for (name, value) in &reply.headers {
        head = head.header(name.as_str(), value.as_str());
    }
    let head = match head.body(()) {
        Ok(head) => head,
        // A header the script got wrong (HTTP/2 forbids `Connection`, for one): say so to the
        // client as a server would, with a 500.
        Err(_) => http::Response::builder()
            .status(500)
            .body(())
            .unwrap_or_default(),
    };
    let empty = reply.body.is_empty();
    if let Ok(mut send) = respond.send_response(head, empty)
        && !empty
    {
        let _ = send.send_data(Bytes::from(reply.body), true);
    }
}
