//! The `#[retry]` attribute. Use it through `retry_runtime::retry`; see that crate's docs.

use proc_macro::TokenStream;

/// Placeholder until the macro lands: passes the item through unchanged.
#[proc_macro_attribute]
pub fn retry(_args: TokenStream, item: TokenStream) -> TokenStream {
    item
}
