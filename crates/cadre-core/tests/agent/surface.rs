//! The library's public surface, counted by reading its source: every name an embedder can
//! reach from `cadre_core`'s root through `pub mod` and `pub use`, modules marked
//! `#[doc(hidden)]` (the workspace's own crates' way in) left out. The facade stays small
//! enough to learn in an hour.

use std::path::{Path, PathBuf};

/// The most public names reachable from cadre-core's root.
const MOST_NAMES: usize = 120;

/// Whether `attrs` hide an item from the documented surface, or leave it out of the build.
fn hidden(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| {
        let meta = meta_text(&attr.meta);
        (attr.path().is_ident("doc") && meta.contains("hidden"))
            || (attr.path().is_ident("cfg") && (meta.contains("test") || meta.contains("doctest")))
    })
}

/// The text of an attribute's meta, to look for a word in it.
fn meta_text(meta: &syn::Meta) -> String {
    match meta {
        syn::Meta::Path(path) => path_text(path),
        syn::Meta::List(list) => format!("{}({})", path_text(&list.path), list.tokens),
        syn::Meta::NameValue(nv) => path_text(&nv.path),
    }
}

/// A path as written, `::`-joined.
fn path_text(path: &syn::Path) -> String {
    path.segments
        .iter()
        .map(|s| s.ident.to_string())
        .collect::<Vec<_>>()
        .join("::")
}

/// The names a `use` tree brings in, each with where it comes from (a glob is `*`, and is
/// refused below).
fn use_names(tree: &syn::UseTree, prefix: &str, out: &mut Vec<String>) {
    match tree {
        syn::UseTree::Path(p) => use_names(&p.tree, &format!("{prefix}{}::", p.ident), out),
        syn::UseTree::Name(n) => out.push(format!("{} (from {prefix}{})", n.ident, n.ident)),
        syn::UseTree::Rename(r) => out.push(format!("{} (from {prefix}{})", r.rename, r.ident)),
        syn::UseTree::Glob(_) => out.push(format!("* (from {prefix}*)")),
        syn::UseTree::Group(g) => g.items.iter().for_each(|t| use_names(t, prefix, out)),
    }
}

/// The file of module `name` declared in the file `from` (a `mod.rs`/`lib.rs` or not).
fn module_file(from: &Path, name: &str) -> PathBuf {
    let stem = from.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    let dir = match stem {
        "lib" | "mod" => from.parent().unwrap().to_owned(),
        _ => from.with_extension(""),
    };
    let flat = dir.join(format!("{name}.rs"));
    if flat.exists() {
        flat
    } else {
        dir.join(name).join("mod.rs")
    }
}

/// Every public name in `items` (of the module at `path`, declared in `file`), modules'
/// contents followed; each as its path from the root.
fn public_names(items: &[syn::Item], file: &Path, path: &str, out: &mut Vec<String>) {
    for item in items {
        let (vis, attrs) = match item {
            syn::Item::Const(i) => (&i.vis, &i.attrs),
            syn::Item::Enum(i) => (&i.vis, &i.attrs),
            syn::Item::Fn(i) => (&i.vis, &i.attrs),
            syn::Item::Mod(i) => (&i.vis, &i.attrs),
            syn::Item::Static(i) => (&i.vis, &i.attrs),
            syn::Item::Struct(i) => (&i.vis, &i.attrs),
            syn::Item::Trait(i) => (&i.vis, &i.attrs),
            syn::Item::Type(i) => (&i.vis, &i.attrs),
            syn::Item::Union(i) => (&i.vis, &i.attrs),
            syn::Item::Use(i) => (&i.vis, &i.attrs),
            _ => continue,
        };
        if !matches!(vis, syn::Visibility::Public(_)) || hidden(attrs) {
            continue;
        }
        match item {
            syn::Item::Use(u) => {
                let mut names = Vec::new();
                use_names(&u.tree, "", &mut names);
                out.extend(names.into_iter().map(|n| format!("{path}{n}")));
            }
            syn::Item::Mod(m) => {
                out.push(format!("{path}{} (module)", m.ident));
                let inner = format!("{path}{}::", m.ident);
                match &m.content {
                    Some((_, items)) => public_names(items, file, &inner, out),
                    None => {
                        let child = module_file(file, &m.ident.to_string());
                        let text = std::fs::read_to_string(&child).unwrap();
                        let syntax = syn::parse_file(&text).unwrap();
                        public_names(&syntax.items, &child, &inner, out);
                    }
                }
            }
            _ => {
                let ident = match item {
                    syn::Item::Const(i) => i.ident.to_string(),
                    syn::Item::Enum(i) => i.ident.to_string(),
                    syn::Item::Fn(i) => i.sig.ident.to_string(),
                    syn::Item::Static(i) => i.ident.to_string(),
                    syn::Item::Struct(i) => i.ident.to_string(),
                    syn::Item::Trait(i) => i.ident.to_string(),
                    syn::Item::Type(i) => i.ident.to_string(),
                    syn::Item::Union(i) => i.ident.to_string(),
                    _ => continue,
                };
                out.push(format!("{path}{ident}"));
            }
        }
    }
}

#[test]
fn the_public_surface_of_cadre_core_is_a_small_facade() {
    let lib = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs");
    let syntax = syn::parse_file(&std::fs::read_to_string(&lib).unwrap()).unwrap();
    let mut names = Vec::new();
    public_names(&syntax.items, &lib, "", &mut names);
    println!(
        "cadre-core's public surface: {} names\n  {}",
        names.len(),
        names.join("\n  ")
    );
    assert!(
        names.iter().any(|n| n.starts_with("Orchestrator "))
            && names.iter().any(|n| n.starts_with("AgentSpec ")),
        "the reader did not find the facade's Orchestrator and AgentSpec: is it broken?"
    );
    let globs: Vec<&String> = names.iter().filter(|n| n.contains('*')).collect();
    assert!(
        globs.is_empty(),
        "a glob re-export cannot be counted: {globs:?}"
    );
    assert!(
        names.len() <= MOST_NAMES,
        "cadre-core's root reaches {} public names, more than {MOST_NAMES}",
        names.len()
    );
}
