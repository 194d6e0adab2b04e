//! The `#[retry]` attribute. Use it through `retry_runtime::retry`, whose documentation describes
//! every option and shows the expansion.
//!
//! `classify` is `#[derive(Classify)]`. For `#[retry]`, one module per stage: `args` parses the attribute (values with spans), `validate` applies
//! the cross-field rules and checks the function's shape (every error at once, through
//! `ctxt`), `expand` writes the attempt loop, and `fallback` emits the untouched function
//! beside the errors. `infer` reads the method from the body when it is unmistakable; `hint`
//! warns about a body that bypasses the send path.
#![forbid(unsafe_code)]

mod args;
mod classify;
mod ctxt;
mod durable;
mod expand;
mod fallback;
mod hint;
mod infer;
mod rewrite;
mod validate;

use proc_macro::TokenStream;

/// Implements `retry_runtime::Classify` for an adapter error; see `retry_runtime::Classify`.
#[proc_macro_derive(Classify, attributes(classify))]
pub fn derive_classify(input: TokenStream) -> TokenStream {
    classify::derive(input.into()).into()
}

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
    let durable = args.durable.is_some().then(|| args.krate.clone());
    let spec = validate::validate(&cx, args, &function);
    match (cx.check(), spec) {
        (Ok(()), Some(spec)) => expand::expand(spec, function),
        (Err(errors), _) => {
            let function = match durable {
                Some(krate) => durable::fallback(function, krate),
                None => function,
            };
            fallback::expand_fn(function, errors)
        }
        (Ok(()), None) => {
            let error = syn::Error::new(
                proc_macro2::Span::call_site(),
                "`#[retry]` could not understand this function (a bug in `#[retry]`, please report it)",
            );
            fallback::expand_fn(function, error)
        }
    }
}

#[cfg(test)]
mod tests {
    /// The expansion documented on `retry_runtime::retry` ("The expansion") is the real one:
    /// both sides are compared as token streams, so only formatting may differ.
    #[test]
    fn documented_expansion_is_current() {
        let docs = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../retry-runtime/src/retry_macro.md"
        ))
        .expect("the macro docs");
        let section = docs
            .split("# The expansion\n")
            .nth(1)
            .expect("an expansion section");
        let block = |fence: &str| {
            let code = section.split(fence).nth(1).expect("a fenced block");
            let code = code.split("```").next().unwrap();
            // Hidden doctest lines (`# ...`) set the example up; the shown lines are the input.
            code.lines()
                .filter(|l| !l.starts_with("# ") && *l != "#")
                .collect::<Vec<_>>()
                .join("\n")
        };
        let input = block("```rust");
        let output = block("```text");
        let input: syn::ItemFn = syn::parse_str(&input).expect("input parses");
        let attr = input
            .attrs
            .iter()
            .find(|a| a.path().is_ident("retry"))
            .unwrap();
        let args = attr.meta.require_list().unwrap().tokens.clone();
        let mut item = input.clone();
        item.attrs.retain(|a| !a.path().is_ident("retry"));
        let expanded = super::retry2(args, quote::quote!(#item));
        let expected: proc_macro2::TokenStream = output.parse().expect("output parses");
        if std::env::var_os("RETRY_PRINT_EXPANSION").is_some() {
            println!("{expanded}");
        }
        assert_eq!(flatten(expanded), flatten(expected));
    }

    /// Tokens as text, without the spacing `to_string` keeps (`::<` vs `:: <`).
    fn flatten(tokens: proc_macro2::TokenStream) -> Vec<String> {
        let mut out = Vec::new();
        for tt in tokens {
            match tt {
                proc_macro2::TokenTree::Group(g) => {
                    out.push(format!("{:?}", g.delimiter()));
                    out.extend(flatten(g.stream()));
                    out.push("end".to_owned());
                }
                other => out.push(other.to_string()),
            }
        }
        out
    }
}
