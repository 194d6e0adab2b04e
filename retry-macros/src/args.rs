//! Parsing `#[retry(...)]`'s arguments into [`Args`]: values with their spans, no cross-field
//! rules yet (those live in `validate`).

use std::fmt;

use proc_macro2::{Span, TokenStream};
use syn::meta::ParseNestedMeta;
use syn::parse::Parser;
use syn::spanned::Spanned;
use syn::{Expr, ExprLit, ExprPath, Lit, LitStr, Path};

use crate::ctxt::Ctxt;

pub(crate) const UPSTREAM: &str = "upstream";
pub(crate) const METHOD: &str = "method";
pub(crate) const IDEMPOTENCY: &str = "idempotency";
pub(crate) const RECONCILE: &str = "reconcile";
pub(crate) const DURABLE: &str = "durable";
const REGISTRY: &str = "registry";
const PARTITION: &str = "partition";
const CRATE: &str = "crate";
pub(crate) const HEDGE: &str = "hedge";

/// The arguments, in the order a message lists them.
const VALID: &str = "`upstream`, `method`, `idempotency`, `reconcile`, `durable`, `registry`, `partition`, `crate` or `hedge`";

/// Tuning people put in retry annotations elsewhere (Resilience4j, Spring Retry, backon): each
/// is refused with the registry key that holds it.
const TUNING: &[(&str, &str)] = &[
    ("max_attempts", ATTEMPTS),
    ("attempts", ATTEMPTS),
    ("max_retries", ATTEMPTS),
    ("retries", ATTEMPTS),
    ("backoff", BACKOFF),
    ("initial_backoff", BACKOFF),
    ("max_backoff", BACKOFF),
    ("multiplier", BACKOFF),
    ("jitter", BACKOFF),
    ("wait", BACKOFF),
    ("wait_duration", BACKOFF),
    ("delay", BACKOFF),
    ("interval", BACKOFF),
    ("exponential_backoff", BACKOFF),
    ("timeout", TIMEOUTS),
    ("attempt_timeout", TIMEOUTS),
    ("deadline", TIMEOUTS),
    ("min_attempt_budget", TIMEOUTS),
    ("budget", OTHER),
    ("transient_500", OTHER),
    ("retry_on", OTHER),
    ("retry_if", OTHER),
    ("when", OTHER),
];
const ATTEMPTS: &str = "set `max_attempts` there (3 is typical, 5 at most; longer outages belong in the durable queue)";
const BACKOFF: &str = "set `initial_backoff`, `multiplier` (above 1) and `max_backoff` there; linear or fixed backoff is refused";
const TIMEOUTS: &str = "set `attempt_timeout` and `deadline` there";
const OTHER: &str = "set it there";

/// Keys people reach for, and the one they mean.
const DID_YOU_MEAN: &[(&str, &str)] = &[
    ("key", IDEMPOTENCY),
    ("idempotency_key", IDEMPOTENCY),
    ("idempotent", IDEMPOTENCY),
    ("name", UPSTREAM),
    ("service", UPSTREAM),
    ("http_method", METHOD),
    ("verb", METHOD),
    ("check", RECONCILE),
    ("reconcile_with", RECONCILE),
];

/// An HTTP method `#[retry]` knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HttpMethod {
    Get,
    Head,
    Options,
    Put,
    Delete,
    Post,
    Patch,
}

impl HttpMethod {
    pub(crate) const ALL: [HttpMethod; 7] = [
        HttpMethod::Get,
        HttpMethod::Head,
        HttpMethod::Options,
        HttpMethod::Put,
        HttpMethod::Delete,
        HttpMethod::Post,
        HttpMethod::Patch,
    ];

    /// The constant's name on `http::Method`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            HttpMethod::Get => "GET",
            HttpMethod::Head => "HEAD",
            HttpMethod::Options => "OPTIONS",
            HttpMethod::Put => "PUT",
            HttpMethod::Delete => "DELETE",
            HttpMethod::Post => "POST",
            HttpMethod::Patch => "PATCH",
        }
    }

    /// GET, HEAD and OPTIONS: safe to repeat whatever happened to the previous attempt.
    pub(crate) fn is_read(self) -> bool {
        matches!(
            self,
            HttpMethod::Get | HttpMethod::Head | HttpMethod::Options
        )
    }

    /// `POST` for `POST`, case-sensitive (the `http::Method` constant's name).
    pub(crate) fn from_constant(name: &str) -> Option<Self> {
        HttpMethod::ALL.into_iter().find(|m| m.as_str() == name)
    }

    /// `post` for `POST`: reqwest's builder methods.
    pub(crate) fn from_builder(name: &str) -> Option<Self> {
        HttpMethod::ALL.into_iter().find(|m| {
            m.as_str().eq_ignore_ascii_case(name) && name.bytes().all(|b| b.is_ascii_lowercase())
        })
    }
}

