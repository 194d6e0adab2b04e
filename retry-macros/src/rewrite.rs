//! Rewrites of the function's body for the attempt closure: its `self` renamed to the
//! per-attempt binding, and `impl Trait` erased where a `let` must name a type.

use proc_macro2::{Group, Ident, Span, TokenStream, TokenTree};
use syn::visit_mut::{self, VisitMut};
use syn::{ExprPath, Item, Macro, Type};

/// Whether `name` appears as an identifier anywhere in `tokens` (macro arguments included).
pub(crate) fn mentions(tokens: &TokenStream, name: &str) -> bool {
    tokens.clone().into_iter().any(|tt| match tt {
        TokenTree::Ident(ident) => ident == name,
        TokenTree::Group(g) => mentions(&g.stream(), name),
        _ => false,
    })
}

/// Renames the body's `self` to the per-attempt `__retry_self` (a reborrow or a clone), since
/// `self` itself cannot be shadowed. Stops at nested items; rewrites macro arguments too, except
/// module paths (`self::x`).
pub(crate) struct ReplaceSelf;

fn self_ident(at: Span) -> Ident {
    Ident::new("__retry_self", Span::mixed_site().located_at(at))
}

impl VisitMut for ReplaceSelf {
    fn visit_item_mut(&mut self, _: &mut Item) {
        // A nested item has its own `self`, or none.
    }

    fn visit_expr_path_mut(&mut self, expr: &mut ExprPath) {
        if expr.qself.is_none()
            && expr.path.leading_colon.is_none()
            && expr.path.segments.len() == 1
        {
            let segment = &mut expr.path.segments[0];
            if segment.ident == "self" {
                segment.ident = self_ident(segment.ident.span());
            }
        }
        visit_mut::visit_expr_path_mut(self, expr);
    }

    fn visit_macro_mut(&mut self, mac: &mut Macro) {
        mac.tokens = replace_self_tokens(mac.tokens.clone());
    }
}

fn replace_self_tokens(tokens: TokenStream) -> TokenStream {
    let tokens: Vec<TokenTree> = tokens.into_iter().collect();
    let mut out = Vec::with_capacity(tokens.len());
    for (i, tt) in tokens.iter().enumerate() {
        match tt {
            TokenTree::Ident(ident) if ident == "self" => {
                let module_path =
                    matches!(tokens.get(i + 1), Some(TokenTree::Punct(p)) if p.as_char() == ':');
                if module_path {
                    out.push(tt.clone());
                } else {
                    out.push(TokenTree::Ident(self_ident(ident.span())));
                }
            }
            TokenTree::Group(g) => {
                let mut group = Group::new(g.delimiter(), replace_self_tokens(g.stream()));
                group.set_span(g.span());
                out.push(TokenTree::Group(group));
            }
            _ => out.push(tt.clone()),
        }
    }
    out.into_iter().collect()
}

/// `impl Trait` cannot be named in a `let`; `_` lets inference fill it in.
pub(crate) struct EraseImplTrait;

impl VisitMut for EraseImplTrait {
    fn visit_type_mut(&mut self, ty: &mut Type) {
        if let Type::ImplTrait(it) = ty {
            let underscore = syn::Token![_](it.impl_token.span);
            *ty = syn::parse_quote!(#underscore);
            return;
        }
        visit_mut::visit_type_mut(self, ty);
    }
}
