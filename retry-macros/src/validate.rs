//! Cross-field rules and the function's shape: [`Args`] + the `fn` -> [`Spec`], or errors.

use proc_macro2::Span;
use syn::{ExprPath, ItemFn, LitStr, Path, ReturnType, Safety, Type};

use crate::args::{Args, HttpMethod, IDEMPOTENCY, METHOD, RECONCILE, UPSTREAM};
use crate::ctxt::Ctxt;
use crate::infer::{self, Inferred};

/// Everything `expand` needs, validated.
pub(crate) struct Spec {
    /// The path to `retry_runtime` (`crate = "..."`, default `::retry_runtime`).
    pub(crate) krate: Path,
    pub(crate) upstream: LitStr,
    pub(crate) method: HttpMethod,
    pub(crate) idempotency: Option<syn::Expr>,
    pub(crate) reconcile: Option<ExprPath>,
    /// An expression of type `&Registry` (default: the global registry).
    pub(crate) registry: Option<syn::Expr>,
    /// An expression of any `Hash` type naming the call's partition (default: none).
    pub(crate) partition: Option<syn::Expr>,
    /// Whether the body may run as several copies at once (`hedge`).
    pub(crate) hedge: bool,
    /// `durable = "operation"`, checked by `durable::check`.
    pub(crate) durable: Option<LitStr>,
}

pub(crate) fn validate(cx: &Ctxt, args: Args, item: &ItemFn) -> Option<Spec> {
    check_signature(cx, item);

    let upstream = match args.upstream.clone() {
        Some(lit) if lit.value().trim().is_empty() => {
            cx.error_spanned_by(
                &lit,
                "the upstream name is empty: name the registry entry this function calls, like `upstream = \"sber\"`",
            );
            None
        }
        Some(lit) => Some(lit),
        None => {
            if !args.saw(UPSTREAM) {
                cx.error_at(
                    Span::call_site(),
                    "missing `upstream = \"...\"`: name the registry entry this function calls, like `#[retry(upstream = \"sber\")]`",
                );
            }
            None
        }
    };

    let fn_name = &item.sig.ident;
    let method = match &args.method {
        Some(m) => Some((m.value, None)),
        // Given but invalid: already reported.
        None if args.saw(METHOD) => None,
        None => match infer::infer(&item.block) {
            Inferred::One(m, span) => Some((m, Some(span))),
            Inferred::Nothing => {
                cx.error_at(
                    Span::call_site(),
                    format!(
                        "cannot tell which HTTP method `{fn_name}` sends: add `method = GET` for a read, \
                         or the write's method (`method = POST`, ...); `#[retry]` never assumes GET"
                    ),
                );
                None
            }
            Inferred::Hidden(span) => {
                cx.error_at(
                    Span::call_site(),
                    format!(
                        "cannot tell which HTTP method `{fn_name}` sends: add `method = ...` (GET for a read); \
                         `#[retry]` never assumes GET"
                    ),
                );
                cx.error_at(
                    span,
                    "the method of the request sent here is not visible in this expression",
                );
                None
            }
            Inferred::Conflict(found) => {
                let names: Vec<_> = found.iter().map(|(m, _)| format!("`{m}`")).collect();
                cx.error_at(
                    Span::call_site(),
                    format!(
                        "`{fn_name}` mentions more than one HTTP method ({}): add `method = ...` for the \
                         request this `#[retry]` retries",
                        names.join(", ")
                    ),
                );
                for (m, span) in found {
                    cx.error_at(span, format!("`{m}` here"));
                }
                None
            }
        },
    };

    if let Some((m, inferred_at)) = method
        && !m.is_read()
        // A key or a check given with an invalid value was already reported.
        && !args.saw(IDEMPOTENCY)
        && !args.saw(RECONCILE)
        // A durable write has its own message: a reconcile check does not make it durable.
        && args.durable.is_none()
    {
        let why = if matches!(m, HttpMethod::Put | HttpMethod::Delete) {
            "is retried only with a key the upstream deduplicates: its response may be lost after \
             the write happened"
        } else {
            "is not idempotent: retrying it after a lost response can apply it twice, \
             the main source of double payments"
        };
        let at = args.method.as_ref().map_or(Span::call_site(), |m| m.span);
        cx.error_at(
            at,
            format!(
                "`{m}` {why}; add `idempotency = <key expression>` with a key the upstream deduplicates, \
                 or `reconcile = <path of an async fn that checks whether the write happened>`"
            ),
        );
        if let Some(span) = inferred_at {
            cx.error_at(span, format!("`{m}` inferred from this call"));
        }
    }

    if let Some((m, _)) = method {
        check_against_body(cx, m, &args, item);
    }
    if let Some(at) = args.hedge {
        check_hedge(cx, at, method.map(|(m, _)| m), &args, item);
    }
    crate::durable::check(cx, &args, item, method.map(|(m, _)| m));

    Some(Spec {
        krate: args
            .krate
            .unwrap_or_else(|| syn::parse_quote!(::retry_runtime)),
        upstream: upstream?,
        method: method?.0,
        idempotency: args.idempotency,
        reconcile: args.reconcile,
        registry: args.registry,
        partition: args.partition,
        hedge: args.hedge.is_some(),
        durable: args.durable,
    })
}

