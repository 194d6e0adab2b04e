//! What to inject where: faults, the routes they apply to and their rates.

use std::time::Duration;

/// One fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fault {
    /// The request waits this long before it goes on to the inner service (a slow network or
    /// a slow upstream; the attempt timeout may cut it).
    Latency(Duration),
    /// Answer with this status without calling the inner service, with `Retry-After` (whole
    /// seconds) if given.
    Status {
        /// The status code.
        status: u16,
        /// The `Retry-After` header's value, in seconds.
        retry_after: Option<u32>,
    },
    /// The exchange ends with no response after the request went out: an error whose source
    /// is an I/O `ConnectionReset` (client side: the retry layer's default classifier reads
    /// it as "sent, no response"; server side: hyper closes the connection, or resets the
    /// HTTP/2 stream).
    Reset,
    /// The request is turned away before it is processed, as `REFUSED_STREAM` or a `GOAWAY`
    /// below it say: an error whose source is an I/O `ConnectionRefused` (client side: "not
    /// sent", retried even for a write without a key). On the server side the inner service
    /// is not called, but hyper cannot tell the client so: the client sees a reset.
    Refuse,
}

impl Fault {
    /// [`Fault::Status`] without `Retry-After`.
    pub const fn status(status: u16) -> Fault {
        Fault::Status {
            status,
            retry_after: None,
        }
    }

    /// [`Fault::Status`] with `Retry-After: seconds`.
    pub const fn status_retry_after(status: u16, seconds: u32) -> Fault {
        Fault::Status {
            status,
            retry_after: Some(seconds),
        }
    }
}

/// A fault, the requests it applies to, and the share of them that get it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Rule {
    /// Only requests with this method (any when `None`).
    pub method: Option<http::Method>,
    /// Only requests whose path starts with this (`/` for all).
    pub path_prefix: String,
    /// The fault.
    pub fault: Fault,
    /// The share of matching requests that get it, in `[0, 1]` (a rate outside is clamped; a
    /// NaN is 0).
    pub rate: f64,
}

/// The rules in force, tried in order on every request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FaultPlan {
    rules: Vec<Rule>,
    limit: Option<u64>,
}

impl FaultPlan {
    /// An empty plan (nothing injected).
    pub fn new() -> Self {
        FaultPlan::default()
    }

    /// Adds a rule for every method on paths starting with `path_prefix`.
    pub fn rule(self, path_prefix: impl Into<String>, fault: Fault, rate: f64) -> Self {
        self.push(None, path_prefix.into(), fault, rate)
    }

    /// Adds a rule for `method` on paths starting with `path_prefix`.
    pub fn rule_for(
        self,
        method: http::Method,
        path_prefix: impl Into<String>,
        fault: Fault,
        rate: f64,
    ) -> Self {
        self.push(Some(method), path_prefix.into(), fault, rate)
    }

    fn push(
        mut self,
        method: Option<http::Method>,
        path_prefix: String,
        fault: Fault,
        rate: f64,
    ) -> Self {
        let rate = match rate.is_nan() {
            true => 0.0,
            false => rate.clamp(0.0, 1.0),
        };
        self.rules.push(Rule {
            method,
            path_prefix,
            fault,
            rate,
        });
        self
    }

    /// Injects at most `n` faults, then lets every request through (one reset in a drill, or
    /// the first attempt of a test failing and its retry going through).
    pub const fn at_most(mut self, n: u64) -> Self {
        self.limit = Some(n);
        self
    }

    /// The rules, in order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The most faults this plan injects, if limited.
    pub const fn limit(&self) -> Option<u64> {
        self.limit
    }

    pub(crate) fn matching<'a>(
        &'a self,
        method: &'a http::Method,
        path: &'a str,
    ) -> impl Iterator<Item = &'a Rule> + 'a {
        self.rules.iter().filter(move |rule| {
            rule.method.as_ref().is_none_or(|m| m == method) && path.starts_with(&rule.path_prefix)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_match_by_method_and_path_prefix_and_rates_are_clamped() {
        let plan = FaultPlan::new().rule("/a", Fault::Reset, 2.0).rule_for(
            http::Method::POST,
            "/",
            Fault::Refuse,
            f64::NAN,
        );
        let get = plan.matching(&http::Method::GET, "/a/b").count();
        let post = plan.matching(&http::Method::POST, "/b").count();
        assert_eq!((get, post), (1, 1));
        assert_eq!(plan.rules()[0].rate, 1.0);
        assert_eq!(plan.rules()[1].rate, 0.0);
    }
}
