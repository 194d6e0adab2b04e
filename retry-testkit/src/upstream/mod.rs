//! The scripted upstream: a loopback server that gives each request the next [`Step`] of a
//! script and records every request it receives.
//!
//! It speaks real HTTP/1.1 and h2c on 127.0.0.1, so the client's evidence classification (was
//! the request sent? did a response start?) runs as it does in production: a reset after the
//! request was read is a reset the client's TCP stack sees.

mod h1;
mod h2;

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use retry_runtime::http::reqwest;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use crate::record::{Log, Request};
use crate::script::{Script, Step};

/// The protocol the upstream speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Protocol {
    /// HTTP/1.1, one step per connection (every answer closes it).
    Http1,
    /// HTTP/2 over plain TCP with prior knowledge, one step per stream.
    H2c,
}

/// A running scripted upstream on 127.0.0.1; stops when dropped.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use retry_testkit::{Protocol, Step, Upstream};
///
/// let upstream = Upstream::start(Protocol::Http1, [503.into(), Step::ResetAfterRead]).await;
/// let response = upstream.client().get(upstream.url("/a")).send().await.unwrap();
/// assert_eq!(response.status(), 503);
/// assert!(upstream.client().get(upstream.url("/b")).send().await.is_err());
/// // After the script: 200 with `{"status":200}`.
/// assert_eq!(upstream.client().get(upstream.url("/c")).send().await.unwrap().status(), 200);
/// let paths: Vec<_> = upstream.requests().into_iter().map(|r| r.path).collect();
/// assert_eq!(paths, ["/a", "/b", "/c"]);
/// # }
/// ```
pub struct Upstream {
    addr: SocketAddr,
    protocol: Protocol,
    log: Arc<Log>,
    task: JoinHandle<()>,
}

impl fmt::Debug for Upstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Upstream")
            .field("addr", &self.addr)
            .field("protocol", &self.protocol)
            .field("requests", &self.log.requests().len())
            .finish()
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Upstream {
    /// Starts an upstream giving successive requests `script`'s steps, then `200` forever.
    ///
    /// # Panics
    /// If no loopback port can be bound (the test cannot run at all then).
    pub async fn start(protocol: Protocol, script: impl IntoIterator<Item = Step>) -> Upstream {
        Upstream::start_then(protocol, script, Step::from(200)).await
    }

    /// [`start`](Self::start) over HTTP/1.1.
    pub async fn http1(script: impl IntoIterator<Item = Step>) -> Upstream {
        Upstream::start(Protocol::Http1, script).await
    }

    /// [`start`](Self::start) over h2c.
    pub async fn h2c(script: impl IntoIterator<Item = Step>) -> Upstream {
        Upstream::start(Protocol::H2c, script).await
    }

    /// Starts an upstream giving successive requests `script`'s steps, then `then` forever.
    ///
    /// # Panics
    /// If no loopback port can be bound.
    pub async fn start_then(
        protocol: Protocol,
        script: impl IntoIterator<Item = Step>,
        then: Step,
    ) -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("the scripted upstream binds a loopback port");
        let addr = listener
            .local_addr()
            .expect("a bound listener has an address");
        let log = Arc::new(Log::new());
        let script = Arc::new(Script::new(script, then));
        let task = tokio::spawn(accept(listener, protocol, script, log.clone()));
        Upstream {
            addr,
            protocol,
            log,
            task,
        }
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The protocol it speaks.
    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// `http://127.0.0.1:port` (no trailing slash): an adapter's base URL.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `http://127.0.0.1:port{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// A client for it: the runtime's sound settings (no redirects, no retries of its own,
    /// never through a proxy), with HTTP/2 prior knowledge for h2c.
    pub fn client(&self) -> reqwest::Client {
        let builder = retry_runtime::http::client_builder().no_proxy();
        let builder = match self.protocol {
            Protocol::Http1 => builder,
            Protocol::H2c => builder.http2_prior_knowledge(),
        };
        builder
            .build()
            .expect("a plain HTTP client builds without TLS")
    }

    /// Every request received so far, in arrival order. A request the upstream acted on before
    /// reading ([`Step::RefuseBeforeRead`] over HTTP/1.1, [`Step::CloseBeforeRead`]) is not
    /// here: it was never read.
    ///
    /// Complete once the client has its answer: each request is recorded before its step acts.
    pub fn requests(&self) -> Vec<Request> {
        self.log.requests()
    }

    /// Completes once the upstream has received `n` requests (at once if it has): the event a
    /// test waits on to act while a call is in flight (flip a switch, send a signal) without
    /// sleeping. Each request is recorded before its step acts, so the step (the answer, the
    /// reset) has not reached the client yet when this completes.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use retry_testkit::Upstream;
    ///
    /// let upstream = Upstream::http1([503.into()]).await;
    /// let client = upstream.client();
    /// let call = tokio::spawn(client.get(upstream.url("/a")).send());
    /// upstream.received(1).await;
    /// assert_eq!(upstream.requests()[0].path, "/a");
    /// assert_eq!(call.await.unwrap().unwrap().status(), 503);
    /// # }
    /// ```
    pub async fn received(&self, n: usize) {
        self.log.received(n).await;
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.log.connections()
    }
}

async fn accept(listener: TcpListener, protocol: Protocol, script: Arc<Script>, log: Arc<Log>) {
    let mut connections = tokio::task::JoinSet::new();
    while let Ok((stream, _)) = listener.accept().await {
        let _ = stream.set_nodelay(true);
        let number = log.connection();
        match protocol {
            Protocol::Http1 => {
                connections.spawn(h1::serve(stream, script.next(), log.clone(), number))
            }
            Protocol::H2c => {
                connections.spawn(h2::serve(stream, script.clone(), log.clone(), number))
            }
        };
        while connections.try_join_next().is_some() {}
    }
}

/// Resets the connection (RST instead of FIN): SO_LINGER zero, then close.
pub(crate) fn reset(stream: TcpStream) {
    let _ = socket2::SockRef::from(&stream).set_linger(Some(Duration::ZERO));
    drop(stream);
}
