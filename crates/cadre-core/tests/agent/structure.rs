//! The shape of the code, kept true by reading it: no circle between the files of
//! cadre-core, cadre-engine, cadre-workflow or cadre-cli; the log (`record`) and the vocabulary beneath it
//! (`vocab`) never import the loop (`run`), and the vocabulary imports neither `record` nor
//! `definitions`; no file of the library crates or the CLI over 700 lines and no function
//! over 80 (tests and generated markup aside), past a named allowance that can only shrink;
//! each file of cadre-core says at its top what it depends on (no `use super::*` outside tests)
//! and no per-run state of the loop waits in a `Mutex<Option<…>>` to be filled in later;
//! no error enum of the library crates carries a bare `String` as a variant's one field
//! (past named messages for the model), and `RunError::kind` names every variant.
//!
//! A file's imports are the paths it names through `crate::`, `super::`, `self::` or a
//! module it declares, in `use` items, in code and in macro calls, with its `#[cfg(test)]`
//! items left out; a path leads to the longest prefix of it that is a file's module, and a
//! name the crate root re-exports leads to where it comes from.

use proc_macro2::{TokenStream, TokenTree};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use syn::spanned::Spanned;
use syn::visit::Visit;

/// The most lines a file of a library crate may have, its tests aside.
const FILE_LINES: usize = 700;

/// The most lines a function of a library crate may have.
const FUNCTION_LINES: usize = 80;

/// The files over [`FILE_LINES`] when the rule was made, with their length then. Split one
/// and strike it; the test fails on a file not listed, and on one listed that is no longer over.
const LONG_FILES: &[(&str, usize)] = &[];

/// The functions over [`FUNCTION_LINES`] when the rule was made (`file::Type::function`),
/// with their length then (from the signature to the closing brace); the same rules as
/// [`LONG_FILES`].
const LONG_FUNCTIONS: &[(&str, usize)] = &[];

/// The crates whose files may form no circle.
const NO_CIRCLES: [&str; 4] = ["cadre-core", "cadre-engine", "cadre-workflow", "cadre-cli"];

/// The crates held to the length limits: the libraries, and the CLI around them.
const SIZED: [&str; 7] = [
    "cadre-model",
    "cadre-tools",
    "cadre-core",
    "cadre-mcp",
    "cadre-engine",
    "cadre-workflow",
    "cadre-cli",
];

/// One source file of a crate.
struct Source {
    /// Its module path (`run::team`; the crate root is `""`).
    module: String,
    /// Its path from `crates/` (`cadre-core/src/run/team/mod.rs`).
    file: String,
    /// Its text.
    text: String,
    /// Its syntax, `#[cfg(test)]` items left out.
    syntax: syn::File,
    /// The lines of the `#[cfg(test)]` items left out (1-based).
    test_lines: BTreeSet<usize>,
}

fn crates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the crate lies in crates/")
        .to_owned()
}

/// Whether `attrs` make an item test-only.
fn test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| match &attr.meta {
        syn::Meta::List(list) if list.path.is_ident("cfg") => {
            let cfg = list.tokens.to_string();
            cfg.split(|c: char| !c.is_alphanumeric() && c != '_')
                .any(|word| word == "test")
                && !cfg.contains("not")
        }
        _ => false,
    })
}

fn item_attrs(item: &syn::Item) -> &[syn::Attribute] {
    match item {
        syn::Item::Const(i) => &i.attrs,
        syn::Item::Enum(i) => &i.attrs,
        syn::Item::Fn(i) => &i.attrs,
        syn::Item::Impl(i) => &i.attrs,
        syn::Item::Macro(i) => &i.attrs,
        syn::Item::Mod(i) => &i.attrs,
        syn::Item::Static(i) => &i.attrs,
        syn::Item::Struct(i) => &i.attrs,
        syn::Item::Trait(i) => &i.attrs,
        syn::Item::Type(i) => &i.attrs,
        syn::Item::Use(i) => &i.attrs,
        _ => &[],
    }
}

