//! Warnings for a body that compiles into a worse retry than it reads: `.send().await` inside a
//! `#[retry]` function bypasses the classifying send path (`send_attempt()`), so a failure
//! proves nothing about whether the request left, no idempotency key or deadline header is
//! added, and `?` usually fails to convert `reqwest::Error` with rustc's generic message.
//!
//! Stable Rust has no warning API for proc macros; the hint is a use of a `#[deprecated]`
//! constant spanned at the `send`, the way such hints are commonly given. The user's
//! `#[allow(deprecated)]` silences it.

use proc_macro2::{Span, TokenStream};
use quote::quote_spanned;
use syn::visit::{self, Visit};
use syn::{Block, ExprAwait, Item};

/// The `send` of every `.send().await` (no arguments) in the body, outside nested items.
pub(crate) fn sends(block: &Block) -> Vec<Span> {
    let mut finder = Sends::default();
    finder.visit_block(block);
    finder.0
}

#[derive(Default)]
struct Sends(Vec<Span>);

impl<'ast> Visit<'ast> for Sends {
    fn visit_expr_await(&mut self, e: &'ast ExprAwait) {
        if let syn::Expr::MethodCall(call) = &*e.base
            && call.method == "send"
            && call.args.is_empty()
        {
            self.0.push(call.method.span());
        }
        visit::visit_expr_await(self, e);
    }

    // A nested item is not part of the attempt.
    fn visit_item(&mut self, _: &'ast Item) {}
}

/// Statements that warn at each span.
pub(crate) fn warnings(spans: &[Span]) -> TokenStream {
    spans
        .iter()
        .map(|&span| {
            quote_spanned! {span=>
                {
                    #[deprecated(note = "`.send()` in a `#[retry]` function bypasses the classifying \
                        send path: its error cannot say whether the request was sent, and no idempotency \
                        key or deadline header is added; use `.send_attempt()` \
                        (`use retry_runtime::http::RequestBuilderExt;`), whose `HttpError` converts with `?`")]
                    #[allow(non_upper_case_globals)]
                    const send_instead_of_send_attempt: () = ();
                    send_instead_of_send_attempt
                };
            }
        })
        .collect()
}
