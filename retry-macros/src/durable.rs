//! `durable = "operation"`: the rules a durable function must meet, and the pieces of its
//! expansion (the arguments written to the queue, and the replay function the worker runs).

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote_spanned};
use syn::spanned::Spanned;
use syn::{FnArg, ItemFn, LitStr, Pat, ReceiverKind, Signature, Type, Visibility};

use crate::args::{Args, HttpMethod};
use crate::ctxt::Ctxt;

/// What a durable function must be: a read or a keyed write, a method on `&self`, no generics,
/// no `&mut` or `impl Trait` argument.
pub(crate) fn check(cx: &Ctxt, args: &Args, item: &ItemFn, method: Option<HttpMethod>) {
    let Some(durable) = &args.durable else {
        return;
    };
    if let Some(m) = method
        && !m.is_read()
        && !args.saw(crate::args::IDEMPOTENCY)
    {
        cx.error_spanned_by(
            durable,
            format!(
                "a durable `{m}` needs `idempotency = <key expression>`: a worker replays it \
                 later, again after a crash mid-replay, and only a key the upstream deduplicates \
                 makes each replay the same write (a reconcile check runs only inside one call)"
            ),
        );
    }
    if let Some(reconcile) = &args.reconcile {
        cx.error_spanned_by(
            reconcile,
            "`reconcile` and `durable` do not go together: a durable call is replayed with its \
             idempotency key; remove `reconcile`",
        );
    }
    let sig = &item.sig;
    let receiver = sig.inputs.iter().find_map(|input| match input {
        FnArg::Receiver(r) => Some(r),
        FnArg::Typed(_) => None,
    });
    match receiver {
        Some(r) if matches!(r.kind, ReceiverKind::Reference(_, _, None)) => {}
        Some(r) => cx.error_spanned_by(
            r,
            "a durable function takes `&self`: the worker replays it on the adapter the \
             application hands it, shared between replays",
        ),
        None => cx.error_at(
            sig.ident.span(),
            "a durable function is a method taking `&self` in an `impl` block: the worker \
             replays it on the adapter the application hands it (`Self::..._replay(adapter)`)",
        ),
    }
    if !sig.generics.params.is_empty() {
        cx.error_spanned_by(
            &sig.generics,
            "a durable function cannot be generic: its replay reads the stored arguments back as \
             concrete types",
        );
    }
    for input in &sig.inputs {
        let FnArg::Typed(pt) = input else { continue };
        match peel(&pt.ty) {
            Type::Reference(r) if r.mutability.is_some() => cx.error_spanned_by(
                &pt.ty,
                "a durable function cannot take `&mut`: a replay runs later, where the changes \
                 would be lost; take it by value or by `&`",
            ),
            Type::ImplTrait(_) => cx.error_spanned_by(
                &pt.ty,
                "a durable function cannot take `impl Trait`: its replay reads the stored \
                 arguments back as concrete types",
            ),
            _ => {}
        }
    }
}

fn peel(ty: &Type) -> &Type {
    match ty {
        Type::Paren(p) => peel(&p.elem),
        Type::Group(g) => peel(&g.elem),
        other => other,
    }
}

/// An argument as stored: its name (after `expand` bound patterns to names) and type.
struct Stored<'a> {
    name: &'a syn::Ident,
    /// The type the replay reads back the owned form of (`Cmd` for `&Cmd`).
    target: &'a Type,
    shared: bool,
    span: Span,
}

fn stored_args(sig: &Signature) -> Vec<Stored<'_>> {
    sig.inputs
        .iter()
        .filter_map(|input| match input {
            FnArg::Typed(pt) => match &*pt.pat {
                Pat::Ident(pi) => Some((pi, &*pt.ty)),
                _ => None,
            },
            FnArg::Receiver(_) => None,
        })
        .map(|(pi, ty)| {
            let (target, shared) = match peel(ty) {
                Type::Reference(r) => (&*r.elem, true),
                other => (other, false),
            };
            Stored {
                name: &pi.ident,
                target,
                shared,
                span: ty.span(),
            }
        })
        .collect()
}