impl fmt::Display for HttpMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A value and where the user wrote it.
pub(crate) struct WithSpan<T> {
    pub(crate) value: T,
    pub(crate) span: Span,
}

/// What `#[retry(...)]` said, before cross-field rules.
#[derive(Default)]
pub(crate) struct Args {
    pub(crate) upstream: Option<LitStr>,
    pub(crate) method: Option<WithSpan<HttpMethod>>,
    pub(crate) idempotency: Option<Expr>,
    pub(crate) reconcile: Option<ExprPath>,
    /// `durable = "operation"`: defer to the durable queue (checked in `durable`).
    pub(crate) durable: Option<LitStr>,
    pub(crate) registry: Option<Expr>,
    /// `partition = expr`: the call's partition for the upstream's quotas (any `Hash` value).
    pub(crate) partition: Option<Expr>,
    pub(crate) krate: Option<Path>,
    /// Where the `hedge` flag was written.
    pub(crate) hedge: Option<Span>,
    /// Keys seen, for the duplicate check (a key with an invalid value still counts).
    seen: Vec<&'static str>,
}

impl Args {
    /// Whether the key was given (even with an invalid value, already reported).
    pub(crate) fn saw(&self, key: &str) -> bool {
        self.seen.contains(&key)
    }

    /// Parses the attribute's tokens, reporting every mistake to `cx`.
    pub(crate) fn parse(cx: &Ctxt, tokens: TokenStream) -> Args {
        let mut args = Args::default();
        let parser = syn::meta::parser(|meta| args.parse_one(cx, meta));
        if let Err(e) = parser.parse2(tokens) {
            cx.syn_error(e);
        }
        args
    }

    fn parse_one(&mut self, cx: &Ctxt, meta: ParseNestedMeta) -> syn::Result<()> {
        let key = meta
            .path
            .get_ident()
            .map(ToString::to_string)
            .unwrap_or_default();
        let known = [
            UPSTREAM,
            METHOD,
            IDEMPOTENCY,
            RECONCILE,
            DURABLE,
            REGISTRY,
            PARTITION,
            CRATE,
            HEDGE,
        ]
        .into_iter()
        .find(|k| *k == key);
        let Some(known) = known else {
            skip_value(&meta)?;
            let path = &meta.path;
            if let Some((_, hint)) = TUNING.iter().find(|(k, _)| *k == key) {
                cx.error_spanned_by(
                    path,
                    format!(
                        "`{key}` belongs in the upstream's registry entry, not in code: tuning in code \
                         cannot change without a rebuild; {hint}"
                    ),
                );
            } else if let Some((_, meant)) = DID_YOU_MEAN.iter().find(|(k, _)| *k == key) {
                // Count it as given: a misspelt key must not also be reported missing.
                self.seen.push(meant);
                cx.error_spanned_by(
                    path,
                    format!("unknown `#[retry]` argument `{key}`: did you mean `{meant}`? (expected {VALID})"),
                );
            } else {
                let shown = if key.is_empty() {
                    quote::quote!(#path).to_string().replace(' ', "")
                } else {
                    key.clone()
                };
                cx.error_spanned_by(
                    path,
                    format!("unknown `#[retry]` argument `{shown}`: expected {VALID}"),
                );
            }
            return Ok(());
        };
        let duplicate = self.seen.contains(&known);
        self.seen.push(known);
        if known == HEDGE {
            return self.parse_hedge(cx, &meta, duplicate);
        }
        let value: Expr = meta.value()?.parse()?;
        if duplicate {
            cx.error_spanned_by(
                &meta.path,
                format!("duplicate `{known}` argument: give it once"),
            );
            return Ok(());
        }
        match known {
            UPSTREAM => self.upstream = upstream(cx, value),
            METHOD => self.method = method(cx, value),
            IDEMPOTENCY => self.idempotency = idempotency(cx, value),
            RECONCILE => self.reconcile = reconcile(cx, value),
            DURABLE => self.durable = durable(cx, value),
            REGISTRY => self.registry = Some(value),
            PARTITION => self.partition = Some(value),
            _ => self.krate = krate(cx, value),
        }
        Ok(())
    }
}

impl Args {
    /// `hedge`: a bare flag; when to hedge belongs in the registry.
    fn parse_hedge(
        &mut self,
        cx: &Ctxt,
        meta: &ParseNestedMeta,
        duplicate: bool,
    ) -> syn::Result<()> {
        let given_value = meta.input.peek(syn::Token![=]) || meta.input.peek(syn::token::Paren);
        skip_value(meta)?;
        if duplicate {
            cx.error_spanned_by(&meta.path, "duplicate `hedge` argument: give it once");
        } else if given_value {
            cx.error_spanned_by(
                &meta.path,
                "`hedge` is a flag: write `hedge` alone; when to hedge (delay, percentile, \
                 copies) belongs in the upstream's registry entry, under [upstreams.<name>.hedge]",
            );
        } else {
            self.hedge = Some(meta.path.span());
        }
        Ok(())
    }
}

/// Consumes `= value` or `(...)` after an unknown key so parsing can go on and report the rest.
fn skip_value(meta: &ParseNestedMeta) -> syn::Result<()> {
    if meta.input.peek(syn::Token![=]) {
        let _: Expr = meta.value()?.parse()?;
    } else if meta.input.peek(syn::token::Paren) {
        let _: proc_macro2::TokenTree = meta.input.parse()?;
    }
    Ok(())
}

fn string_literal(value: &Expr) -> Option<&LitStr> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(s), ..
        }) => Some(s),
        _ => None,
    }
}

