//! The error path: the function as written, after the errors.
//!
//! Emitting the function keeps its callers compiling (no cascade of "cannot find function"
//! errors) and keeps IDE completion working while the attribute is being fixed. The errors are
//! `compile_error!` invocations with braces, valid in item, impl and trait position.

use proc_macro2::TokenStream;
use quote::ToTokens;

/// The item could not be parsed as a function: emit it untouched.
pub(crate) fn expand(item: TokenStream, errors: syn::Error) -> TokenStream {
    let mut out = errors.into_compile_error();
    out.extend(item);
    out
}

/// The function, minus what `#[retry]` already reported and rustc would report again (a
/// variadic, `const` beside `async`), so each mistake is reported once.
pub(crate) fn expand_fn(mut function: syn::ItemFn, errors: syn::Error) -> TokenStream {
    function.sig.variadic = None;
    if function.sig.asyncness.is_some() {
        function.sig.constness = None;
    }
    let mut out = errors.into_compile_error();
    out.extend(function.into_token_stream());
    out
}
