//! Inferring the HTTP method from the body, only when it is unmistakable.
//!
//! Evidence, and nothing else:
//! - a request builder chain that is sent in the same expression: `client.post(url)...send()`,
//!   or through this library's send path, `client.post(url)...send_attempt()` (reqwest's `get`,
//!   `head`, `put`, `delete`, `post`, `patch` builder methods, or `.request(Method::POST, url)`);
//! - a path to a method constant: `Method::POST`, `http::Method::GET`, `reqwest::Method::PUT`;
//! - `reqwest::get(url)`.
//!
//! A `.get(k)` that is not sent (a map lookup) is not evidence. A `.send()` whose method cannot
//! be seen (`request.send()`, `.request(method, url)`) makes the method unknowable, and so does
//! more than one method: in both cases the user must write `method = ...`. The visitor does not
//! enter nested items; it enters closures and async blocks (they run as part of the body), and
//! macro arguments that parse as expressions.

use proc_macro2::{Span, TokenStream, TokenTree};
use syn::punctuated::Punctuated;
use syn::visit::{self, Visit};
use syn::{Block, Expr, ExprCall, ExprMethodCall, ExprPath, Item, Macro, Token};

use crate::args::HttpMethod;

/// What the body shows.
pub(crate) enum Inferred {
    /// One method, first seen at `Span`.
    One(HttpMethod, Span),
    /// No evidence at all.
    Nothing,
    /// Several methods: each with where it was first seen.
    Conflict(Vec<(HttpMethod, Span)>),
    /// A request is sent whose method cannot be seen.
    Hidden(Span),
}

pub(crate) fn infer(block: &Block) -> Inferred {
    let mut finder = Finder::default();
    finder.visit_block(block);
    if let Some(span) = finder.hidden {
        return Inferred::Hidden(span);
    }
    let mut distinct: Vec<(HttpMethod, Span)> = Vec::new();
    for (m, span) in finder.found {
        if !distinct.iter().any(|(d, _)| *d == m) {
            distinct.push((m, span));
        }
    }
    match distinct.len() {
        0 => Inferred::Nothing,
        1 => Inferred::One(distinct[0].0, distinct[0].1),
        _ => Inferred::Conflict(distinct),
    }
}

#[derive(Default)]
struct Finder {
    found: Vec<(HttpMethod, Span)>,
    hidden: Option<Span>,
}

impl Finder {
    fn hide(&mut self, span: Span) {
        self.hidden.get_or_insert(span);
    }

    /// `.send()` ends a builder chain: find the method the chain started with.
    fn sent_chain(&mut self, send: &ExprMethodCall) {
        let mut link = &*send.receiver;
        loop {
            match link {
                Expr::MethodCall(call) => {
                    let name = call.method.to_string();
                    if let Some(m) = HttpMethod::from_builder(&name) {
                        self.found.push((m, call.method.span()));
                        return;
                    }
                    if name == "request" {
                        match call.args.first().and_then(method_constant) {
                            Some((m, span)) => self.found.push((m, span)),
                            None => self.hide(call.method.span()),
                        }
                        return;
                    }
                    link = &call.receiver;
                }
                Expr::Paren(p) => link = &p.expr,
                Expr::Group(g) => link = &g.expr,
                _ => {
                    self.hide(send.method.span());
                    return;
                }
            }
        }
    }

    fn macro_tokens(&mut self, tokens: TokenStream) {
        let tokens: Vec<TokenTree> = tokens.into_iter().collect();
        for (i, tt) in tokens.iter().enumerate() {
            match tt {
                TokenTree::Group(g) => self.macro_tokens(g.stream()),
                TokenTree::Ident(ident) if ident == "Method" => {
                    if let (
                        Some(TokenTree::Punct(a)),
                        Some(TokenTree::Punct(b)),
                        Some(TokenTree::Ident(m)),
                    ) = (tokens.get(i + 1), tokens.get(i + 2), tokens.get(i + 3))
                        && a.as_char() == ':'
                        && b.as_char() == ':'
                        && let Some(method) = HttpMethod::from_constant(&m.to_string())
                    {
                        self.found.push((method, m.span()));
                    }
                }
                TokenTree::Ident(ident) if is_send(&ident.to_string()) => {
                    if let Some(TokenTree::Punct(dot)) = i.checked_sub(1).map(|j| &tokens[j])
                        && dot.as_char() == '.'
                    {
                        self.hide(ident.span());
                    }
                }
                _ => {}
            }
        }
    }
}

