//! The users' HTTP client: how the load driver reaches the API.
//!
//! Plain HTTP/1.1 over hyper's connection API, with idle connections kept and reused, one
//! request at a time each, as a browser or a mobile app keeps its connections. The users are
//! the lab's, not a design's, so their client is as cheap as it can be: at thousands of
//! operations per second reqwest's layers (URL parsing, redirect and retry policies, a pool
//! whose waiters are scanned on every checkout) cost the lab CPU that the designs under test
//! need, and the driver's share of the lab's CPU halved without them.

use std::net::SocketAddr;
use std::sync::Mutex;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;

/// What the user saw of the API's answer: its status and the API's [`OUTCOME`] header.
///
/// [`OUTCOME`]: super::designs::OUTCOME
pub type Answer = (http::StatusCode, Option<http::HeaderValue>);

/// The users of one API: its address and the connections idle between operations.
pub struct Users {
    api: SocketAddr,
    host: http::HeaderValue,
    idle: Mutex<Vec<SendRequest<Empty<Bytes>>>>,
}

impl Users {
    /// Users of the API at `api`.
    pub fn new(api: SocketAddr) -> Self {
        Users {
            api,
            host: http::HeaderValue::from_str(&api.to_string())
                .expect("a socket address is a valid header value"),
            idle: Mutex::new(Vec::new()),
        }
    }

    /// Sends `method path` and reads the answer to its end (`None`: no answer, the connection
    /// failed). A cancelled call drops its connection, as a user who stops waiting does.
    pub async fn call(&self, method: http::Method, path: &str) -> Option<Answer> {
        let mut sender = self.connection().await?;
        let request = http::Request::builder()
            .method(method)
            .uri(path)
            .header(http::header::HOST, self.host.clone())
            .body(Empty::new())
            .ok()?;
        let response = match sender.try_send_request(request).await {
            Ok(response) => response,
            Err(mut e) => {
                // Not sent: the idle connection closed meanwhile. Once more on a new one, as
                // reqwest's pool does; a request that was sent is never repeated.
                let request = e.take_message()?;
                sender = self.connect().await?;
                sender.send_request(request).await.ok()?
            }
        };
        let status = response.status();
        let tag = response.headers().get(super::designs::OUTCOME).cloned();
        // Read to the end whatever the status, so the connection can carry the next user.
        let complete = response.into_body().collect().await.is_ok();
        if complete {
            self.idle.lock().unwrap().push(sender);
        }
        Some((status, tag))
    }

    /// An idle connection ready for a request, or a new one.
    async fn connection(&self) -> Option<SendRequest<Empty<Bytes>>> {
        loop {
            let idle = self.idle.lock().unwrap().pop();
            let Some(mut sender) = idle else { break };
            if sender.ready().await.is_ok() {
                return Some(sender);
            }
        }
        self.connect().await
    }

    /// A new connection to the API.
    async fn connect(&self) -> Option<SendRequest<Empty<Bytes>>> {
        let stream = tokio::net::TcpStream::connect(self.api).await.ok()?;
        let _ = stream.set_nodelay(true);
        let (sender, connection) = http1::handshake(TokioIo::new(stream)).await.ok()?;
        tokio::spawn(connection);
        Some(sender)
    }
}