/// Every source file of `krate`'s library (binaries' roots aside), test-only modules left out.
fn sources(krate: &str) -> Vec<Source> {
    let src = crates_dir().join(krate).join("src");
    let mut files = Vec::new();
    let mut dirs = vec![src.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    let mut sources = Vec::new();
    let mut test_modules = BTreeSet::new();
    for path in files {
        let relative = path.strip_prefix(&src).unwrap().with_extension("");
        let relative = relative.to_str().unwrap().replace('/', "::");
        let module = match relative.as_str() {
            "main" | "worker_main" => continue,
            "lib" => String::new(),
            other => other.strip_suffix("::mod").unwrap_or(other).to_owned(),
        };
        let text = std::fs::read_to_string(&path).unwrap();
        let file = format!("{krate}/src/{}", path.strip_prefix(&src).unwrap().display());
        let mut syntax =
            syn::parse_file(&text).unwrap_or_else(|e| panic!("{file} does not parse: {e}"));
        let mut test_lines = BTreeSet::new();
        syntax.items.retain(|item| {
            if !test_only(item_attrs(item)) {
                return true;
            }
            if let syn::Item::Mod(m) = item {
                test_modules.insert(join(&module, &m.ident.to_string()));
            }
            let span = item.span();
            test_lines.extend(span.start().line..=span.end().line);
            false
        });
        sources.push(Source {
            module,
            file,
            text,
            syntax,
            test_lines,
        });
    }
    sources.retain(|s| {
        !test_modules
            .iter()
            .any(|t| s.module == *t || s.module.starts_with(&format!("{t}::")))
    });
    sources
}

fn join(module: &str, name: &str) -> String {
    if module.is_empty() {
        name.to_owned()
    } else {
        format!("{module}::{name}")
    }
}

/// The paths a file names: `use` trees spelled out, paths in code, and `a::b` runs of
/// tokens in macro calls.
#[derive(Default)]
struct Paths {
    /// From `use` items: `use super::*` is the one-segment path `super`.
    used: Vec<Vec<String>>,
    /// From code and macro calls, two segments or more.
    named: Vec<Vec<String>>,
}

impl<'ast> Visit<'ast> for Paths {
    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        spell_out(&item.tree, &mut Vec::new(), &mut self.used);
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.segments.len() > 1 {
            self.named
                .push(path.segments.iter().map(|s| s.ident.to_string()).collect());
        }
        syn::visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        token_paths(mac.tokens.clone(), &mut self.named);
        syn::visit::visit_macro(self, mac);
    }

    // Doc comments and derives name no module; a visibility is no import.
    fn visit_attribute(&mut self, _: &'ast syn::Attribute) {}
    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}
}

/// Every path a `use` tree names, with `prefix` before it.
fn spell_out(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    let with = |prefix: &[String], name: &syn::Ident| {
        let mut path = prefix.to_vec();
        if name != "self" {
            path.push(name.to_string());
        }
        path
    };
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            spell_out(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => out.push(with(prefix, &n.ident)),
        syn::UseTree::Rename(r) => out.push(with(prefix, &r.ident)),
        syn::UseTree::Glob(_) => out.push(prefix.clone()),
        syn::UseTree::Group(g) => g.items.iter().for_each(|t| spell_out(t, prefix, out)),
    }
}

/// The names a crate root re-exports (`pub use a::b::C as D`: `D` → `a::b::C`).
fn aliases(root: &syn::File) -> BTreeMap<String, Vec<String>> {
    fn walk(
        tree: &syn::UseTree,
        prefix: &mut Vec<String>,
        out: &mut BTreeMap<String, Vec<String>>,
    ) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                walk(&p.tree, prefix, out);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                let mut path = prefix.clone();
                path.push(n.ident.to_string());
                out.insert(n.ident.to_string(), path);
            }
            syn::UseTree::Rename(r) => {
                let mut path = prefix.clone();
                path.push(r.ident.to_string());
                out.insert(r.rename.to_string(), path);
            }
            syn::UseTree::Glob(_) => {}
            syn::UseTree::Group(g) => g.items.iter().for_each(|t| walk(t, prefix, out)),
        }
    }
    let mut out = BTreeMap::new();
    for item in &root.items {
        if let syn::Item::Use(u) = item {
            walk(&u.tree, &mut Vec::new(), &mut out);
        }
    }
    out
}

