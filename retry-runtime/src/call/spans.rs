//! The call's spans: its own (`retry.call`), and that of its last attempt while the loop still
//! records on it (until the retry's wait begins).

/// The call's span and its last attempt's.
#[derive(Debug)]
pub(super) struct Spans {
    call: tracing::Span,
    attempt: tracing::Span,
}

impl Spans {
    /// The spans of a call whose span is `call` and that has made no attempt.
    pub(super) fn new(call: tracing::Span) -> Self {
        Spans {
            call,
            attempt: tracing::Span::none(),
        }
    }

    /// The call's span.
    #[inline]
    pub(super) fn call(&self) -> &tracing::Span {
        &self.call
    }

    /// The last attempt's span (disabled once the attempt is over for the loop).
    #[inline]
    pub(super) fn attempt(&self) -> &tracing::Span {
        &self.attempt
    }

    /// An attempt ended with `span`: the loop records its outcome there.
    #[inline]
    pub(super) fn attempt_ended(&mut self, span: tracing::Span) {
        self.attempt = span;
    }

    /// The attempt's span ends: what follows (a retry's wait) is not part of the attempt.
    #[inline]
    pub(super) fn attempt_over(&mut self) {
        self.attempt = tracing::Span::none();
    }
}