fn upstream(cx: &Ctxt, value: Expr) -> Option<LitStr> {
    match string_literal(&value) {
        Some(lit) => Some(lit.clone()),
        None => {
            cx.error_spanned_by(
                &value,
                "the upstream must be a string literal naming its registry entry, like `upstream = \"sber\"`, \
                 so the name can be registered for `Registry::verify()`",
            );
            None
        }
    }
}

fn method(cx: &Ctxt, value: Expr) -> Option<WithSpan<HttpMethod>> {
    let span = value.span();
    let name = match &value {
        Expr::Path(p) if p.qself.is_none() => p.path.segments.last().map(|s| s.ident.to_string()),
        _ => None,
    };
    if let Some(name) = &name
        && let Some(m) = HttpMethod::from_constant(name)
    {
        return Some(WithSpan { value: m, span });
    }
    let valid = "GET, HEAD, OPTIONS, PUT, DELETE, POST or PATCH";
    let message = if let Some(s) = string_literal(&value) {
        match HttpMethod::ALL
            .into_iter()
            .find(|m| m.as_str().eq_ignore_ascii_case(&s.value()))
        {
            Some(m) => format!("write the method as a bare name: `method = {m}`"),
            None => format!("unknown HTTP method {:?}: expected {valid}", s.value()),
        }
    } else if let Some(name) = &name {
        match HttpMethod::ALL
            .into_iter()
            .find(|m| m.as_str().eq_ignore_ascii_case(name))
        {
            Some(m) => format!("write the method in upper case: `method = {m}`"),
            None => format!("unknown HTTP method `{name}`: expected {valid}"),
        }
    } else {
        format!("expected an HTTP method, like `method = POST`: one of {valid}")
    };
    cx.error_at(span, message);
    None
}

fn idempotency(cx: &Ctxt, value: Expr) -> Option<Expr> {
    if let Expr::Lit(_) = value {
        cx.error_spanned_by(
            &value,
            "a constant idempotency key makes every call the same write, so the upstream would \
             answer every call after the first with the first one's result: derive the key from \
             the call, like `idempotency = cmd.idempotency_key()`",
        );
        return None;
    }
    Some(value)
}

fn reconcile(cx: &Ctxt, value: Expr) -> Option<ExprPath> {
    match value {
        Expr::Path(p) => Some(p),
        other => {
            cx.error_spanned_by(
                &other,
                "`reconcile` takes the path of an async fn that checks whether the write happened, \
                 like `reconcile = Self::find_payment`; it is called with the same arguments",
            );
            None
        }
    }
}

fn krate(cx: &Ctxt, value: Expr) -> Option<Path> {
    let parsed = string_literal(&value).map(|s| (s, s.parse::<Path>()));
    match parsed {
        Some((_, Ok(path))) => Some(path),
        Some((lit, Err(_))) => {
            cx.error_spanned_by(
                lit,
                "`crate` must name the path of the renamed `retry-runtime` dependency, like `crate = \"retry\"`",
            );
            None
        }
        None => {
            cx.error_spanned_by(
                &value,
                "`crate` takes a string literal, like `crate = \"retry\"`",
            );
            None
        }
    }
}

/// Parses `durable = "operation"`.
fn durable(cx: &Ctxt, value: Expr) -> Option<LitStr> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) if !lit.value().trim().is_empty() => Some(lit),
        other => {
            cx.error_spanned_by(
                &other,
                "`durable` takes the operation name its tasks are queued under, a non-empty string \
                 literal like `durable = \"sber.register\"`; the worker's replay is registered under it",
            );
            None
        }
    }
}