/// The `a::b::c` runs of identifiers in a macro call's tokens.
fn token_paths(tokens: TokenStream, out: &mut Vec<Vec<String>>) {
    fn flush(path: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
        if path.len() > 1 {
            out.push(std::mem::take(path));
        }
        path.clear();
    }
    let mut path: Vec<String> = Vec::new();
    let mut colons = 0;
    for tree in tokens {
        match tree {
            TokenTree::Ident(ident) => {
                if colons != 2 {
                    flush(&mut path, out);
                }
                path.push(ident.to_string());
                colons = 0;
            }
            TokenTree::Punct(p) if p.as_char() == ':' && !path.is_empty() && colons < 2 => {
                colons += 1;
            }
            TokenTree::Group(group) => {
                flush(&mut path, out);
                colons = 0;
                token_paths(group.stream(), out);
            }
            _ => {
                flush(&mut path, out);
                colons = 0;
            }
        }
    }
    flush(&mut path, out);
}

/// The module `path`, named in `from` (which declares the modules `children`), leads to,
/// and the name it takes from it.
fn resolve(
    from: &str,
    children: &BTreeSet<String>,
    path: &[String],
    modules: &BTreeSet<String>,
    aliases: &BTreeMap<String, Vec<String>>,
) -> Option<(String, String)> {
    let here: Vec<String> = from
        .split("::")
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    let first = path.first()?;
    let mut segments: Vec<String> = match first.as_str() {
        "crate" => path[1..].to_vec(),
        "self" => [&here[..], &path[1..]].concat(),
        "super" => {
            let ups = path.iter().take_while(|s| *s == "super").count();
            let base = &here[..here.len().checked_sub(ups)?];
            [base, &path[ups..]].concat()
        }
        name if children.contains(name) => [&here[..], path].concat(),
        _ => return None,
    };
    if let Some(target) = segments.first().and_then(|f| aliases.get(f)) {
        segments = [&target[..], &segments[1..]].concat();
    }
    (1..=segments.len()).rev().find_map(|n| {
        let module = segments[..n].join("::");
        let name = segments.get(n).unwrap_or(&segments[n - 1]).clone();
        modules.contains(&module).then_some((module, name))
    })
}

/// The arrows between a crate's files: (importer, imported) → the names taken.
type Arrows = BTreeMap<(String, String), BTreeSet<String>>;

/// Every import between the files of `krate`, by module path.
fn arrows(sources: &[Source]) -> Arrows {
    let modules: BTreeSet<String> = sources
        .iter()
        .map(|s| s.module.clone())
        .filter(|m| !m.is_empty())
        .collect();
    let aliases = sources
        .iter()
        .find(|s| s.module.is_empty())
        .map(|root| aliases(&root.syntax))
        .unwrap_or_default();
    let mut arrows = Arrows::new();
    for source in sources.iter().filter(|s| !s.module.is_empty()) {
        let children: BTreeSet<String> = source
            .syntax
            .items
            .iter()
            .filter_map(|item| match item {
                syn::Item::Mod(m) if m.content.is_none() => Some(m.ident.to_string()),
                _ => None,
            })
            .collect();
        let mut paths = Paths::default();
        paths.visit_file(&source.syntax);
        for path in paths.used.iter().chain(&paths.named) {
            let Some((to, name)) = resolve(&source.module, &children, path, &modules, &aliases)
            else {
                continue;
            };
            if to != source.module {
                arrows
                    .entry((source.module.clone(), to))
                    .or_default()
                    .insert(name);
            }
        }
    }
    arrows
}

