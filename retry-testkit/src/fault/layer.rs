//! The layer, its service and its future, for either side of a connection.

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;
use retry_runtime::tower::BoxError;

use super::body::FaultBody;
use super::injected::InjectedFault;
use super::plan::Fault;
use super::{Faults, Shared};

/// The side of a connection a [`FaultLayer`] is on: [`ServerSide`] or [`ClientSide`]. It decides
/// how a [`Fault::Reset`] or a [`Fault::Refuse`] shows.
pub trait Side: sealed::Sealed + Send + Sync + 'static {}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::ServerSide {}
    impl Sealed for super::ClientSide {}
}

/// In front of a service that answers requests ([`Faults::layer`]): the service's error type
/// is kept (an axum `Router`'s `Infallible` stays `Infallible`), and a reset or a refusal is a
/// response whose body fails before its first byte, on which the server (hyper, axum) drops
/// the connection without answering.
#[derive(Debug, Clone, Copy)]
pub enum ServerSide {}

/// Below a client's retry layer ([`Faults::client_layer`]): the service's errors become
/// [`BoxError`], and a reset or a refusal is an [`InjectedFault`] error whose source is the I/O
/// error a real one carries, so the runtime classifies it as it would the network's.
#[derive(Debug, Clone, Copy)]
pub enum ClientSide {}

impl Side for ServerSide {}
impl Side for ClientSide {}

/// Injects the faults of a [`Faults`] switch into a service's requests (see the
/// [module docs](super)), on the server side ([`Faults::layer`]) or the client side
/// ([`Faults::client_layer`]).
pub struct FaultLayer<M: Side = ServerSide> {
    pub(super) shared: Arc<Shared>,
    pub(super) side: PhantomData<fn() -> M>,
}

impl<M: Side> Clone for FaultLayer<M> {
    fn clone(&self) -> Self {
        FaultLayer {
            shared: self.shared.clone(),
            side: PhantomData,
        }
    }
}

impl<M: Side> fmt::Debug for FaultLayer<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let faults = Faults {
            shared: self.shared.clone(),
        };
        f.debug_tuple("FaultLayer").field(&faults).finish()
    }
}

impl<S, M: Side> tower_layer::Layer<S> for FaultLayer<M> {
    type Service = FaultService<S, M>;

    fn layer(&self, inner: S) -> FaultService<S, M> {
        FaultService {
            inner,
            shared: self.shared.clone(),
            side: PhantomData,
        }
    }
}

/// A service behind a [`FaultLayer`].
pub struct FaultService<S, M: Side = ServerSide> {
    inner: S,
    shared: Arc<Shared>,
    side: PhantomData<fn() -> M>,
}

impl<S: Clone, M: Side> Clone for FaultService<S, M> {
    fn clone(&self) -> Self {
        FaultService {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
            side: PhantomData,
        }
    }
}

impl<S: fmt::Debug, M: Side> fmt::Debug for FaultService<S, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultService")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S, M: Side> FaultService<S, M> {
    /// The request's fate: the inner service's answer, or an injected one.
    fn state<B>(&mut self, request: http::Request<B>) -> State<S::Future>
    where
        S: tower_service::Service<http::Request<B>>,
    {
        // Off: one relaxed load, then the inner service as if the layer were not there.
        if !self.shared.on.load(Ordering::Relaxed) {
            return State::Inner {
                future: self.inner.call(request),
            };
        }
        match self.shared.pick(request.method(), request.uri().path()) {
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
                answer: Some(Err(Injected::Status(injected_response(
                    status,
                    retry_after,
                )))),
            },
            Some(fault @ (Fault::Reset | Fault::Refuse)) => State::Injected {
                answer: Some(Err(Injected::Failure(InjectedFault::new(fault)))),
            },
        }
    }
}

