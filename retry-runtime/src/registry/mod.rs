//! The registry of named upstreams: where tuning lives.
//!
//! Code names an upstream (`#[retry(upstream = "sber")]`); the registry says how to retry it.
//! Configs come from a TOML file, environment overrides, or a builder in code, are validated at
//! load (every violation at once, with its position and the fix) and can be swapped at runtime
//! without a restart: calls in flight keep the config they started with.
//!
//! An unknown upstream is an error, never a silent default.
//!
//! # The configuration file
//!
//! One table per upstream under `upstreams`; the budget, the circuit breaker and hedging are
//! sub-tables. Every key is optional
//! and defaults to [`UpstreamConfig::new`](crate::UpstreamConfig::new) (the table below restates its `# Default` section).
//!
//! ```toml
//! [upstreams.sber]
//! max_attempts = 3
//! initial_backoff = "500ms"
//! multiplier = 2.0
//! max_backoff = "1s"
//! jitter = "full"            # or "decorrelated"
//! backoff = "exponential"    # the only accepted value
//! attempt_timeout = "1s"
//! deadline = "5s"
//! min_attempt_budget = "50ms"
//! transient_500 = false
//! idempotency_header = "Idempotency-Key"
//! dedups_idempotency_key = true
//! propagate = true           # your own service behind the server layer (default false)
//! bulkhead = 100             # no default: left out, unlimited
//!
//! [upstreams.sber.budget]
//! ratio = 0.2
//! min_per_second = 10
//! window = "10s"
//!
//! [upstreams.sber.throttle]   # on by default
//! enabled = true
//! multiplier = 3.0
//! retry_multiplier = 1.0
//! window = "500ms"
//! wait = true
//!
//! [upstreams.sber.breaker]    # no default: left out, no breaker
//! enabled = true
//! failure_rate = 0.8
//! min_attempts = 20
//! window = "10s"
//! open_for = "5s"
//! half_open_probes = 3
//!
//! [upstreams.sber.hedge]     # no default: left out, never hedged
//! percentile = 95            # or a fixed delay = "50ms", not both
//! max_copies = 2
//! dedups_in_flight = false   # keyed writes too, if the upstream dedups copies in flight
//! ```
//!
//! | key | type | default | rule |
//! |---|---|---|---|
//! | `max_attempts` | integer | 3 | 1..=5; beyond 5, hand off to a durable queue |
//! | `initial_backoff` | duration | `"500ms"` | above zero |
//! | `multiplier` | number | 2.0 | above 1 |
//! | `max_backoff` | duration | `"1s"` | at least `initial_backoff` |
//! | `jitter` | `"full"` or `"decorrelated"` | `"full"` | |
//! | `backoff` | `"exponential"` | `"exponential"` | `"linear"`, `"fixed"` are refused |
//! | `attempt_timeout` | duration | `"1s"`; half the `deadline` with `propagate = true` | above zero |
//! | `deadline` | duration | `"5s"` | above zero, at most 5s (the in-memory window) |
//! | `min_attempt_budget` | duration | `"50ms"` | below `attempt_timeout` |
//! | `transient_500` | boolean | `false` | |
//! | `idempotency_header` | string | `"Idempotency-Key"` | a valid header name |
//! | `dedups_idempotency_key` | boolean | `true` | |
//! | `propagate` | boolean | `false` | turn on for your own services that run the server layer |
//! | `bulkhead` | integer | none (unlimited) | at least 1 |
//! | `budget.ratio` | number | 0.2 | 0.0..=1000.0 |
//! | `budget.min_per_second` | integer | 10 | |
//! | `budget.window` | duration | `"10s"` | 1s..=60s |
//! | `throttle.enabled` | boolean | `true` | adaptive admission: see [`throttle`](crate::throttle) |
//! | `throttle.multiplier` | number | 3.0 | 1..=100: first attempts reach at most this many times what the upstream accepts |
//! | `throttle.retry_multiplier` | number | 1.0 | 1..=100: the same for retries and hedges |
//! | `throttle.window` | duration | `"500ms"` | 500ms..=600s |
//! | `throttle.wait` | boolean | `true` | a refused call waits, within its deadline, for the upstream to accept again (a slow upstream's backlog at the pace of its answers); `false`: it fails at once |
//! | `breaker.enabled` | boolean | `true` once a breaker key is set | an opt-in hard stop: opened, it refuses every call for `open_for` |
//! | `breaker.failure_rate` | number | 0.8 | above 0, at most 1 (below 0.8 it opens on an upstream that is only flaky) |
//! | `breaker.min_attempts` | integer | 20 | at least 1 |
//! | `breaker.window` | duration | `"10s"` | 1s..=600s |
//! | `breaker.open_for` | duration | `"5s"` | above zero |
//! | `breaker.half_open_probes` | integer | 3 | at least 1 |
//! | `hedge.enabled` | boolean | `true` once a hedge key is set | `false` turns hedging off (an environment override) |
//! | `hedge.delay` | duration | none | above zero, below `attempt_timeout`; not with `percentile` |
//! | `hedge.percentile` | number | none | above 0, below 100 (of the last 5-10 s of latencies; no hedge before 20 are known) |
//! | `hedge.max_copies` | integer | 2 | 2..=3, at most `max_attempts` |
//! | `hedge.dedups_in_flight` | boolean | `false` | the upstream answers concurrent copies of a keyed write with one execution |
//!
//! The deadline is the longest a call may wait in memory, whatever a server's `Retry-After`
//! asks, so it is held to the same 5 s as the window below.
//!
//! Across keys: the worst-case in-memory retry window (every backoff at its ceiling plus
//! `max_attempts` x `attempt_timeout`) must not exceed 5 s; longer outages
//! belong to a durable task queue. With `propagate = true` the window is at most the
//! `deadline`: the callee is told when the caller stops waiting and stops too, so no attempt
//! the deadline cuts leaves work behind (see
//! [`UpstreamConfig::retry_window`](crate::UpstreamConfig::retry_window)).
//!
//! **Durations** are strings of one number and one unit (`ns`, `us`, `ms`, `s`, `m`, `h`):
//! `"500ms"`, `"2s"`, `"1m"`, `"1.5s"`. A bare number is refused (seconds or milliseconds?), as
//! are signs, spaces, compound forms (`"1m30s"`) and fractions of a nanosecond.
//!
//! **Errors.** Loading reports every mistake at once, each at its `file:line:column` (columns
//! count characters) with the fix: unknown keys (with the closest valid one), wrong types, bad
//! durations, and every rule of [`UpstreamConfig::violations`](crate::UpstreamConfig::violations), located at the offending value
//! or, when the key was left at its default, at the upstream's table header. A file that is not
//! valid TOML reports its syntax errors only. A file with no upstream is refused, so that a
//! truncated file cannot unload every upstream. A sample file with every key, its default and
//! its reason: [`retry-runtime/examples/upstreams.toml`](https://github.com/retry-rs/retry/blob/main/retry-runtime/examples/upstreams.toml).
//!
//! # Environment overrides
//!
//! `RETRY__<UPSTREAM>__<KEY>=<value>` overrides one key of an upstream the file defines, on top
//! of the file: `RETRY__SBER__MAX_ATTEMPTS=4`, `RETRY__SBER__BUDGET__RATIO=0.1`. Segments are
//! separated by a double underscore and matched without regard to case. `<UPSTREAM>` is the
//! name in upper case with every character other than an ASCII letter or digit written `_`
//! (`sms-gateway` is `SMS_GATEWAY`); `<KEY>` is the key in upper case, prefixed `BUDGET__`,
//! `BREAKER__` or `HEDGE__` for a key of those tables. The value is the bare text of the file's value (`750ms`, not `"750ms"`). An override
//! that names no upstream of the file, or two of them, is an error: overrides never create an
//! upstream. Errors are located as `environment: RETRY__SBER__MAX_ATTEMPTS`. Tests and tools
//! pass the variables explicitly to [`Registry::load_str`] or [`parse_toml`];
//! [`Registry::load_file`] reads the process environment.
//!
//! # Reloading
//!
//! Calling [`Registry::load_file`] again reloads without a restart. The new configuration
//! replaces the old one in a single atomic swap ([`Registry::replace`]) only if it is valid
//! entirely; otherwise nothing changes and the errors are returned. A call holds the
//! `Arc<Upstream>` it started with, so calls in flight finish on the old settings while new
//! calls see the new ones. Budgets whose settings did not change carry over.
//!
//! ```
//! use retry_runtime::Registry;
//!
//! let registry = Registry::new();
//! let env = [("RETRY__SBER__MAX_ATTEMPTS".to_owned(), "2".to_owned())];
//! registry
//!     .load_str("[upstreams.sber]\nmax_attempts = 3\n", "upstreams.toml", env)
//!     .unwrap();
//! assert_eq!(registry.upstream("sber").unwrap().config().max_attempts, 2);
//!
//! // A bad reload changes nothing and says what to fix.
//! let errors = registry
//!     .load_str("[upstreams.sber]\nmax_attempts = 10\n", "upstreams.toml", [])
//!     .unwrap_err();
//! assert_eq!(
//!     errors.errors()[0].to_string(),
//!     "upstreams.toml:2:16: upstream `sber`: max_attempts = 10 is outside 1..=5: 3 is typical; \
//!      beyond 5, hand off to the durable queue"
//! );
//! assert_eq!(registry.upstream("sber").unwrap().config().max_attempts, 2);
//! ```
//!
//! At start-up, `Registry::global().load_file("upstreams.toml")` configures the registry that
//! `#[retry]` and [`Retry::upstream`](crate::Retry::upstream) use.

mod builder;
mod draft;
#[cfg(feature = "durable")]
mod durable;
mod env;
mod errors;
mod file;
pub(crate) mod keys;
pub(crate) mod live;
mod position;
mod reload;
mod table;
mod verify;
mod walk;
pub use builder::RegistryBuilder;
pub use env::ENV_PREFIX;
pub use errors::{ConfigError, ConfigErrors, Location};
pub use file::parse_toml;
pub(crate) use live::Registry;
pub use table::KNOWN_IN_ERRORS;
pub use verify::{MissingUpstream, MissingUpstreams, Registration};

pub use crate::upstream::{RefreshAuth, RefreshError};

#[cfg(test)]
mod tests;
