//! The response body of a service behind the fault layer: the inner service's, the empty body
//! of an injected status, or the failing body of a server-side reset.

use std::pin::Pin;
use std::task::{Context, Poll};

use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use retry_runtime::tower::BoxError;

use super::injected::InjectedFault;

pin_project! {
    /// The inner service's body, the empty body of an injected status, or, for a reset or a
    /// refusal on the server side, a body that fails before its first byte (the server then
    /// drops the connection). Its error is [`BoxError`], so a server takes it as it takes its
    /// own bodies'.
    #[derive(Debug)]
    pub struct FaultBody<B> {
        #[pin]
        state: State<B>,
    }
}

pin_project! {
    #[project = StateProj]
    #[derive(Debug)]
    enum State<B> {
        Inner { #[pin] body: B },
        Injected,
        Aborted { fault: Option<InjectedFault> },
    }
}

impl<B> FaultBody<B> {
    /// The inner service's body.
    pub const fn inner(body: B) -> Self {
        FaultBody {
            state: State::Inner { body },
        }
    }

    /// The empty body of an injected status.
    pub const fn injected() -> Self {
        FaultBody {
            state: State::Injected,
        }
    }

    /// The body of a server-side reset or refusal: it fails when first polled.
    pub(super) const fn aborted(fault: InjectedFault) -> Self {
        FaultBody {
            state: State::Aborted { fault: Some(fault) },
        }
    }

    /// Whether the fault layer answered.
    pub const fn is_injected(&self) -> bool {
        matches!(self.state, State::Injected | State::Aborted { .. })
    }
}

impl<B> Body for FaultBody<B>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        match self.project().state.project() {
            StateProj::Inner { body } => body.poll_frame(cx).map_err(Into::into),
            StateProj::Injected => Poll::Ready(None),
            StateProj::Aborted { fault } => match fault.take() {
                Some(fault) => Poll::Ready(Some(Err(Box::new(fault)))),
                None => Poll::Ready(None),
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.state {
            State::Inner { body } => body.is_end_stream(),
            State::Injected => true,
            State::Aborted { fault } => fault.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.state {
            State::Inner { body } => body.size_hint(),
            State::Injected => SizeHint::with_exact(0),
            // Not an exact 0: a server would send an empty answer without polling the body.
            State::Aborted { .. } => SizeHint::default(),
        }
    }
}
