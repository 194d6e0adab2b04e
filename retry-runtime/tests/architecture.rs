//! The modules of `retry-runtime`, `retry-durable` and `retry-idempotency` form the layered,
//! acyclic pictures drawn in `ARCHITECTURE.md`: every file of each crate's `src` is on one
//! layer there, and imports only from layers below its own. A new import that points up (the start of a cycle)
//! or a file left out of the picture fails this test, so the pictures stay true.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A file's module path inside the crate: `call`, `http/send`, `http` (for `http/mod.rs`).
type Node = String;

/// A crate of the workspace: its `src` and the name of its block in `ARCHITECTURE.md`.
#[derive(Clone, Copy)]
struct Crate {
    dir: &'static str,
    block: &'static str,
}

const RUNTIME: Crate = Crate {
    dir: "retry-runtime",
    block: "layers",
};

const DURABLE: Crate = Crate {
    dir: "retry-durable",
    block: "layers retry-durable",
};

const IDEMPOTENCY: Crate = Crate {
    dir: "retry-idempotency",
    block: "layers retry-idempotency",
};

impl Crate {
    fn src(self) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(self.dir)
            .join("src")
    }
}

/// Every source file but `lib.rs` and unit-test files, by node.
fn files(krate: Crate) -> BTreeMap<Node, PathBuf> {
    let src = krate.src();
    let mut out = BTreeMap::new();
    let mut dirs = vec![src.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            let rel = path
                .strip_prefix(&src)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            let Some(rel) = rel.strip_suffix(".rs") else {
                continue;
            };
            if rel == "lib" || rel.ends_with("/tests") {
                continue;
            }
            let node = rel.strip_suffix("/mod").unwrap_or(rel).to_owned();
            out.insert(node, path);
        }
    }
    out
}

/// The code of a file without comments and without its `#[cfg(test)] mod tests`.
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let text = text.split("#[cfg(test)]\nmod tests").next().unwrap();
    let text = text
        .split("#[cfg(test)]\npub(crate) mod tests")
        .next()
        .unwrap();
    text.lines()
        .map(|l| l.split("//").next().unwrap())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths named after `crate::`, `super::` and `self::` (use trees expanded).
fn paths(code: &str, node: &str) -> Vec<Vec<String>> {
    let here: Vec<String> = node.split('/').map(str::to_owned).collect();
    let mut out = Vec::new();
    for (anchor, base) in [
        ("crate::", Vec::new()),
        ("super::", here[..here.len() - 1].to_vec()),
        ("self::", here.clone()),
    ] {
        let mut rest = code;
        while let Some(at) = rest.find(anchor) {
            let before = rest[..at].chars().next_back();
            rest = &rest[at + anchor.len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':' || c == '$') {
                continue;
            }
            expand(rest, base.clone(), &mut out);
        }
    }
    out
}

/// Reads one use tree (or path) at the start of `text` into `out`.
fn expand(text: &str, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    let mut path = prefix;
    let mut rest = text;
    if let Some(group) = rest.strip_prefix('{') {
        for item in split_group(group) {
            expand(item.trim(), path.clone(), out);
        }
        return;
    }
    loop {
        let len = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        if len > 0 {
            path.push(rest[..len].to_owned());
            rest = &rest[len..];
        }
        if let Some(next) = rest.strip_prefix("::") {
            rest = next;
            if let Some(group) = rest.strip_prefix('{') {
                for item in split_group(group) {
                    expand(item.trim(), path.clone(), out);
                }
                return;
            }
            continue;
        }
        out.push(path);
        return;
    }
}

