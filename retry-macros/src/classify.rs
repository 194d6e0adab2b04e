//! `#[derive(Classify)]`: an adapter error's `Classify` implementation, written so that no fact
//! can be dropped by omission.
//!
//! Every variant says what it knows, or the derive refuses it:
//! - a variant with one field, or marked `#[classify(transparent)]`, wraps a classifying error
//!   and delegates every fact to it (`via`);
//! - any other variant states its facts: `#[classify(status = 422, permanent = "contract")]`,
//!   `#[classify(evidence = "response_received", permanent = "decode")]`. A status implies
//!   `response_received`; without either, evidence defaults to `sent_no_response`, the cautious
//!   answer.
//!
//! `#[classify(from)]` on a wrapping variant also generates `From<field type>`, so `?` converts
//! the runtime's and the HTTP integration's errors.
//!
//! ```text
//! #[derive(Debug, Classify)]
//! enum AdapterError {
//!     #[classify(from)]
//!     Retry(retry_runtime::Error),
//!     #[classify(from)]
//!     Http(retry_runtime::http::HttpError),
//!     #[classify(status = 422, permanent = "contract")]
//!     Rejected { code: String },
//! }
//! ```

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Data, DeriveInput, Fields, LitStr};

use crate::ctxt::Ctxt;

const EVIDENCE: [(&str, &str); 4] = [
    ("not_sent", "NotSent"),
    ("sent_no_response", "SentNoResponse"),
    ("response_received", "ResponseReceived"),
    ("partial_response", "PartialResponse"),
];

const PERMANENT: [(&str, &str); 7] = [
    ("contract", "Contract"),
    ("decode", "Decode"),
    ("auth", "Auth"),
    ("invalid_request", "InvalidRequest"),
    ("configuration", "Configuration"),
    ("cancelled", "Cancelled"),
    ("other", "Other"),
];

/// What one variant (or the struct) knows.
enum Facts {
    /// Delegates to its only field.
    Transparent { from: bool },
    /// States its own facts (idents of `Evidence` and `PermanentCategory` variants).
    Stated {
        evidence: Ident,
        status: Option<u16>,
        permanent: Option<Ident>,
    },
}

type Ident = proc_macro2::Ident;

/// One arm: how to match the variant, and what it knows.
struct Arm {
    /// `Self::Variant` or `Self`.
    path: TokenStream,
    fields: Fields,
    facts: Facts,
}

pub(crate) fn derive(input: TokenStream) -> TokenStream {
    let input: DeriveInput = match syn::parse2(input) {
        Ok(input) => input,
        Err(e) => return e.to_compile_error(),
    };
    let cx = Ctxt::new();
    let arms = arms(&cx, &input);
    if let Err(errors) = cx.check() {
        return errors.to_compile_error();
    }
    expand(&input, &arms)
}

