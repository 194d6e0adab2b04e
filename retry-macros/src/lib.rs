//! The `#[retry]` attribute. Use it through `retry_runtime::retry`, whose documentation describes
//! every option and shows the expansion.
//!
//! One module per stage: [`args`] parses the attribute (values with spans), [`validate`] applies
//! the cross-field rules and checks the function's shape (every error at once, through
//! [`ctxt`]), [`expand`] writes the attempt loop, and [`fallback`] emits the untouched function
//! beside the errors. [`infer`] reads the method from the body when it is unmistakable.
#![forbid(unsafe_code)]

mod args;
mod ctxt;
mod expand;
mod fallback;
mod infer;
mod validate;

use proc_macro::TokenStream;

/// Retries an `async fn` safely; see `retry_runtime::retry`.
#[proc_macro_attribute]
pub fn retry(args: TokenStream, item: TokenStream) -> TokenStream {
    retry2(args.into(), item.into()).into()
}

fn retry2(
    args: proc_macro2::TokenStream,
    item: proc_macro2::TokenStream,
) -> proc_macro2::TokenStream {
    let function: syn::ItemFn = match syn::parse2(item.clone()) {
        Ok(function) => function,
        Err(_) => {
            let error = syn::Error::new(
                proc_macro2::Span::call_site(),
                "`#[retry]` goes on an `async fn` with a body (a free function, or a method in an `impl` block)",
            );
            return fallback::expand(item, error);
        }
    };
    let cx = ctxt::Ctxt::new();
    let args = args::Args::parse(&cx, args);
    let spec = validate::validate(&cx, args, &function);
    match (cx.check(), spec) {
        (Ok(()), Some(spec)) => expand::expand(spec, function),
        (Err(errors), _) => fallback::expand_fn(function, errors),
        (Ok(()), None) => {
            let error = syn::Error::new(
                proc_macro2::Span::call_site(),
                "`#[retry]` could not understand this function (a bug in `#[retry]`, please report it)",
            );
            fallback::expand_fn(function, error)
        }
    }
}
