//! Code generation: the function keeps its signature; its body runs once per attempt inside the
//! runtime's attempt loop, written out inline (not in a closure) so the body can borrow
//! `&mut self` and the arguments afresh on every attempt. Each turn of the loop is the
//! runtime's `Call::turn`, the same every other entry point runs.
//!
//! Input:
//!
//! ```text
//! #[retry(upstream = "sber", method = POST, idempotency = cmd.key())]
//! async fn register(&mut self, cmd: &Cmd, note: Note) -> Result<Registered, AdapterError> { BODY }
//! ```
//!
//! Output (`P` is `::retry_runtime::__private`; every `__retry_*` name is mixed-site, so user
//! code can neither name nor shadow it):
//!
//! ```text
//! async fn register(&mut self, cmd: &Cmd, note: Note) -> Result<Registered, AdapterError> {
//!     P::inventory::submit! { P::Registration::new("sber", concat!(module_path!(), "::register"), file!(), line!()) }
//!     let __retry_key = match P::idempotency_key(cmd.key()) { Ok(k) => k, Err(e) => return Err(From::from(e)) };
//!     static __RETRY_SITE: P::CallSite = P::CallSite::new("sber", P::Method::POST, concat!(module_path!(), "::register"));
//!     let __retry_slot = pin!(P::BackoffSlot::new());   // where the backoffs wait, pinned here
//!     let mut __retry_call = P::Call::new(match P::CallSpec::at(P::Registry::global(), &__RETRY_SITE, Some(__retry_key)) { .. }, __retry_slot);
//!     loop {
//!         let __retry_step = {
//!             let __retry_self = &mut *self;          // BODY's `self` is renamed
//!             let note = P::attempt_arg(&note);       // by-value arguments: a clone per attempt
//!             __retry_call.turn(async {               // attempt, settle, decide, back off
//!                 if let Some(__retry_ret) = None::<Result<Registered, AdapterError>> { return __retry_ret; }
//!                 BODY's statements
//!             }).await
//!         };
//!         match __retry_step {
//!             P::Step::Retry => {}
//!             P::Step::Done(result) => return result,
//!             P::Step::Ambiguous { ambiguous, .. } => return Err(__retry_call.ambiguous(ambiguous)),
//!         }
//!     }
//! }
//! ```

use proc_macro2::{Delimiter, Group, Ident, Span, TokenStream, TokenTree};
use quote::{ToTokens, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::visit_mut::VisitMut;
use syn::{AttrStyle, ExprPath, FnArg, ItemFn, Pat, ReceiverKind, ReturnType, Type};

use crate::rewrite::{EraseImplTrait, ReplaceSelf, mentions};
use crate::validate::Spec;

/// How the function takes an argument, which decides how each attempt gets it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pass {
    /// `&T`: copied (it is a shared reference).
    Shared,
    /// `&mut T`: reborrowed for each attempt.
    Mut,
    /// `T`: cloned for each attempt.
    Value,
}

fn pass_of(ty: &Type) -> Pass {
    match ty {
        Type::Reference(r) if r.mutability.is_some() => Pass::Mut,
        Type::Reference(_) => Pass::Shared,
        Type::Paren(p) => pass_of(&p.elem),
        Type::Group(g) => pass_of(&g.elem),
        _ => Pass::Value,
    }
}

struct Receiver {
    pass: Pass,
    self_token: syn::Token![self],
    mutability: Option<syn::Token![mut]>,
}

struct Arg {
    pass: Pass,
    /// The name the signature binds (the user's, or `__retry_argN` for a pattern).
    name: Ident,
    /// The pattern the user wrote, when it is not a plain name (bound again per attempt).
    pattern: Option<Pat>,
    mutability: Option<syn::Token![mut]>,
    /// Where to point errors about this argument.
    ty_span: Span,
}