/// The top-level items of a `{ .. }` group whose opening brace was consumed.
fn split_group(group: &str) -> Vec<&str> {
    let (mut depth, mut start, mut items) = (0usize, 0, Vec::new());
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                items.push(&group[start..i]);
                return items;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&group[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items
}

/// The node a path names: its longest prefix that is a file, else (for an item re-exported at
/// the crate root) the module `lib.rs` re-exports it from.
fn resolve(
    path: &[String],
    files: &BTreeMap<Node, PathBuf>,
    roots: &BTreeMap<String, String>,
) -> Option<Node> {
    for n in (1..=path.len()).rev() {
        let candidate = path[..n].join("/");
        if files.contains_key(&candidate) {
            return Some(candidate);
        }
    }
    let first = path.first()?;
    roots.get(first).cloned()
}

/// `pub use module::{A, B};` lines of `lib.rs`: root item -> module.
fn root_items(krate: Crate) -> BTreeMap<String, String> {
    let lib = code(&krate.src().join("lib.rs"));
    let mut out = BTreeMap::new();
    for line in lib.lines() {
        let Some(rest) = line.trim().strip_prefix("pub use ") else {
            continue;
        };
        let rest = rest.trim_end_matches(';');
        // `module::{A, B}` or `module::sub::A`: the module is everything before the items.
        let split = match rest.split_once("::{") {
            Some((module, items)) => Some((module, items.trim_end_matches('}'))),
            None => rest.rsplit_once("::"),
        };
        let Some((module, items)) = split else {
            continue;
        };
        if module == "crate" || module.starts_with(':') {
            continue;
        }
        let module = module.replace("::", "/");
        for item in items.split(',') {
            out.entry(item.trim().to_owned())
                .or_insert_with(|| module.clone());
        }
    }
    out
}

/// What each file imports.
fn graph(krate: Crate) -> BTreeMap<Node, BTreeSet<Node>> {
    let files = files(krate);
    let roots = root_items(krate);
    let mut graph = BTreeMap::new();
    for (node, path) in &files {
        let code = code(path);
        let mut deps = BTreeSet::new();
        for path in paths(&code, node) {
            if let Some(dep) = resolve(&path, &files, &roots)
                && &dep != node
            {
                deps.insert(dep);
            }
        }
        // A directory module re-exporting its children depends on them.
        if path.ends_with("mod.rs") {
            for line in code.lines() {
                let line = line.trim();
                let rest = line
                    .strip_prefix("pub use ")
                    .or_else(|| line.strip_prefix("pub(crate) use "));
                if let Some((child, _)) = rest.and_then(|r| r.split_once("::")) {
                    let child = format!("{node}/{child}");
                    if files.contains_key(&child) {
                        deps.insert(child);
                    }
                }
            }
        }
        graph.insert(node.clone(), deps);
    }
    graph
}

/// The layers drawn in `ARCHITECTURE.md` for `krate`, bottom (0) first: each line of its block
/// is `N  name  files...` (a `dir/*` entry stands for every file of `dir/`).
fn layers(krate: Crate, files: &BTreeMap<Node, PathBuf>) -> BTreeMap<Node, usize> {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../ARCHITECTURE.md"))
            .expect("ARCHITECTURE.md at the repository root");
    let block = doc
        .split(&format!("```{}\n", krate.block))
        .nth(1)
        .and_then(|b| b.split("```").next())
        .unwrap_or_else(|| panic!("a ```{} block in ARCHITECTURE.md", krate.block));
    let mut out = BTreeMap::new();
    for line in block.lines().filter(|l| !l.trim().is_empty()) {
        let mut words = line.split_whitespace();
        let level: usize = words.next().unwrap().parse().expect("a layer number first");
        let _name = words.next();
        for word in words {
            match word.strip_suffix("/*") {
                Some(dir) => {
                    for node in files.keys().filter(|n| n.starts_with(&format!("{dir}/"))) {
                        out.entry(node.clone()).or_insert(level);
                    }
                }
                None => {
                    assert!(
                        files.contains_key(word),
                        "ARCHITECTURE.md names `{word}`, which is not a file of {}/src",
                        krate.dir
                    );
                    out.insert(word.to_owned(), level);
                }
            }
        }
    }
    out
}

/// Fails naming every import of `krate` that does not point down its layers.
fn assert_layered(krate: Crate) {
    let files = files(krate);
    let layers = layers(krate, &files);
    let graph = graph(krate);
    // A folder's `mod.rs` declares its children and re-exports from them, so it sits above
    // every one: a child importing it points up, whatever the layers say.
    let parents: Vec<_> = graph
        .iter()
        .flat_map(|(node, deps)| {
            deps.iter()
                .filter(|dep| node.starts_with(&format!("{dep}/")))
                .filter(|dep| files[*dep].ends_with("mod.rs"))
                .map(move |dep| format!("{node} imports its parent {dep}"))
        })
        .collect();
    assert!(
        parents.is_empty(),
        "files of {} that import their folder's mod.rs (move what they need into a sibling \
         file):\n{}",
        krate.dir,
        parents.join("\n")
    );
    let missing: Vec<_> = files.keys().filter(|f| !layers.contains_key(*f)).collect();
    assert!(
        missing.is_empty(),
        "files of {} not drawn in ARCHITECTURE.md: {missing:?}",
        krate.dir
    );
    let mut upward = Vec::new();
    for (node, deps) in &graph {
        for dep in deps {
            if layers[dep] >= layers[node] {
                upward.push(format!(
                    "{node} (layer {}) imports {dep} (layer {})",
                    layers[node], layers[dep]
                ));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports of {} that do not point down:\n{}",
        krate.dir,
        upward.join("\n")
    );
}

#[test]
fn every_import_points_down_the_layers_of_architecture_md() {
    assert_layered(RUNTIME);
}

#[test]
fn the_durable_queue_is_layered_too() {
    assert_layered(DURABLE);
}

#[test]
fn the_idempotency_layer_is_layered_too() {
    assert_layered(IDEMPOTENCY);
}

/// Each file's edges collapsed to its top-level module (`registry/durable` -> `registry`).
fn folder_graph(krate: Crate) -> BTreeMap<Node, BTreeSet<Node>> {
    let top = |n: &str| n.split('/').next().unwrap_or(n).to_owned();
    let mut out: BTreeMap<Node, BTreeSet<Node>> = BTreeMap::new();
    for (node, deps) in graph(krate) {
        let from = top(&node);
        let entry = out.entry(from.clone()).or_default();
        entry.extend(deps.iter().map(|d| top(d)).filter(|d| *d != from));
    }
    out
}

#[test]
fn no_two_folders_import_each_other() {
    // Layered files cannot form a cycle, but two folders still can (a file of each importing
    // a file of the other): then neither folder can be understood without the other. Every
    // folder and top-level file of each crate is checked, so a type both sides need lives
    // below both (as `upstream` below `registry/` and `attempt`, `hand_off` below `durable/`).
    for krate in [RUNTIME, DURABLE, IDEMPOTENCY] {
        let graph = folder_graph(krate);
        let mut cycles = Vec::new();
        for (from, deps) in &graph {
            // Reachability from each dependency back to `from`.
            for dep in deps {
                let mut seen = BTreeSet::new();
                let mut todo = vec![dep.clone()];
                while let Some(n) = todo.pop() {
                    if !seen.insert(n.clone()) {
                        continue;
                    }
                    todo.extend(graph.get(&n).into_iter().flatten().cloned());
                }
                if seen.contains(from) {
                    cycles.push(format!("{from} -> {dep} -> ... -> {from}"));
                }
            }
        }
        assert!(
            cycles.is_empty(),
            "folders of {} that import each other:\n{}",
            krate.dir,
            cycles.join("\n")
        );
    }
}

#[test]
fn no_file_imports_through_the_crate_root() {
    // `lib.rs` declares and re-exports everything: an item named through it (`crate::Error`)
    // hides which module the file needs, and in a drawing of the imports it is an arrow up to
    // the root and back down. Inside the crate, items are named by the module defining them.
    for krate in [RUNTIME, DURABLE, IDEMPOTENCY] {
        let files = files(krate);
        let roots = root_items(krate);
        let mut found = Vec::new();
        for (node, path) in &files {
            for p in paths(&code(path), node) {
                // `crate::X`, or `super::X` in a top-level file, where `X` is no module.
                let through_root = p.first().is_some_and(|first| roots.contains_key(first))
                    && !files.contains_key(&p[0]);
                if through_root {
                    found.push(format!(
                        "{node}: {} (import it from crate::{})",
                        p.join("::"),
                        roots[&p[0]].replace('/', "::")
                    ));
                }
            }
        }
        assert!(
            found.is_empty(),
            "imports of {} through the crate root:\n{}",
            krate.dir,
            found.join("\n")
        );
    }
}

#[test]
fn the_reader_finds_real_imports() {
    // Guards the reader itself: a few edges that exist must be found.
    let graph = graph(RUNTIME);
    for (from, to) in [
        ("call", "attempt_future"),
        ("call", "call/state"),
        ("call/state", "registry"),
        ("call/hedge", "call/admission"),
        ("ambient", "scope"),
        ("http/send", "attempt"),
        ("retry", "call"),
    ] {
        assert!(
            graph[from].contains(to),
            "{from} -> {to} not found: {:?}",
            graph[from]
        );
    }
    let durable = self::graph(DURABLE);
    for (from, to) in [("worker", "store"), ("sqlite", "sql"), ("replay", "worker")] {
        assert!(
            durable[from].contains(to),
            "{from} -> {to} not found: {:?}",
            durable[from]
        );
    }
}