/// The calls that send a request builder: reqwest's `send`, and this library's `send_attempt`
/// (`retry_runtime::http::RequestBuilderExt`).
fn is_send(method: &str) -> bool {
    matches!(method, "send" | "send_attempt")
}

/// `Method::POST`, `http::Method::POST`, `reqwest::Method::POST`.
fn method_constant(expr: &Expr) -> Option<(HttpMethod, Span)> {
    let Expr::Path(ExprPath {
        qself: None, path, ..
    }) = expr
    else {
        return None;
    };
    let n = path.segments.len();
    if n < 2 || path.segments[n - 2].ident != "Method" {
        return None;
    }
    let last = &path.segments[n - 1].ident;
    HttpMethod::from_constant(&last.to_string()).map(|m| (m, last.span()))
}

impl<'ast> Visit<'ast> for Finder {
    fn visit_item(&mut self, _: &'ast Item) {
        // A nested item is not part of this function's body.
    }

    fn visit_expr_method_call(&mut self, call: &'ast ExprMethodCall) {
        if is_send(&call.method.to_string()) && call.args.is_empty() {
            self.sent_chain(call);
        }
        visit::visit_expr_method_call(self, call);
    }

    fn visit_expr_path(&mut self, path: &'ast ExprPath) {
        if let Some(found) = method_constant(&Expr::Path(path.clone())) {
            self.found.push(found);
        }
        visit::visit_expr_path(self, path);
    }

    fn visit_expr_call(&mut self, call: &'ast ExprCall) {
        if let Expr::Path(ExprPath {
            qself: None, path, ..
        }) = &*call.func
            && path.segments.len() == 2
            && path.segments[0].ident == "reqwest"
            && path.segments[1].ident == "get"
        {
            self.found
                .push((HttpMethod::Get, path.segments[1].ident.span()));
        }
        visit::visit_expr_call(self, call);
    }

    fn visit_macro(&mut self, mac: &'ast Macro) {
        match mac.parse_body_with(Punctuated::<Expr, Token![,]>::parse_terminated) {
            Ok(exprs) => exprs.iter().for_each(|e| self.visit_expr(e)),
            Err(_) => self.macro_tokens(mac.tokens.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(body: &str) -> Result<HttpMethod, &'static str> {
        let block: Block = syn::parse_str(body).unwrap();
        match infer(&block) {
            Inferred::One(m, _) => Ok(m),
            Inferred::Nothing => Err("nothing"),
            Inferred::Conflict(_) => Err("conflict"),
            Inferred::Hidden(_) => Err("hidden"),
        }
    }

    #[test]
    fn sent_builder_chains_are_evidence() {
        assert_eq!(
            run("{ self.http.post(url).json(&b).send().await? }"),
            Ok(HttpMethod::Post)
        );
        assert_eq!(
            run("{ let r = client.get(u).send().await; r }"),
            Ok(HttpMethod::Get)
        );
        assert_eq!(
            run("{ c.request(Method::PUT, u).send().await }"),
            Ok(HttpMethod::Put)
        );
        assert_eq!(run("{ reqwest::get(u).await }"), Ok(HttpMethod::Get));
        assert_eq!(
            run(
                "{ let r = self.client.get(url).send_attempt().await?; Ok(r.read_bytes().await?) }"
            ),
            Ok(HttpMethod::Get)
        );
        assert_eq!(
            run("{ self.client.post(url).json(&cmd).send_attempt().await }"),
            Ok(HttpMethod::Post)
        );
        assert_eq!(
            run("{ let m = http::Method::PATCH; go(m) }"),
            Ok(HttpMethod::Patch)
        );
    }

    #[test]
    fn lookups_are_not_evidence() {
        assert_eq!(run("{ let v = map.get(&k); Ok(v) }"), Err("nothing"));
        assert_eq!(
            run("{ fn inner() { c.post(u).send(); } Ok(1) }"),
            Err("nothing")
        );
    }

    #[test]
    fn mixed_or_hidden_methods_are_unknowable() {
        assert_eq!(
            run("{ c.get(u).send(); c.post(u).send() }"),
            Err("conflict")
        );
        assert_eq!(
            run("{ let req = c.post(u); req.send().await }"),
            Err("hidden")
        );
        assert_eq!(run("{ c.request(m, u).send().await }"), Err("hidden"));
        assert_eq!(run("{ req.send_attempt().await }"), Err("hidden"));
        assert_eq!(run("{ c.get(u).send(); Method::DELETE }"), Err("conflict"));
        assert_eq!(
            run("{ tracing::info!(x = 1, \"{}\", Method::POST); c.get(u).send() }"),
            Err("conflict")
        );
    }
}