impl<S, B, RB> tower_service::Service<http::Request<B>> for FaultService<S, ServerSide>
where
    S: tower_service::Service<http::Request<B>, Response = http::Response<RB>>,
{
    type Response = http::Response<FaultBody<RB>>;
    type Error = S::Error;
    type Future = FaultFuture<S::Future, ServerSide>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        FaultFuture::new(self.state(request))
    }
}

impl<S, B, RB> tower_service::Service<http::Request<B>> for FaultService<S, ClientSide>
where
    S: tower_service::Service<http::Request<B>, Response = http::Response<RB>>,
    S::Error: Into<BoxError>,
{
    type Response = http::Response<FaultBody<RB>>;
    type Error = BoxError;
    type Future = FaultFuture<S::Future, ClientSide>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        FaultFuture::new(self.state(request))
    }
}

/// What the layer answers instead of the inner service.
enum Injected {
    Status(http::Response<()>),
    Failure(InjectedFault),
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
    pub struct FaultFuture<F, M = ServerSide> {
        #[pin]
        state: State<F>,
        side: PhantomData<fn() -> M>,
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
        // An injected answer (`Err`), taken when polled; `Ok` once taken.
        Injected { answer: Option<Result<(), Injected>> },
    }
}

impl<F, M> FaultFuture<F, M> {
    fn new(state: State<F>) -> Self {
        FaultFuture {
            state,
            side: PhantomData,
        }
    }
}

impl<F, M> fmt::Debug for FaultFuture<F, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.state {
            State::Inner { .. } => "FaultFuture::Inner",
            State::Delayed { .. } => "FaultFuture::Delayed",
            State::Injected { .. } => "FaultFuture::Injected",
        })
    }
}

/// The inner service's answer (`Ok`), or what the layer injected (`Err`).
type Answer<RB, E> = Result<Result<http::Response<FaultBody<RB>>, E>, Injected>;

/// The inner service's answer, or what the layer injected.
fn poll_state<F, RB, E>(state: Pin<&mut State<F>>, cx: &mut Context<'_>) -> Poll<Answer<RB, E>>
where
    F: Future<Output = Result<http::Response<RB>, E>>,
{
    let future = match state.project() {
        StateProj::Inner { future } => future,
        StateProj::Delayed { sleep, future } => {
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            future
        }
        StateProj::Injected { answer } => {
            return match answer.take() {
                Some(Err(injected)) => Poll::Ready(Err(injected)),
                // Polled after completion: a future contract violation; never resolves twice.
                _ => Poll::Pending,
            };
        }
    };
    future
        .poll(cx)
        .map(|result| Ok(result.map(|response| response.map(FaultBody::inner))))
}

impl<F, RB, E> Future for FaultFuture<F, ServerSide>
where
    F: Future<Output = Result<http::Response<RB>, E>>,
{
    type Output = Result<http::Response<FaultBody<RB>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        poll_state(self.project().state, cx).map(|answer| match answer {
            Ok(result) => result,
            Err(Injected::Status(response)) => Ok(response.map(|()| FaultBody::injected())),
            // The server drops the connection on the body's error, before any byte of the
            // response: what a client sees of a reset (or of a refusal it cannot tell apart).
            Err(Injected::Failure(fault)) => {
                let mut response = http::Response::new(FaultBody::aborted(fault));
                *response.status_mut() = http::StatusCode::INTERNAL_SERVER_ERROR;
                Ok(response)
            }
        })
    }
}

impl<F, RB, E> Future for FaultFuture<F, ClientSide>
where
    F: Future<Output = Result<http::Response<RB>, E>>,
    E: Into<BoxError>,
{
    type Output = Result<http::Response<FaultBody<RB>>, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        poll_state(self.project().state, cx).map(|answer| match answer {
            Ok(result) => result.map_err(Into::into),
            Err(Injected::Status(response)) => Ok(response.map(|()| FaultBody::injected())),
            Err(Injected::Failure(fault)) => Err(Box::new(fault) as BoxError),
        })
    }
}