/// The closure that serializes the call's arguments (`&self` is not stored), each written,
/// and so checked, where the user wrote its type.
pub(crate) fn payload(private: &TokenStream, sig: &Signature) -> TokenStream {
    let mixed = Span::mixed_site();
    let each = stored_args(sig).into_iter().map(|a| {
        let at = mixed.located_at(a.span);
        let name = a.name;
        let arg = if a.shared {
            quote_spanned!(at=> #name)
        } else {
            quote_spanned!(at=> &#name)
        };
        quote_spanned!(at=> #private::durable::write_arg(&mut __retry_args, #arg);)
    });
    quote_spanned! {mixed=>
        || {
            let mut __retry_args = #private::durable::ArgsWriter::new();
            #(#each)*
            __retry_args.finish()
        }
    }
}

/// `fn <name>_replay(adapter: Arc<Self>) -> Replay`: the worker's handler for the operation.
pub(crate) fn replay_fn(
    private: &TokenStream,
    operation: &LitStr,
    vis: &Visibility,
    sig: &Signature,
) -> TokenStream {
    let mixed = Span::mixed_site();
    let function = &sig.ident;
    let name = format_ident!("{}_replay", function, span = function.span());
    let args = stored_args(sig);
    let locals: Vec<_> = (0..args.len())
        .map(|i| format_ident!("__retry_stored{}", i, span = mixed))
        .collect();
    let reads = args.iter().zip(&locals).map(|(a, local)| {
        let target = a.target;
        let at = mixed.located_at(a.span);
        quote_spanned! {at=>
            let #local = match #private::durable::read_arg::<#target>(&mut __retry_args) {
                ::core::result::Result::Ok(arg) => arg,
                ::core::result::Result::Err(error) => return ::core::result::Result::Err(error),
            };
        }
    });
    let passed = args.iter().zip(&locals).map(|(a, local)| {
        let target = a.target;
        if a.shared {
            quote_spanned!(mixed=> <_ as ::core::borrow::Borrow<#target>>::borrow(&#local))
        } else {
            quote_spanned!(mixed=> #local)
        }
    });
    let doc = format!(
        " The durable worker's handler for `{function}` (`durable = {:?}`): replays a deferred \
         call on `adapter` with its stored arguments. Register it with `WorkerBuilder::replay`.",
        operation.value()
    );
    quote_spanned! {mixed=>
        #[doc = #doc]
        #vis fn #name(adapter: ::std::sync::Arc<Self>) -> #private::durable::Replay {
            #private::durable::Replay::new(#operation, move |__retry_task: #private::durable::TaskContext| {
                let __retry_adapter = ::std::sync::Arc::clone(&adapter);
                async move {
                    let mut __retry_args = match #private::durable::read_args(&__retry_task) {
                        ::core::result::Result::Ok(args) => args,
                        ::core::result::Result::Err(error) => return ::core::result::Result::Err(error),
                    };
                    #(#reads)*
                    if let ::core::result::Result::Err(error) = __retry_args.end() {
                        return ::core::result::Result::Err(error);
                    }
                    #private::durable::replaying(
                        &__retry_task,
                        __retry_adapter.#function(#(#passed),*),
                    ).await
                }
            })
        }
    }
}

/// The function as written for the error path, its body's `Result<T, E>` wrapped in
/// `Durable::Done`, so only the reported mistakes are reported.
pub(crate) fn fallback(mut function: ItemFn, krate: Option<syn::Path>) -> ItemFn {
    let mixed = Span::mixed_site();
    let krate = krate.unwrap_or_else(|| syn::parse_quote!(::retry_runtime));
    let stmts = &function.block.stmts;
    let pin = match &function.sig.output {
        syn::ReturnType::Type(_, ty) => {
            let at = mixed.located_at(ty.span());
            quote_spanned! {at=>
                if let ::core::option::Option::Some(__retry_ret) = ::core::option::Option::None::<
                    <#ty as #krate::__private::durable::DurableReturn>::Body,
                > {
                    #[allow(unreachable_code)]
                    return __retry_ret;
                }
            }
        }
        syn::ReturnType::Default => TokenStream::new(),
    };
    let body: syn::Block = syn::parse_quote_spanned! {mixed=>
        {
            ::core::result::Result::map(
                async { #pin #(#stmts)* }.await,
                #krate::__private::durable::Durable::Done,
            )
        }
    };
    *function.block = body;
    function
}
