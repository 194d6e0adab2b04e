//! The decision trace: what the runtime decided after every attempt of every call, and why.
//!
//! It is built from what the runtime reports through `tracing` and nothing else: the
//! `retry.call` and `retry.attempt` spans (upstream, method, the key's fingerprint, each
//! attempt's evidence and status) and the events of target `retry_runtime::decision` (the
//! decision, its named reason, the delay chosen). So it shows what a production log shows, and
//! it does not change when the attempt loop is reorganised.

mod capture;

pub(crate) use capture::Capture;

use std::fmt;
use std::time::Duration;

/// Every retrying call a [`Kit::run`](crate::Kit::run) saw, in the order they started.
///
/// Two traces are equal when the same calls made the same attempts with the same evidence and
/// the same decisions, reasons and delays: with a seeded registry, running the same script
/// twice gives equal traces (no wall-clock time is part of it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Trace {
    /// The calls.
    pub calls: Vec<CallTrace>,
}

/// One retrying call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CallTrace {
    /// The upstream's name in the registry.
    pub upstream: String,
    /// The operation the call belongs to (the function's name for `#[retry]`).
    pub operation: String,
    /// The HTTP method the call declared.
    pub method: String,
    /// How safe a repeat is: `Read`, `KeyedWrite` or `UnsafeWrite`.
    pub safety: String,
    /// The idempotency key as the runtime logs it: a fingerprint (`#1a2b3c4d`), never the key.
    pub key: Option<String>,
    /// The attempts, first to last.
    pub attempts: Vec<AttemptTrace>,
    /// How the call ended (`successful_with_retry`, `failed_without_retry`, `ambiguous`, ...),
    /// once it has.
    pub outcome: Option<String>,
    /// Decisions taken before any attempt (an enclosing operation allowing fewer retries).
    pub notes: Vec<DecisionRecord>,
}

/// One attempt and the decision taken after it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AttemptTrace {
    /// 1 for the first attempt.
    pub number: u32,
    /// How far a failed attempt got (`not_sent`, `sent_no_response`, `partial_response`,
    /// `response_received`); `None` when it succeeded.
    pub evidence: Option<String>,
    /// The response status, when one arrived.
    pub status: Option<u16>,
    /// Whether the attempt was lost to connection rotation (GOAWAY, `REFUSED_STREAM`).
    pub connection_rotated: bool,
    /// What the runtime decided after it (usually one record; a hedge adds its own).
    pub decisions: Vec<DecisionRecord>,
}

/// One decision: the runtime's answer and its named reason.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DecisionRecord {
    /// `retry`, `denied`, `ambiguous`, `succeeded`, `hedge`, `no_hedge`, `reconciled`.
    pub decision: String,
    /// The named reason: a [`RetryReason`](retry_runtime::RetryReason) (`status 503`), a
    /// [`DenyReason`](retry_runtime::DenyReason) (`max_attempts`) or an
    /// [`AmbiguityReason`](retry_runtime::AmbiguityReason), as the runtime logs it.
    pub reason: Option<String>,
    /// The delay chosen before the next attempt (whole milliseconds, as logged).
    pub delay: Option<Duration>,
    /// Whole retries left in the upstream's retry budget just after the decision, when the kit
    /// knows the registry.
    pub budget_left: Option<u64>,
    /// The event's message.
    pub message: String,
}

impl Trace {
    /// The only call, or `None` if there were none or several.
    pub fn single(&self) -> Option<&CallTrace> {
        match self.calls.as_slice() {
            [call] => Some(call),
            _ => None,
        }
    }

    /// Every attempt of every call, in order.
    pub fn attempts(&self) -> impl Iterator<Item = &AttemptTrace> {
        self.calls.iter().flat_map(|c| c.attempts.iter())
    }

    /// Every decision of every call, in order.
    pub fn decisions(&self) -> impl Iterator<Item = &DecisionRecord> {
        self.calls.iter().flat_map(|c| {
            c.notes
                .iter()
                .chain(c.attempts.iter().flat_map(|a| a.decisions.iter()))
        })
    }

    /// The delays chosen before each retry, in order (rotation retries, at once, included).
    pub fn delays(&self) -> Vec<Duration> {
        self.decisions()
            .filter(|d| d.decision == "retry")
            .filter_map(|d| d.delay)
            .collect()
    }
}

impl CallTrace {
    /// The decision that ended the call, if it did not succeed on its first attempt: the last
    /// `denied`, `ambiguous`, `succeeded` or `reconciled` record.
    pub fn ending(&self) -> Option<&DecisionRecord> {
        self.attempts
            .iter()
            .flat_map(|a| a.decisions.iter())
            .rev()
            .find(|d| {
                matches!(
                    d.decision.as_str(),
                    "denied" | "ambiguous" | "succeeded" | "reconciled"
                )
            })
    }
}

impl fmt::Display for Trace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.calls.is_empty() {
            return f.write_str("no retrying call was traced\n");
        }
        for call in &self.calls {
            write!(f, "{call}")?;
        }
        Ok(())
    }
}

impl fmt::Display for CallTrace {
    /// ```text
    /// call payments.charge POST (KeyedWrite, key #1a2b3c4d): successful_with_retry
    ///   #1 response_received 503 -> retry (status 503), delay 3ms, budget 9
    ///   #2 response_received 503 -> retry (status 503), delay 1ms, budget 8
    ///   #3 200 -> succeeded
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "call {}.{} {} ({}",
            self.upstream, self.operation, self.method, self.safety
        )?;
        if let Some(key) = &self.key {
            write!(f, ", key {key}")?;
        }
        writeln!(
            f,
            "): {}",
            self.outcome.as_deref().unwrap_or("not finished")
        )?;
        for note in &self.notes {
            writeln!(f, "  before any attempt: {note}")?;
        }
        for attempt in &self.attempts {
            write!(f, "  #{}", attempt.number)?;
            if let Some(evidence) = &attempt.evidence {
                write!(f, " {evidence}")?;
            }
            if let Some(status) = attempt.status {
                write!(f, " {status}")?;
            }
            if attempt.connection_rotated {
                f.write_str(" (connection rotated)")?;
            }
            match attempt.decisions.as_slice() {
                [] if attempt.evidence.is_none() => f.write_str(" -> succeeded")?,
                [] => f.write_str(" -> (no decision logged)")?,
                decisions => {
                    for (i, decision) in decisions.iter().enumerate() {
                        f.write_str(if i == 0 { " -> " } else { "; " })?;
                        write!(f, "{decision}")?;
                    }
                }
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

impl fmt::Display for DecisionRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.decision)?;
        if let Some(reason) = &self.reason {
            write!(f, " ({reason})")?;
        }
        if let Some(delay) = self.delay {
            write!(f, ", delay {}ms", delay.as_millis())?;
        }
        if let Some(budget) = self.budget_left {
            write!(f, ", budget {budget}")?;
        }
        if self.decision.is_empty() {
            f.write_str(&self.message)?;
        }
        Ok(())
    }
}
