//! The library's public surface, counted by reading its source: every name an embedder can
//! reach from `cadre_core`'s root through `pub mod` and `pub use`, the hidden module
//! `internal` (the workspace's own crates' way in) counted apart. The facade stays small
//! enough to learn in an hour, and the mechanism stays private.

use std::path::{Path, PathBuf};

/// The most public names reachable from cadre-core's root (the `workflow` module's ten among
/// them: a workflow item's call, its start, its result, and the content key both carry;
/// and what a program hands the `Workflow` tool: its saved workflows, the trait that runs
/// one, and one call of it).
const MOST_NAMES: usize = 130;

/// The most names the hidden `internal` module may hand the workspace's own crates: what
/// they need today and a little room, so a new way into the mechanism is a decision (the
/// 41st: `ResultsFile`, for the CLI's workflow runs on the engine, which write the results
/// file as cadre-core's driver does).
const MOST_INTERNAL_NAMES: usize = 41;

/// The public modules cadre-core's root may declare: the facade's vocabulary, and the hidden
/// way in for the workspace's own crates. The mechanism (`definitions`, `record`, `run`)
/// is `pub(crate)`.
const PUBLIC_MODULES: [&str; 3] = ["vocab", "workflow", "internal"];

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

/// cadre-core's `lib.rs`, its path and its parsed items.
fn lib() -> (PathBuf, syn::File) {
    let lib = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs");
    let syntax = syn::parse_file(&std::fs::read_to_string(&lib).unwrap()).unwrap();
    (lib, syntax)
}