fn arms(cx: &Ctxt, input: &DeriveInput) -> Vec<Arm> {
    match &input.data {
        Data::Enum(data) => data
            .variants
            .iter()
            .filter_map(|v| {
                let ident = &v.ident;
                let facts = facts(
                    cx,
                    &v.attrs,
                    &v.fields,
                    v.span(),
                    &format!("variant `{ident}`"),
                )?;
                Some(Arm {
                    path: quote!(Self::#ident),
                    fields: v.fields.clone(),
                    facts,
                })
            })
            .collect(),
        Data::Struct(data) => {
            let name = &input.ident;
            facts(
                cx,
                &input.attrs,
                &data.fields,
                input.ident.span(),
                &format!("`{name}`"),
            )
            .map(|facts| Arm {
                path: quote!(Self),
                fields: data.fields.clone(),
                facts,
            })
            .into_iter()
            .collect()
        }
        Data::Union(_) => {
            cx.error_at(
                input.ident.span(),
                "`#[derive(Classify)]` supports enums and structs, not unions",
            );
            Vec::new()
        }
    }
}

/// Reads `#[classify(..)]` on a variant or struct (`what` names it in errors).
fn facts(
    cx: &Ctxt,
    attrs: &[syn::Attribute],
    fields: &Fields,
    span: Span,
    what: &str,
) -> Option<Facts> {
    let mut transparent = false;
    let mut from = false;
    let mut evidence: Option<Ident> = None;
    let mut permanent: Option<Ident> = None;
    let mut status: Option<(u16, Span)> = None;
    let mut seen = false;
    for attr in attrs.iter().filter(|a| a.path().is_ident("classify")) {
        seen = true;
        let parsed = attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("transparent") {
                transparent = true;
            } else if meta.path.is_ident("from") {
                from = true;
            } else if meta.path.is_ident("evidence") {
                let value: LitStr = meta.value()?.parse()?;
                evidence = Some(named(&value, &EVIDENCE, "evidence")?);
            } else if meta.path.is_ident("permanent") {
                let value: LitStr = meta.value()?.parse()?;
                permanent = Some(named(&value, &PERMANENT, "permanent category")?);
            } else if meta.path.is_ident("status") {
                let value: syn::LitInt = meta.value()?.parse()?;
                let code = value
                    .base10_parse::<u16>()
                    .ok()
                    .filter(|code| (100..=599).contains(code))
                    .ok_or_else(|| {
                        syn::Error::new(
                            value.span(),
                            "`status` is an HTTP status code, 100..=599 (e.g. `status = 422`)",
                        )
                    })?;
                status = Some((code, value.span()));
            } else {
                return Err(meta.error(
                    "unknown `classify` option: expected `transparent`, `from`, `status = ..`, `evidence = \"..\"` or `permanent = \"..\"`",
                ));
            }
            Ok(())
        });
        if let Err(e) = parsed {
            cx.syn_error(e);
            return None;
        }
    }
    let stated = evidence.is_some() || permanent.is_some() || status.is_some();
    if stated && (transparent || from) {
        cx.error_at(
            span,
            format!("{what} both wraps an error (`transparent`/`from`) and states facts of its own: choose one"),
        );
        return None;
    }
    if stated {
        // A status is the proof that a response arrived (whole, or its head).
        let responded = ["ResponseReceived", "PartialResponse"];
        if let (Some((_, at)), Some(e)) = (status, &evidence)
            && !responded.iter().any(|r| e == r)
        {
            cx.error_at(
                at,
                format!("{what} states a status, so a response arrived: remove `evidence` or make it `response_received` (or `partial_response`)"),
            );
            return None;
        }
        let default = if status.is_some() {
            "ResponseReceived"
        } else {
            "SentNoResponse"
        };
        let evidence = evidence.unwrap_or_else(|| Ident::new(default, Span::call_site()));
        return Some(Facts::Stated {
            evidence,
            status: status.map(|(code, _)| code),
            permanent,
        });
    }
    if fields.len() == 1 {
        return Some(Facts::Transparent { from });
    }
    let message = if transparent || from {
        format!(
            "{what} wraps an error, so it must have exactly one field (the error whose facts it reports)"
        )
    } else if seen {
        format!(
            "{what} says nothing: add `status = ..`, `evidence = \"..\"` and/or `permanent = \"..\"`"
        )
    } else {
        format!(
            "{what} does not say what it knows about the failed attempt, so the engine could not decide safely: \
             add `#[classify(status = 422, permanent = \"contract\")]` (or the facts that apply: `status`, \
             `evidence`, `permanent`), or give it one field that implements `Classify` to delegate to"
        )
    };
    cx.error_at(span, message);
    None
}

/// The variant ident named by `value` in `table`, or an error listing the valid names.
fn named(value: &LitStr, table: &[(&str, &str)], kind: &str) -> syn::Result<Ident> {
    let text = value.value();
    match table.iter().find(|(name, _)| *name == text) {
        Some((_, ident)) => Ok(Ident::new(ident, value.span())),
        None => {
            let valid: Vec<_> = table.iter().map(|(name, _)| format!("`{name}`")).collect();
            Err(syn::Error::new(
                value.span(),
                format!(
                    "unknown {kind} `{text}`: expected one of {}",
                    valid.join(", ")
                ),
            ))
        }
    }
}

