//! The `tracing` layer that turns the runtime's spans and decision events into a [`Trace`].

use std::fmt::{self, Write as _};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use retry_runtime::Registry;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Event, Metadata, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

use super::{AttemptTrace, CallTrace, DecisionRecord, Trace};

/// The runtime's targets all start with this; nothing else is captured.
const RUNTIME: &str = "retry_runtime";
const DECISION: &str = "retry_runtime::decision";
const CALL_SPAN: &str = "retry.call";
const ATTEMPT_SPAN: &str = "retry.attempt";

/// Collects the trace of the calls polled under it (a layer over `tracing-subscriber`'s
/// registry; see [`Kit::run`](crate::Kit::run)).
#[derive(Clone)]
pub(crate) struct Capture {
    trace: Arc<Mutex<Trace>>,
    /// Read for the budget left after each decision.
    registry: Arc<Registry>,
}

/// A call span's place in the trace.
struct CallIndex(usize);
/// An attempt span's place in the trace.
struct AttemptIndex(usize, usize);

impl Capture {
    pub(crate) fn new(registry: Arc<Registry>) -> Self {
        Capture {
            trace: Arc::default(),
            registry,
        }
    }

    /// The trace so far, and a fresh one from now on.
    pub(crate) fn take(&self) -> Trace {
        std::mem::take(&mut *self.lock())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Trace> {
        self.trace.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn budget_left(&self, upstream: &str) -> Option<u64> {
        let upstream = self.registry.upstream(upstream).ok()?;
        Some(upstream.budget().available())
    }
}

fn is_runtime(metadata: &Metadata<'_>) -> bool {
    metadata.target().starts_with(RUNTIME)
}

impl<S> tracing_subscriber::Layer<S> for Capture
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        match is_runtime(metadata) {
            true => Interest::always(),
            false => Interest::never(),
        }
    }

    fn enabled(&self, metadata: &Metadata<'_>, _ctx: Context<'_, S>) -> bool {
        is_runtime(metadata)
    }

    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        match attrs.metadata().name() {
            CALL_SPAN => {
                let call = CallTrace {
                    upstream: fields.text("upstream"),
                    operation: fields.text("operation"),
                    method: fields.text("http.request.method"),
                    safety: fields.text("safety"),
                    key: fields.get("idempotency_key"),
                    ..CallTrace::default()
                };
                let mut trace = self.lock();
                trace.calls.push(call);
                span.extensions_mut()
                    .insert(CallIndex(trace.calls.len() - 1));
            }
            ATTEMPT_SPAN => {
                let Some(call) = span
                    .parent()
                    .and_then(|p| p.extensions().get::<CallIndex>().map(|c| c.0))
                else {
                    return;
                };
                let mut trace = self.lock();
                let Some(attempts) = trace.calls.get_mut(call).map(|c| &mut c.attempts) else {
                    return;
                };
                attempts.push(AttemptTrace {
                    number: fields.number("attempt").unwrap_or(0) as u32,
                    ..AttemptTrace::default()
                });
                let index = AttemptIndex(call, attempts.len() - 1);
                drop(trace);
                span.extensions_mut().insert(index);
            }
            _ => {}
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut fields = Fields::default();
        values.record(&mut fields);
        let extensions = span.extensions();
        let mut trace = self.lock();
        if let Some(&AttemptIndex(call, attempt)) = extensions.get::<AttemptIndex>() {
            let Some(attempt) = trace
                .calls
                .get_mut(call)
                .and_then(|c| c.attempts.get_mut(attempt))
            else {
                return;
            };
            if let Some(evidence) = fields.get("evidence") {
                attempt.evidence = Some(evidence);
            }
            if let Some(status) = fields.number("http.response.status_code") {
                attempt.status = u16::try_from(status).ok();
            }
            if fields.get("connection_rotated").as_deref() == Some("true") {
                attempt.connection_rotated = true;
            }
        } else if let Some(&CallIndex(call)) = extensions.get::<CallIndex>()
            && let (Some(call), Some(outcome)) = (trace.calls.get_mut(call), fields.get("outcome"))
        {
            call.outcome = Some(outcome);
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        if event.metadata().target() != DECISION {
            return;
        }
        let Some(call) = ctx.event_scope(event).and_then(|scope| {
            scope
                .from_root()
                .filter_map(|span| span.extensions().get::<CallIndex>().map(|c| c.0))
                .last()
        }) else {
            return;
        };
        let mut fields = Fields::default();
        event.record(&mut fields);
        let upstream = match self.lock().calls.get(call) {
            Some(c) => c.upstream.clone(),
            None => return,
        };
        let decision = fields.text("decision");
        let budget_left = match decision.as_str() {
            "retry" | "denied" | "hedge" => self.budget_left(&upstream),
            _ => None,
        };
        let record = DecisionRecord {
            reason: fields.get("reason"),
            delay: fields.number("delay_ms").map(Duration::from_millis),
            budget_left,
            message: fields.text("message"),
            decision,
        };
        let number = fields
            .number("attempt")
            .or_else(|| fields.number("attempts"))
            .map(|n| n as u32);
        let mut trace = self.lock();
        let Some(call) = trace.calls.get_mut(call) else {
            return;
        };
        let at = number
            .and_then(|n| call.attempts.iter().rposition(|a| a.number == n))
            .or_else(|| call.attempts.len().checked_sub(1));
        match at {
            Some(i) => call.attempts[i].decisions.push(record),
            None => call.notes.push(record),
        }
    }
}

/// A span's or event's fields, rendered as the runtime writes them.
#[derive(Default)]
struct Fields(Vec<(&'static str, String, Option<u64>)>);

impl Fields {
    fn get(&self, name: &str) -> Option<String> {
        self.0
            .iter()
            .find(|(n, ..)| *n == name)
            .map(|(_, v, _)| v.clone())
    }

    fn text(&self, name: &str) -> String {
        self.get(name).unwrap_or_default()
    }

    fn number(&self, name: &str) -> Option<u64> {
        self.0
            .iter()
            .find(|(n, ..)| *n == name)
            .and_then(|(_, v, n)| n.or_else(|| v.parse().ok()))
    }
}

impl Visit for Fields {
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.push((field.name(), value.to_string(), Some(value)));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0
            .push((field.name(), value.to_string(), u64::try_from(value).ok()));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.push((field.name(), value.to_owned(), None));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let mut text = String::new();
        let _ = write!(text, "{value:?}");
        self.0.push((field.name(), text, None));
    }
}