/// What `hedge` needs: a call safe to run twice at once (a read, or a keyed write: the registry
/// must still promise that the upstream deduplicates copies in flight), and a body that can run
/// twice at once (no `&mut` shared between copies).
fn check_hedge(cx: &Ctxt, at: Span, method: Option<HttpMethod>, args: &Args, item: &ItemFn) {
    if let Some(m) = method
        && !m.is_read()
        && !args.saw(IDEMPOTENCY)
    {
        cx.error_at(
            at,
            format!(
                "an unkeyed `{m}` is never hedged: two copies in flight could both execute it; \
                 remove `hedge`, or add `idempotency = ...` with a key the upstream deduplicates \
                 (and `hedge.dedups_in_flight = true` in its registry entry)"
            ),
        );
    }
    for input in &item.sig.inputs {
        let exclusive = match input {
            syn::FnArg::Receiver(r) => match &r.kind {
                syn::ReceiverKind::Reference(_, _, Some(m)) => Some(m.span),
                syn::ReceiverKind::Typed(_, ty) => exclusive_ref(ty),
                _ => None,
            },
            syn::FnArg::Typed(pt) => exclusive_ref(&pt.ty),
        };
        if let Some(span) = exclusive {
            cx.error_at(
                span,
                "`hedge` runs the body as several copies at once, and a `&mut` borrow cannot be \
                 shared between them: take `&` instead, or remove `hedge`",
            );
        }
    }
}

/// Where a `&mut` type says so.
fn exclusive_ref(ty: &Type) -> Option<Span> {
    match ty {
        Type::Reference(r) => r.mutability.map(|m| m.span),
        Type::Paren(p) => exclusive_ref(&p.elem),
        Type::Group(g) => exclusive_ref(&g.elem),
        _ => None,
    }
}

/// What the declared method and the body must agree on: a key goes with a write, and the body
/// may send a request as safe as the declared one (a HEAD under GET, a GET under POST) but never
/// a different write, which the rules for the declared method would retry wrongly.
fn check_against_body(cx: &Ctxt, declared: HttpMethod, args: &Args, item: &ItemFn) {
    if declared.is_read()
        && let Some(key) = &args.idempotency
    {
        cx.error_spanned_by(
            key,
            format!(
                "`{declared}` is a read: it is retried without a key, and upstreams deduplicate \
                 writes, not reads, so this key would be sent for nothing; remove \
                 `idempotency = ...`, or declare the write's method (`method = POST`, ...)"
            ),
        );
    }
    // Only an explicit method can contradict the body (an inferred one is the body's).
    let Some(explicit) = &args.method else {
        return;
    };
    let found = match infer::infer(&item.block) {
        Inferred::One(m, span) => vec![(m, span)],
        Inferred::Conflict(found) => found,
        Inferred::Nothing | Inferred::Hidden(_) => Vec::new(),
    };
    for (m, span) in found {
        if m != declared && !m.is_read() {
            cx.error_at(
                span,
                format!(
                    "this request is a `{m}`, but the function declares `method = {declared}`: the retry \
                     rules of `{declared}` do not hold for a `{m}`; declare `method = {m}` (a write needs \
                     `idempotency = ...` or `reconcile = ...`)"
                ),
            );
            cx.error_at(explicit.span, format!("`{declared}` declared here"));
        }
    }
}

const NOT_RESULT: &str = "`#[retry]` needs a function returning `Result<T, E>`: it retries on `Err`; \
     return `Result<T, E>` where `E: Classify + From<retry_runtime::Error> + Display`";

/// The function's shape: `async`, a `Result`, no `const`, no `unsafe`, no variadics.
fn check_signature(cx: &Ctxt, item: &ItemFn) {
    let sig = &item.sig;
    if let Err(e) = item.modifiers.require_empty() {
        cx.syn_error(e);
    }
    if let Some(c) = &sig.constness {
        cx.error_spanned_by(c, "`#[retry]` cannot go on a `const fn`: remove `const`");
    }
    if let Safety::Unsafe(u) = &sig.safety {
        cx.error_spanned_by(
            u,
            "`#[retry]` cannot go on an `unsafe fn`: put it on a safe `async fn` that wraps the unsafe call",
        );
    }
    if let Some(v) = &sig.variadic {
        cx.error_spanned_by(
            v,
            "`#[retry]` cannot go on a variadic function: take a slice instead",
        );
    }
    if sig.asyncness.is_none() {
        cx.error_spanned_by(
            sig.fn_token,
            "`#[retry]` needs an `async fn`: it awaits the backoff between attempts; write `async fn`",
        );
    }
    match &sig.output {
        ReturnType::Default => cx.error_at(sig.paren_token.span.join(), NOT_RESULT),
        ReturnType::Type(_, ty) => {
            if !may_be_result(ty) {
                cx.error_spanned_by(ty, NOT_RESULT);
            }
        }
    }
}

/// `false` when the type is certainly not a `Result`: not a path, or a well-known other type. A
/// path with another name may be an alias of `Result`; the type checker has the last word.
fn may_be_result(ty: &Type) -> bool {
    match ty {
        Type::Paren(p) => may_be_result(&p.elem),
        Type::Group(g) => may_be_result(&g.elem),
        Type::Path(p) => {
            let Some(last) = p.path.segments.last() else {
                return false;
            };
            let name = last.ident.to_string();
            !matches!(
                name.as_str(),
                "Option"
                    | "Vec"
                    | "String"
                    | "Box"
                    | "bool"
                    | "char"
                    | "str"
                    | "u8"
                    | "u16"
                    | "u32"
                    | "u64"
                    | "u128"
                    | "usize"
                    | "i8"
                    | "i16"
                    | "i32"
                    | "i64"
                    | "i128"
                    | "isize"
                    | "f32"
                    | "f64"
                    | "Self"
            )
        }
        _ => false,
    }
}