fn expand(input: &DeriveInput, arms: &[Arm]) -> TokenStream {
    let krate = quote!(::retry_runtime);
    let name = &input.ident;
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    let field = format_ident!("__classify_field", span = Span::mixed_site());

    let mut via = Vec::new();
    let mut stopped = Vec::new();
    let mut evidence = Vec::new();
    let mut permanent = Vec::new();
    let mut status = Vec::new();
    let mut froms = Vec::new();
    for arm in arms {
        let path = &arm.path;
        let (bind, ignore) = match &arm.fields {
            Fields::Named(named) => {
                let first = named.named.first().and_then(|f| f.ident.clone());
                (quote!(#path { #first: #field, .. }), quote!(#path { .. }))
            }
            Fields::Unnamed(_) => (quote!(#path(#field, ..)), quote!(#path(..))),
            Fields::Unit => (quote!(#path), quote!(#path)),
        };
        match &arm.facts {
            Facts::Transparent { from } => {
                let Some(f) = arm.fields.iter().next() else {
                    continue;
                };
                // Spanned at the field's type: a type that is not `Classify` is reported there.
                let span = f.ty.span();
                via.push(quote_spanned!(span=>
                    #bind => ::core::option::Option::Some(::retry_runtime::__private::classify_ref(#field)),
                ));
                stopped.push(quote_spanned!(span=>
                    #bind => (&mut #krate::__private::StopVia(#field)).forward_stop(stop),
                ));
                if *from {
                    let ty = &f.ty;
                    let construct = match &f.ident {
                        Some(ident) => quote!(#path { #ident: value }),
                        None => quote!(#path(value)),
                    };
                    froms.push(quote! {
                        impl #impl_generics ::core::convert::From<#ty> for #name #ty_generics #where_clause {
                            fn from(value: #ty) -> Self {
                                #construct
                            }
                        }
                    });
                }
            }
            Facts::Stated {
                evidence: e,
                status: s,
                permanent: p,
            } => {
                via.push(quote!(#ignore => ::core::option::Option::None,));
                evidence.push(quote!(#ignore => #krate::Evidence::#e,));
                let s = match s {
                    Some(code) => quote!(::core::option::Option::Some(#code)),
                    None => quote!(::core::option::Option::None),
                };
                status.push(quote!(#ignore => #s,));
                let p = match p {
                    Some(p) => quote!(::core::option::Option::Some(#krate::PermanentCategory::#p)),
                    None => quote!(::core::option::Option::None),
                };
                permanent.push(quote!(#ignore => #p,));
            }
        }
    }
    // An enum without variants has nothing to match.
    let body = |arms: &[TokenStream]| match arms.is_empty() {
        true => quote!(match *self {}),
        false => quote!(match self { #(#arms)* }),
    };
    let via = body(&via);
    // The stop is kept by the wrapped error (the stated variants have nowhere to keep it).
    let stopped = match stopped.is_empty() {
        true => quote!(let _ = stop;),
        false => quote! {
            #[allow(unused_imports)]
            use #krate::__private::{ForwardStop as _, NoStop as _};
            match self {
                #(#stopped)*
                #[allow(unreachable_patterns)]
                _ => {}
            }
        },
    };
    // The stated variants answer for themselves; the wrapping ones ask `via` (as the trait's
    // defaults do).
    let evidence = quote! {
        match self {
            #(#evidence)*
            #[allow(unreachable_patterns)]
            _ => match #krate::Classify::via(self) {
                ::core::option::Option::Some(inner) => inner.evidence(),
                ::core::option::Option::None => #krate::Evidence::SentNoResponse,
            },
        }
    };
    let permanent = quote! {
        match self {
            #(#permanent)*
            #[allow(unreachable_patterns)]
            _ => #krate::Classify::via(self).and_then(|inner| inner.permanent()),
        }
    };
    let status = quote! {
        match self {
            #(#status)*
            #[allow(unreachable_patterns)]
            _ => #krate::Classify::via(self).and_then(|inner| inner.status()),
        }
    };
    quote! {
        impl #impl_generics #krate::Classify for #name #ty_generics #where_clause {
            fn via(&self) -> ::core::option::Option<&dyn #krate::Classify> {
                #via
            }
            fn evidence(&self) -> #krate::Evidence {
                #evidence
            }
            fn status(&self) -> ::core::option::Option<u16> {
                #status
            }
            fn permanent(&self) -> ::core::option::Option<#krate::PermanentCategory> {
                #permanent
            }
            fn stopped(&mut self, stop: #krate::Stop) {
                #stopped
            }
        }
        #(#froms)*
    }
}