/// The groups of two modules or more that import each other round a loop (Tarjan's
/// strongly connected components).
fn circles(arrows: &Arrows) -> Vec<Vec<String>> {
    struct Walk<'a> {
        next: BTreeMap<&'a str, Vec<&'a str>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, at: &'a str) {
            let n = self.index.len();
            self.index.insert(at, n);
            self.low.insert(at, n);
            self.stack.push(at);
            self.on_stack.insert(at);
            for to in self.next.get(at).cloned().unwrap_or_default() {
                if !self.index.contains_key(to) {
                    self.visit(to);
                    let low = self.low[at].min(self.low[to]);
                    self.low.insert(at, low);
                } else if self.on_stack.contains(to) {
                    let low = self.low[at].min(self.index[to]);
                    self.low.insert(at, low);
                }
            }
            if self.low[at] == self.index[at] {
                let mut group = Vec::new();
                while let Some(top) = self.stack.pop() {
                    self.on_stack.remove(top);
                    group.push(top.to_owned());
                    if top == at {
                        break;
                    }
                }
                if group.len() > 1 {
                    group.sort();
                    self.found.push(group);
                }
            }
        }
    }
    let mut walk = Walk {
        next: BTreeMap::new(),
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for (from, to) in arrows.keys() {
        walk.next.entry(from).or_default().push(to);
    }
    let starts: Vec<&str> = walk.next.keys().copied().collect();
    for at in starts {
        if !walk.index.contains_key(at) {
            walk.visit(at);
        }
    }
    walk.found
}

/// Whether module `module` lies in the top module `top`.
fn within(module: &str, top: &str) -> bool {
    module == top || module.starts_with(&format!("{top}::"))
}

/// The file of each module of `sources`.
fn files(sources: &[Source]) -> BTreeMap<&str, &str> {
    sources
        .iter()
        .map(|s| (s.module.as_str(), s.file.as_str()))
        .collect()
}