pub(crate) fn expand(spec: Spec, item: ItemFn) -> TokenStream {
    let mixed = Span::mixed_site();
    let ItemFn {
        attrs,
        vis,
        mut sig,
        mut block,
        ..
    } = item;
    let outer = attrs.iter().filter(|a| matches!(a.style, AttrStyle::Outer));
    let inner = attrs
        .iter()
        .filter(|a| matches!(a.style, AttrStyle::Inner(_)));
    let krate = &spec.krate;
    let private = quote_spanned!(mixed=> #krate::__private);
    let hints = crate::hint::warnings(&crate::hint::sends(&block));

    // The arguments: how each attempt (and the reconcile check) gets them.
    let mut receiver = None;
    let mut args = Vec::new();
    for (i, input) in sig.inputs.iter_mut().enumerate() {
        match input {
            FnArg::Receiver(r) => {
                let pass = match &r.kind {
                    ReceiverKind::Reference(_, _, Some(_)) => Pass::Mut,
                    ReceiverKind::Reference(_, _, None) => Pass::Shared,
                    ReceiverKind::Typed(_, ty) => pass_of(ty),
                    _ => Pass::Value,
                };
                receiver = Some(Receiver {
                    pass,
                    self_token: r.self_token,
                    mutability: r.mutability.take(),
                });
            }
            FnArg::Typed(pt) => {
                let pass = pass_of(&pt.ty);
                let ty_span = pt.ty.span();
                let arg = match &mut *pt.pat {
                    Pat::Ident(pi) if pi.by_ref.is_none() && pi.subpat.is_none() => Arg {
                        pass,
                        name: pi.ident.clone(),
                        pattern: None,
                        mutability: pi.mutability.take(),
                        ty_span,
                    },
                    pat => {
                        let name = Ident::new(&format!("__retry_arg{i}"), mixed);
                        let pattern = std::mem::replace(pat, syn::parse_quote!(#name));
                        Arg {
                            pass,
                            name,
                            pattern: Some(pattern),
                            mutability: None,
                            ty_span,
                        }
                    }
                };
                args.push(arg);
            }
        }
    }

    // What each attempt binds before running the body.
    let body_tokens = block.to_token_stream();
    let mut per_attempt = Vec::new();
    if let Some(r) = &receiver
        && r.pass != Pass::Shared
        && mentions(&body_tokens, "self")
    {
        ReplaceSelf.visit_block_mut(&mut block);
        let self_value = fresh(
            &private,
            r.pass,
            r.self_token.to_token_stream(),
            r.self_token.span,
        );
        let self_ident = Ident::new("__retry_self", mixed);
        let mutability = &r.mutability;
        per_attempt.push(quote_spanned!(mixed=> let #mutability #self_ident = #self_value;));
    }
    for arg in &args {
        let value = fresh(&private, arg.pass, arg.name.to_token_stream(), arg.ty_span);
        match &arg.pattern {
            Some(Pat::Wild(_)) => {}
            Some(pattern) => per_attempt.push(quote_spanned!(mixed=> let #pattern = #value;)),
            None => {
                let rebind = arg.pass != Pass::Shared || arg.mutability.is_some();
                if rebind && mentions(&body_tokens, &arg.name.to_string()) {
                    let name = &arg.name;
                    let mutability = &arg.mutability;
                    per_attempt.push(quote_spanned!(mixed=> let #mutability #name = #value;));
                }
            }
        }
    }

    // The key, evaluated once.
    let (key_stmt, key_value) = match &spec.idempotency {
        Some(expr) => {
            let at = mixed.located_at(expr.span());
            let mut call = quote_spanned!(at=> #private::idempotency_key(#expr));
            if let Some(op) = &spec.durable {
                call = quote_spanned!(at=> #private::durable::replay_key(#op, #call));
            }
            (
                quote_spanned! {mixed=>
                    let __retry_key = match #call {
                        ::core::result::Result::Ok(key) => key,
                        ::core::result::Result::Err(error) => {
                            return ::core::result::Result::Err(::core::convert::From::from(error));
                        }
                    };
                },
                quote_spanned!(mixed=> ::core::option::Option::Some(__retry_key)),
            )
        }
        None => (
            TokenStream::new(),
            quote_spanned!(mixed=> ::core::option::Option::None),
        ),
    };

    let ambiguous_arm = match &spec.reconcile {
        None => quote_spanned! {mixed=>
            #private::Step::Ambiguous { ambiguous, .. } => {
                return ::core::result::Result::Err(__retry_call.ambiguous(ambiguous));
            }
        },
        Some(path) => {
            let mut call_args = Vec::new();
            if let Some(r) = &receiver {
                call_args.push(fresh(
                    &private,
                    r.pass,
                    r.self_token.to_token_stream(),
                    r.self_token.span,
                ));
            }
            for arg in &args {
                call_args.push(fresh(
                    &private,
                    arg.pass,
                    arg.name.to_token_stream(),
                    arg.ty_span,
                ));
            }
            let check = reconcile_call(path, &call_args);
            quote_spanned! {mixed=>
                #private::Step::Ambiguous { error, ambiguous } => match #check.await {
                    #private::Reconciled::Happened(value) => {
                        return ::core::result::Result::Ok(__retry_call.happened(value));
                    }
                    #private::Reconciled::NotHappened => match __retry_call.settle_not_happened(error).await {
                        #private::Step::Retry => {}
                        #private::Step::Done(result) => return result,
                        #private::Step::Ambiguous { ambiguous, .. } => {
                            return ::core::result::Result::Err(__retry_call.ambiguous(ambiguous));
                        }
                    },
                    #private::Reconciled::Unknown => {
                        return ::core::result::Result::Err(__retry_call.ambiguous(ambiguous));
                    }
                },
            }
        }
    };

    let ret = match &sig.output {
        ReturnType::Type(_, ty) => {
            let mut ty = (**ty).clone();
            EraseImplTrait.visit_type_mut(&mut ty);
            ty.into_token_stream()
        }
        ReturnType::Default => quote!(()),
    };
    // The never-taken return that pins the body's type to the signature's, spanned there so a
    // mismatch says "return type inferred to be ... here" at the user's return type.
    let at_ret = mixed.located_at(match &sig.output {
        ReturnType::Type(_, ty) => ty.span(),
        ReturnType::Default => sig.ident.span(),
    });
    // A durable function returns `Result<Durable<T>, E>`; its body, `Result<T, E>`.
    let body_ret = match &spec.durable {
        Some(_) => quote_spanned!(at_ret=> <#ret as #private::durable::DurableReturn>::Body),
        None => ret,
    };
    let pin_type = quote_spanned! {at_ret=>
        if let ::core::option::Option::Some(__retry_ret) = ::core::option::Option::None::<#body_ret> {
            #[allow(unreachable_code)]
            return __retry_ret;
        }
    };
    let upstream = &spec.upstream;
    let registry = match &spec.registry {
        Some(expr) => expr.to_token_stream(),
        None => quote_spanned!(mixed=> #private::Registry::global()),
    };
    let method = Ident::new(spec.method.as_str(), mixed);
    let function = format!("::{}", sig.ident);
    let partition = spec.partition.as_ref().map(|expr| {
        quote_spanned!(expr.span()=> .with_partition(::core::option::Option::Some(
            #private::Partition::of(&(#expr))
        )))
    });

    let injected = spec.registry.as_ref().map(|expr| {
        let text = compact(expr.to_token_stream());
        quote_spanned!(mixed=> .with_registry(#text))
    });
    let durable_registration = spec
        .durable
        .as_ref()
        .map(|op| quote_spanned!(mixed=> .with_durable(#op)));
    let registration = quote_spanned! {mixed=>
        #private::inventory::submit! {
            #private::Registration::new(
                #upstream,
                ::core::concat!(::core::module_path!(), #function),
                ::core::file!(),
                ::core::line!(),
            )#injected #durable_registration
        }
    };

    let durable_site = spec
        .durable
        .as_ref()
        .map(|_| quote_spanned!(mixed=> .durable()));
    // A durable queue's replay is work held through an outage: let go at the upstream's pace.
    let held = spec
        .durable
        .as_ref()
        .map(|_| quote_spanned!(mixed=> .held(#private::durable::in_replay())));
    // A durable call ends through `durable::defer`: a transient failure is queued.
    let (require_durable, ending, replay_fn) = match &spec.durable {
        None => (
            TokenStream::new(),
            quote_spanned! {mixed=>
                #private::Step::Done(result) => return result,
                #ambiguous_arm
            },
            TokenStream::new(),
        ),
        Some(op) => {
            let payload = crate::durable::payload(&private, &sig);
            (
                quote_spanned!(mixed=> #private::require_durable!();),
                quote_spanned! {mixed=>
                    #private::Step::Done(::core::result::Result::Ok(value)) => {
                        return ::core::result::Result::Ok(#private::durable::Durable::Done(value));
                    }
                    #private::Step::Done(::core::result::Result::Err(error)) => {
                        return #private::durable::defer(
                            &mut __retry_call, #op, error, ::core::option::Option::None, #payload,
                        ).await;
                    }
                    #private::Step::Ambiguous { error, ambiguous } => {
                        return #private::durable::defer(
                            &mut __retry_call, #op, error, ::core::option::Option::Some(ambiguous), #payload,
                        ).await;
                    }
                },
                crate::durable::replay_fn(&private, op, &vis, &sig),
            )
        }
    };

    let stmts = &block.stmts;
    // One turn of the loop: the attempt's body inline, or, for `hedge`, made by a closure so a
    // further copy can start while one is in flight (each copy binds its own arguments, moved
    // into its body).
    let turn = match spec.hedge {
        false => quote_spanned! {mixed=>
            {
                #(#per_attempt)*
                __retry_call.turn(async {
                    #pin_type
                    #(#stmts)*
                }).await
            }
        },
        true => quote_spanned! {mixed=>
            __retry_call.turn_hedged(|| {
                #(#per_attempt)*
                async move {
                    #pin_type
                    #(#stmts)*
                }
            }).await
        },
    };
    quote_spanned! {mixed=>
        #(#outer)*
        #vis #sig {
            #(#inner)*
            #hints
            #require_durable
            #registration
            #key_stmt
            static __RETRY_SITE: #private::CallSite = #private::CallSite::new(
                #upstream,
                #private::Method::#method,
                ::core::concat!(::core::module_path!(), #function),
            )#durable_site;
            let __retry_slot = ::core::pin::pin!(#private::BackoffSlot::new());
            let mut __retry_call = #private::Call::new(
                match #private::CallSpec::at(#registry, &__RETRY_SITE, #key_value) {
                    ::core::result::Result::Ok(spec) => spec #partition #held,
                    ::core::result::Result::Err(error) => {
                        return ::core::result::Result::Err(::core::convert::From::from(error));
                    }
                },
                __retry_slot,
            );
            loop {
                let __retry_step = #turn;
                match __retry_step {
                    #private::Step::Retry => {}
                    #ending
                }
            }
        }
        #replay_fn
    }
}

/// `tokens` as a person writes them, for messages: a space between two words (identifiers,
/// keywords, literals) and after a comma, none elsewhere: `&self.registry`, not the
/// token-spaced `& self . registry` that `to_string` gives.
pub(crate) fn compact(tokens: TokenStream) -> String {
    fn write(tokens: TokenStream, out: &mut String, word_before: &mut bool) {
        for token in tokens {
            match token {
                TokenTree::Ident(_) | TokenTree::Literal(_) => {
                    if *word_before {
                        out.push(' ');
                    }
                    out.push_str(&token.to_string());
                    *word_before = true;
                }
                TokenTree::Punct(punct) => {
                    out.push(punct.as_char());
                    if punct.as_char() == ',' {
                        out.push(' ');
                    }
                    *word_before = false;
                }
                TokenTree::Group(group) => {
                    let (open, close) = match group.delimiter() {
                        Delimiter::Parenthesis => ("(", ")"),
                        Delimiter::Brace => ("{ ", " }"),
                        Delimiter::Bracket => ("[", "]"),
                        Delimiter::None => ("", ""),
                    };
                    out.push_str(open);
                    *word_before = false;
                    write(group.stream(), out, word_before);
                    out.push_str(close);
                    *word_before = group.delimiter() == Delimiter::None && *word_before;
                }
            }
        }
    }
    let mut out = String::new();
    write(tokens, &mut out, &mut false);
    out
}

/// The value an attempt (or the reconcile check) gets for an argument bound as `name`.
fn fresh(private: &TokenStream, pass: Pass, name: TokenStream, err_span: Span) -> TokenStream {
    let mixed = Span::mixed_site();
    match pass {
        Pass::Shared => name,
        Pass::Mut => quote_spanned!(mixed=> &mut *#name),
        Pass::Value => {
            let at = mixed.located_at(err_span);
            quote_spanned!(at=> #private::attempt_arg(&#name))
        }
    }
}

/// `path(args..)`, with the call's parentheses at the path so type errors point at it.
fn reconcile_call(path: &ExprPath, args: &[TokenStream]) -> TokenStream {
    let mut group = Group::new(Delimiter::Parenthesis, quote!(#(#args),*));
    group.set_span(Span::mixed_site().located_at(path.span()));
    let mut out = path.to_token_stream();
    out.extend([TokenTree::Group(group)]);
    out
}

#[cfg(test)]
mod tests {
    use super::compact;
    use quote::quote;

    #[test]
    fn an_expression_reads_as_written() {
        assert_eq!(compact(quote!(&self.registry)), "&self.registry");
        assert_eq!(compact(quote!(Registry::global())), "Registry::global()");
        assert_eq!(compact(quote!(&*REGISTRY)), "&*REGISTRY");
        assert_eq!(compact(quote!(&mut regs[0])), "&mut regs[0]");
        assert_eq!(compact(quote!(pick(a, b))), "pick(a, b)");
    }
}
