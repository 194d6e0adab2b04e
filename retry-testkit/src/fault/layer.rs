//! The layer, its service and its future.

use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;
use retry_runtime::tower::BoxError;

use super::body::FaultBody;
use super::plan::Fault;
use super::{Faults, Shared};

/// Injects the faults of a [`Faults`] switch into a service's requests (see the
/// [module docs](super)).
#[derive(Clone)]
pub struct FaultLayer {
    pub(super) shared: Arc<Shared>,
}

impl fmt::Debug for FaultLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let faults = Faults {
            shared: self.shared.clone(),
        };
        f.debug_tuple("FaultLayer").field(&faults).finish()
    }
}

impl<S> tower_layer::Layer<S> for FaultLayer {
    type Service = FaultService<S>;

    fn layer(&self, inner: S) -> FaultService<S> {
        FaultService {
            inner,
            shared: self.shared.clone(),
        }
    }
}

/// A service behind a [`FaultLayer`].
#[derive(Clone)]
pub struct FaultService<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S: fmt::Debug> fmt::Debug for FaultService<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultService")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

/// The error of an injected [`Fault::Reset`] or [`Fault::Refuse`]. Its source is the I/O error
/// a real one would carry (`ConnectionReset`, `ConnectionRefused`), which is what error
/// classifiers look for.
#[derive(Debug)]
pub struct InjectedFault {
    fault: Fault,
    source: io::Error,
}

impl InjectedFault {
    fn new(fault: Fault) -> Self {
        let kind = match fault {
            Fault::Refuse => io::ErrorKind::ConnectionRefused,
            _ => io::ErrorKind::ConnectionReset,
        };
        InjectedFault {
            fault,
            source: io::Error::new(kind, "injected by retry-testkit's fault layer"),
        }
    }

    /// The fault injected.
    pub fn fault(&self) -> Fault {
        self.fault
    }
}

impl fmt::Display for InjectedFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.fault {
            Fault::Refuse => f.write_str("injected fault: refused before processing"),
            _ => f.write_str("injected fault: connection reset"),
        }
    }
}

impl std::error::Error for InjectedFault {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

impl<S, B, RB> tower_service::Service<http::Request<B>> for FaultService<S>
where
    S: tower_service::Service<http::Request<B>, Response = http::Response<RB>>,
    S::Error: Into<BoxError>,
{
    type Response = http::Response<FaultBody<RB>>;
    type Error = BoxError;
    type Future = FaultFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        // Off: one relaxed load, then the inner service as if the layer were not there.
        if !self.shared.on.load(Ordering::Relaxed) {
            return FaultFuture::new(State::Inner {
                future: self.inner.call(request),
            });
        }
        let state = match self.shared.pick(request.method(), request.uri().path()) {
            None => State::Inner {
                future: self.inner.call(request),
            },
            Some(Fault::Latency(delay)) => State::Delayed {
                sleep: Box::pin(tokio::time::sleep(delay)),
                future: self.inner.call(request),
            },
            Some(Fault::Status {
                status,
                retry_after,
            }) => State::Injected {
                result: Some(Ok(injected_response(status, retry_after))),
            },
            Some(fault @ (Fault::Reset | Fault::Refuse)) => State::Injected {
                result: Some(Err(Box::new(InjectedFault::new(fault)))),
            },
        };
        FaultFuture::new(state)
    }
}

fn injected_response(status: u16, retry_after: Option<u32>) -> http::Response<()> {
    let mut response = http::Response::new(());
    *response.status_mut() =
        http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
    if let Some(seconds) = retry_after {
        response
            .headers_mut()
            .insert(http::header::RETRY_AFTER, http::HeaderValue::from(seconds));
    }
    response
}

pin_project! {
    /// The future of a [`FaultService`].
    pub struct FaultFuture<F> {
        #[pin]
        state: State<F>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F> {
        // The inner service's answer, untouched.
        Inner { #[pin] future: F },
        // The inner service's answer, polled once the injected latency has passed (the timer
        // boxed, so that the future of a request with no fault stays small).
        Delayed { sleep: Pin<Box<tokio::time::Sleep>>, #[pin] future: F },
        // An injected answer.
        Injected { result: Option<Result<http::Response<()>, BoxError>> },
    }
}

impl<F> FaultFuture<F> {
    fn new(state: State<F>) -> Self {
        FaultFuture { state }
    }
}

impl<F> fmt::Debug for FaultFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.state {
            State::Inner { .. } => "FaultFuture::Inner",
            State::Delayed { .. } => "FaultFuture::Delayed",
            State::Injected { .. } => "FaultFuture::Injected",
        })
    }
}

impl<F, RB, E> Future for FaultFuture<F>
where
    F: Future<Output = Result<http::Response<RB>, E>>,
    E: Into<BoxError>,
{
    type Output = Result<http::Response<FaultBody<RB>>, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let future = match self.project().state.project() {
            StateProj::Inner { future } => future,
            StateProj::Delayed { sleep, future } => {
                if sleep.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                future
            }
            StateProj::Injected { result } => {
                let result = result
                    .take()
                    .unwrap_or_else(|| Err("FaultFuture polled after completion".into()));
                return Poll::Ready(result.map(|r| r.map(|()| FaultBody::injected())));
            }
        };
        match future.poll(cx) {
            Poll::Ready(Ok(response)) => Poll::Ready(Ok(response.map(FaultBody::inner))),
            Poll::Ready(Err(e)) => Poll::Ready(Err(e.into())),
            Poll::Pending => Poll::Pending,
        }
    }
}