#[test]
fn no_circle_between_the_files_of_a_crate() {
    let mut problems = Vec::new();
    for krate in NO_CIRCLES {
        let sources = sources(krate);
        let files = files(&sources);
        let arrows = arrows(&sources);
        assert!(
            arrows.len() > 10,
            "{krate}: only {} imports between its files were found; is the reader broken?",
            arrows.len()
        );
        for circle in circles(&arrows) {
            let mut text = format!(
                "{krate}: a circle of {} files: {}",
                circle.len(),
                circle
                    .iter()
                    .map(|m| files[m.as_str()])
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            for ((from, to), names) in &arrows {
                if circle.contains(from) && circle.contains(to) {
                    let names: Vec<&str> = names.iter().map(String::as_str).collect();
                    text += &format!(
                        "\n    {} -> {}: {}",
                        files[from.as_str()],
                        files[to.as_str()],
                        names.join(", ")
                    );
                }
            }
            problems.push(text);
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_log_and_the_vocabulary_never_import_the_loop() {
    let sources = sources("cadre-core");
    let files = files(&sources);
    // (importer's top module, a top module it must not import)
    let forbidden = [
        ("record", "run"),
        ("vocab", "run"),
        ("vocab", "record"),
        ("vocab", "definitions"),
        ("definitions", "run"),
        ("definitions", "record"),
        ("record", "definitions"),
    ];
    let mut problems = Vec::new();
    for ((from, to), names) in arrows(&sources) {
        for (low, high) in forbidden {
            if within(&from, low) && within(&to, high) {
                let names: Vec<&str> = names.iter().map(String::as_str).collect();
                problems.push(format!(
                    "{} ({low}) imports {} ({high}): {}",
                    files[from.as_str()],
                    files[to.as_str()],
                    names.join(", ")
                ));
            }
        }
    }
    assert!(
        files.keys().any(|m| within(m, "vocab")),
        "cadre-core has no vocab module"
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The lines of string literals that hold generated markup (HTML, CSS), which count
/// toward no limit.
fn markup_lines(text: &str) -> BTreeSet<usize> {
    fn walk(tokens: TokenStream, out: &mut BTreeSet<usize>) {
        for tree in tokens {
            match tree {
                TokenTree::Group(g) => walk(g.stream(), out),
                TokenTree::Literal(lit) => {
                    let spelled = lit.to_string();
                    let body = spelled.trim_start_matches(['r', '#', '"']).trim_start();
                    let span = lit.span();
                    let markup = body.starts_with('<')
                        || body
                            .lines()
                            .next()
                            .is_some_and(|l| l.trim_end().ends_with('{'));
                    if spelled.contains('"') && markup && span.end().line > span.start().line {
                        out.extend(span.start().line..=span.end().line);
                    }
                }
                _ => {}
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(text.parse().expect("a parsed file tokenizes"), &mut out);
    out
}

/// Every function of a file with its first and last line: `Type::name` for a method.
#[derive(Default)]
struct Functions {
    owner: Vec<String>,
    found: Vec<(String, usize, usize)>,
}

impl Functions {
    fn add(&mut self, name: &syn::Ident, sig: &syn::Signature, block: &syn::Block) {
        let mut path = self.owner.clone();
        path.push(name.to_string());
        let first = sig.span().start().line;
        let last = block.brace_token.span.close().end().line;
        self.found.push((path.join("::"), first, last));
    }
}

impl<'ast> Visit<'ast> for Functions {
    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        self.add(&f.sig.ident, &f.sig, &f.block);
        syn::visit::visit_item_fn(self, f);
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        self.add(&f.sig.ident, &f.sig, &f.block);
        syn::visit::visit_impl_item_fn(self, f);
    }

    fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
        if let Some(block) = &f.default {
            self.add(&f.sig.ident, &f.sig, block);
        }
        syn::visit::visit_trait_item_fn(self, f);
    }

    fn visit_item_impl(&mut self, item: &'ast syn::ItemImpl) {
        let owner = match &*item.self_ty {
            syn::Type::Path(p) => p.path.segments.last().map(|s| s.ident.to_string()),
            _ => None,
        };
        self.owner.push(owner.unwrap_or_else(|| "impl".to_owned()));
        syn::visit::visit_item_impl(self, item);
        self.owner.pop();
    }

    fn visit_item_trait(&mut self, item: &'ast syn::ItemTrait) {
        self.owner.push(item.ident.to_string());
        syn::visit::visit_item_trait(self, item);
        self.owner.pop();
    }
}

/// Holds what was measured against its limit and its allowance: a name over the limit and
/// not allowed is a problem, and so is one allowed that is no longer over.
fn check_allowance(
    what: &str,
    limit: usize,
    measured: &BTreeMap<String, usize>,
    allowed: &[(&str, usize)],
    problems: &mut Vec<String>,
) {
    let over: BTreeMap<&str, usize> = measured
        .iter()
        .filter(|(_, lines)| **lines > limit)
        .map(|(name, lines)| (name.as_str(), *lines))
        .collect();
    let allowed: BTreeMap<&str, usize> = allowed.iter().copied().collect();
    println!(
        "{} {what}s over {limit} lines ({} allowed when the rule was made)",
        over.len(),
        allowed.len()
    );
    for (name, lines) in &over {
        match allowed.get(name) {
            Some(then) => println!("  {name}: {lines} (allowed at {then})"),
            None => problems.push(format!(
                "the {what} {name} has {lines} lines, over {limit}: split it"
            )),
        }
    }
    for (name, then) in &allowed {
        if !over.contains_key(name) {
            let now = measured
                .get(*name)
                .map_or("gone".to_owned(), |n| format!("{n} lines"));
            problems.push(format!(
                "the {what} {name} (allowed at {then}) is within {limit} lines now ({now}): \
                 strike it from the allowance"
            ));
        }
    }
}

#[test]
fn no_long_files_or_functions_in_the_libraries_past_the_allowance() {
    let mut file_lines = BTreeMap::new();
    let mut function_lines = BTreeMap::new();
    for krate in SIZED {
        for source in sources(krate) {
            let left_out: BTreeSet<usize> = markup_lines(&source.text)
                .union(&source.test_lines)
                .copied()
                .collect();
            let lines = source.text.lines().count();
            file_lines.insert(
                source.file.clone(),
                lines - left_out.iter().filter(|l| **l <= lines).count(),
            );
            let mut functions = Functions::default();
            functions.visit_file(&source.syntax);
            for (name, first, last) in functions.found {
                let markup = left_out.range(first..=last).count();
                let name = format!("{}::{name}", source.file);
                // Two functions of one name in a file (a trait's in two impls) count as the longer.
                let length = last + 1 - first - markup;
                let entry = function_lines.entry(name).or_insert(0);
                *entry = length.max(*entry);
            }
        }
    }
    assert!(
        file_lines.len() > 50 && function_lines.len() > 500,
        "only {} files and {} functions were read; is the reader broken?",
        file_lines.len(),
        function_lines.len()
    );
    let mut problems = Vec::new();
    check_allowance("file", FILE_LINES, &file_lines, LONG_FILES, &mut problems);
    check_allowance(
        "function",
        FUNCTION_LINES,
        &function_lines,
        LONG_FUNCTIONS,
        &mut problems,
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn core_files_say_what_they_depend_on_and_fill_nothing_in_later() {
    let mut problems = Vec::new();
    let sources = sources("cadre-core");
    for source in &sources {
        let code = source
            .text
            .lines()
            .enumerate()
            .filter(|(i, _)| !source.test_lines.contains(&(i + 1)));
        for (i, line) in code {
            if line.contains("use super::*") {
                problems.push(format!("{}:{}: use super::*", source.file, i + 1));
            }
            // The loop's per-run state; a failure's first-comer slot in `record` is not that.
            if source.file.contains("/src/run/") && line.contains("Mutex<Option<") {
                problems.push(format!(
                    "{}:{}: state in a Mutex<Option<…>>",
                    source.file,
                    i + 1
                ));
            }
        }
    }
    assert!(
        sources.len() > 50,
        "only {} files of cadre-core were read",
        sources.len()
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Every path `docs/architecture.md` names (in backticks, starting `crates/`) exists, so the
/// map does not drift from the tree.
#[test]
fn the_architecture_page_names_only_paths_that_exist() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let page = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap();
    let named: Vec<&str> = page
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| s.starts_with("crates/"))
        .collect();
    assert!(
        named.len() > 10,
        "only {} paths found on the page",
        named.len()
    );
    let missing: Vec<&&str> = named.iter().filter(|p| !root.join(p).exists()).collect();
    assert!(
        missing.is_empty(),
        "docs/architecture.md names paths that do not exist: {missing:?}"
    );
}

/// The library crates whose error enums are held to typed variants.
const TYPED_ERRORS: [&str; 6] = [
    "cadre-model",
    "cadre-tools",
    "cadre-core",
    "cadre-mcp",
    "cadre-engine",
    "cadre-workflow",
];

/// Field names that say a `String` is a message rather than a value a caller can act on.
const MESSAGE_NAMES: [&str; 7] = ["message", "reason", "why", "text", "msg", "detail", "what"];

/// The error variants (`file::Enum::Variant`) that may stay one message, and why: text
/// meant for the model, which reads it as a tool's result, not for a program to match.
const MESSAGE_VARIANTS: &[(&str, &str)] = &[
    (
        "cadre-tools/src/error.rs::ToolError::InvalidInput",
        "what is wrong with a tool's input (its schema, a regex, a glob), told to the model so it can correct its call",
    ),
    (
        "cadre-tools/src/error.rs::ToolError::Refused",
        "a tool's own refusal (stale edit, binary file, not found), written for the model to act on",
    ),
];

/// The variants of error enums (those deriving `Error`) whose one field is a bare `String`:
/// unnamed, or named as a message.
#[derive(Default)]
struct MessageVariants {
    found: Vec<String>,
}

/// Whether `attrs` derive `Error` (`thiserror::Error` or `Error` imported).
fn derives_error(attrs: &[syn::Attribute]) -> bool {
    attrs
        .iter()
        .filter(|a| a.path().is_ident("derive"))
        .any(|a| {
            a.parse_args_with(
                syn::punctuated::Punctuated::<syn::Path, syn::Token![,]>::parse_terminated,
            )
            .is_ok_and(|paths| {
                paths
                    .iter()
                    .any(|p| p.segments.last().is_some_and(|s| s.ident == "Error"))
            })
        })
}

fn is_string(ty: &syn::Type) -> bool {
    matches!(ty, syn::Type::Path(p) if p.path.segments.last().is_some_and(|s| s.ident == "String"))
}

impl<'ast> Visit<'ast> for MessageVariants {
    fn visit_item_enum(&mut self, item: &'ast syn::ItemEnum) {
        if derives_error(&item.attrs) {
            for variant in &item.variants {
                let mut fields = variant.fields.iter();
                let (Some(only), None) = (fields.next(), fields.next()) else {
                    continue;
                };
                let message = only
                    .ident
                    .as_ref()
                    .is_none_or(|name| MESSAGE_NAMES.contains(&name.to_string().as_str()));
                if message && is_string(&only.ty) {
                    self.found
                        .push(format!("{}::{}", item.ident, variant.ident));
                }
            }
        }
        syn::visit::visit_item_enum(self, item);
    }
}

/// No error enum of a library crate carries a bare `String` as its variant's one field (a
/// caller gets the value, the path, the source error or the case instead), past the named
/// model-facing messages.
#[test]
fn error_variants_carry_typed_data_not_a_bare_string() {
    let mut found = BTreeSet::new();
    let mut enums = 0;
    for krate in TYPED_ERRORS {
        for source in sources(krate) {
            enums += source.text.matches("Error)]").count();
            let mut variants = MessageVariants::default();
            variants.visit_file(&source.syntax);
            found.extend(
                variants
                    .found
                    .into_iter()
                    .map(|v| format!("{}::{v}", source.file)),
            );
        }
    }
    assert!(
        enums > 15,
        "only {enums} error derives were read; is the reader broken?"
    );
    let allowed: BTreeMap<&str, &str> = MESSAGE_VARIANTS.iter().copied().collect();
    let mut problems = Vec::new();
    println!("{} error variants hold one message:", found.len());
    for variant in &found {
        match allowed.get(variant.as_str()) {
            Some(why) => println!("  {variant}: allowed, as {why}"),
            None => problems.push(format!(
                "{variant} holds a bare String: give it the typed data a caller acts on \
                 (a path, an id, the source error), or split it into its cases"
            )),
        }
    }
    for variant in allowed.keys() {
        if !found.contains(*variant) {
            problems.push(format!(
                "{variant} is allowed a message but holds none now: strike it from the allowance"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The arms of `match`es in `RunError::kind` that a new variant would fall into unseen.
#[derive(Default)]
struct Wildcards {
    in_kind: bool,
    seen_kind: bool,
    found: usize,
}

impl<'ast> Visit<'ast> for Wildcards {
    fn visit_item_impl(&mut self, item: &'ast syn::ItemImpl) {
        let of_run_error =
            matches!(&*item.self_ty, syn::Type::Path(p) if p.path.is_ident("RunError"));
        if item.trait_.is_none() && of_run_error {
            syn::visit::visit_item_impl(self, item);
        }
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        self.in_kind = f.sig.ident == "kind";
        self.seen_kind |= self.in_kind;
        syn::visit::visit_impl_item_fn(self, f);
        self.in_kind = false;
    }

    fn visit_arm(&mut self, arm: &'ast syn::Arm) {
        let wild = match &arm.pat {
            syn::Pat::Wild(_) => true,
            syn::Pat::Ident(i) => i.subpat.is_none(),
            _ => false,
        };
        if self.in_kind && wild {
            self.found += 1;
        }
        syn::visit::visit_arm(self, arm);
    }
}

/// `RunError::kind` names every variant, so a new one does not compile until it is given a
/// kind, and with it the `cadre` command's exit code (whose match on the kind has no
/// catch-all either, `RunErrorKind` not being `#[non_exhaustive]`).
#[test]
fn every_run_error_is_given_its_kind_by_name() {
    let mut wildcards = Wildcards::default();
    for source in sources("cadre-core") {
        wildcards.visit_file(&source.syntax);
    }
    assert!(wildcards.seen_kind, "RunError::kind was not found");
    assert_eq!(
        wildcards.found, 0,
        "RunError::kind has a catch-all arm: a new variant would get a kind unseen"
    );
}
