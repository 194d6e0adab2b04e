//! The error path: the original function, unchanged, after the errors.
//!
//! Emitting the function keeps its callers compiling (no cascade of "cannot find function"
//! errors) and keeps IDE completion working while the attribute is being fixed. The errors are
//! `compile_error!` invocations with braces, valid in item, impl and trait position.

use proc_macro2::TokenStream;

pub(crate) fn expand(item: TokenStream, errors: syn::Error) -> TokenStream {
    let mut out = errors.into_compile_error();
    out.extend(item);
    out
}