#[test]
fn the_public_surface_of_cadre_core_is_a_small_facade() {
    let (lib, syntax) = lib();
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

#[test]
fn the_mechanism_is_private_and_its_way_in_is_narrow() {
    let (lib, syntax) = lib();
    let modules: Vec<(String, &syn::ItemMod)> = syntax
        .items
        .iter()
        .filter_map(|item| match item {
            syn::Item::Mod(m) => Some((m.ident.to_string(), m)),
            _ => None,
        })
        .collect();
    let public: Vec<&str> = modules
        .iter()
        .filter(|(_, m)| matches!(m.vis, syn::Visibility::Public(_)))
        .map(|(name, _)| name.as_str())
        .collect();
    let strange: Vec<&&str> = public
        .iter()
        .filter(|name| !PUBLIC_MODULES.contains(name))
        .collect();
    assert!(
        strange.is_empty(),
        "cadre-core's root declares `pub mod` {strange:?}: the mechanism is `pub(crate)`, and \
         what another crate of the workspace needs goes through `internal`"
    );
    for name in ["definitions", "record", "run"] {
        assert!(
            modules.iter().any(|(n, _)| n == name),
            "the mechanism's module {name} is not declared at the root: is the reader broken?"
        );
    }
    let (_, internal) = modules
        .iter()
        .find(|(name, _)| name == "internal")
        .expect("cadre-core declares its hidden module internal");
    assert!(
        hidden(&internal.attrs),
        "internal is no part of the documented surface: it must be #[doc(hidden)]"
    );
    let file = module_file(&lib, "internal");
    let items = syn::parse_file(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let mut names = Vec::new();
    public_names(&items.items, &file, "internal::", &mut names);
    println!(
        "cadre-core's hidden way in for the workspace: {} names\n  {}",
        names.len(),
        names.join("\n  ")
    );
    assert!(
        names.iter().any(|n| n.starts_with("internal::Journal ")),
        "the reader did not find internal's Journal: is it broken?"
    );
    assert!(
        names.iter().all(|n| !n.contains('*')),
        "a glob in internal cannot be counted: {names:?}"
    );
    assert!(
        names.len() <= MOST_INTERNAL_NAMES,
        "internal hands out {} names, more than {MOST_INTERNAL_NAMES}",
        names.len()
    );
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The types, traits and type aliases declared `pub` in `items`, each with where.
fn public_types(items: &[syn::Item], file: &Path, out: &mut Vec<(String, String)>) {
    for item in items {
        let (vis, ident) = match item {
            syn::Item::Enum(i) => (&i.vis, &i.ident),
            syn::Item::Struct(i) => (&i.vis, &i.ident),
            syn::Item::Trait(i) => (&i.vis, &i.ident),
            syn::Item::Type(i) => (&i.vis, &i.ident),
            syn::Item::Union(i) => (&i.vis, &i.ident),
            syn::Item::Mod(m) => {
                if let Some((_, inner)) = &m.content {
                    public_types(inner, file, out);
                }
                continue;
            }
            _ => continue,
        };
        if matches!(vis, syn::Visibility::Public(_)) {
            out.push((ident.to_string(), file.display().to_string()));
        }
    }
}

#[test]
fn no_two_public_types_of_cadre_core_and_the_crates_it_re_exports_share_a_name() {
    // cadre-core re-exports cadre-model, cadre-tools and cadre-mcp whole: an embedder meets
    // all four crates' types, so two of one name (two `Outcome`s) would be two meanings.
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut types = Vec::new();
    for name in ["cadre-core", "cadre-model", "cadre-tools", "cadre-mcp"] {
        let mut files = Vec::new();
        rust_files(&crates.join(name).join("src"), &mut files);
        for file in files {
            let syntax = syn::parse_file(&std::fs::read_to_string(&file).unwrap()).unwrap();
            public_types(&syntax.items, &file, &mut types);
        }
    }
    assert!(
        types.iter().any(|(name, _)| name == "Orchestrator")
            && types.iter().any(|(name, _)| name == "ToolContext"),
        "the reader missed cadre-core's or cadre-tools' types: is it broken?"
    );
    types.sort();
    let shared: Vec<_> = types
        .windows(2)
        .filter(|pair| pair[0].0 == pair[1].0)
        .map(|pair| format!("{} in {} and {}", pair[0].0, pair[0].1, pair[1].1))
        .collect();
    println!(
        "public types of cadre-core and its re-exported crates: {}",
        types.len()
    );
    assert!(
        shared.is_empty(),
        "two public types share a name: {shared:#?}"
    );
}

#[test]
fn the_embedder_example_and_the_library_guide_build_with_cadre_core_and_tokio_alone() {
    // examples/embedder compiles embed.rs, typed_tool.rs and the guide's code with its own
    // dependencies: they prove one dependency on cadre is enough only while those are
    // cadre-core and tokio, and nothing else reaches examples or doctests.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let crate_dir = root.join("examples/embedder");
    let manifest: toml::Table = std::fs::read_to_string(crate_dir.join("Cargo.toml"))
        .unwrap()
        .parse()
        .unwrap();
    let dependencies: Vec<&String> = manifest["dependencies"]
        .as_table()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(
        dependencies,
        ["cadre-core", "tokio"],
        "the embedder's dependencies"
    );
    for other in ["dev-dependencies", "build-dependencies", "target"] {
        assert!(
            !manifest.contains_key(other),
            "the embedder's manifest has [{other}], which its examples or doctests could use"
        );
    }
    assert!(
        !manifest["package"]
            .as_table()
            .unwrap()
            .contains_key("build")
            && !crate_dir.join("build.rs").exists(),
        "the embedder has a build script"
    );
    let examples: Vec<&str> = manifest["example"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(examples, ["embed", "typed_tool"], "the embedder's examples");
    let lib = std::fs::read_to_string(crate_dir.join("src/lib.rs")).unwrap();
    for doc in ["README.md", "docs/library.md"] {
        assert!(
            lib.contains(&format!("include_str!(\"../../../{doc}\")")),
            "the embedder does not compile {doc}'s code"
        );
    }
    // A block left out of the build could drift: network blocks are `no_run`, none `ignore`.
    let guide = std::fs::read_to_string(root.join("docs/library.md")).unwrap();
    let fences: Vec<&str> = guide.lines().filter(|l| l.starts_with("```rust")).collect();
    assert!(fences.len() >= 8, "the guide's Rust blocks: {fences:?}");
    let ignored: Vec<&&str> = fences.iter().filter(|f| f.contains("ignore")).collect();
    assert!(
        ignored.is_empty(),
        "blocks left out of the build: {ignored:?}"
    );
}
