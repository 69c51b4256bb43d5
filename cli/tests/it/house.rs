//! House rules the tree itself is checked for (#27):
//!
//! - No source file of the workspace imports, through any chain, a file
//!   that imports it back. A circle between files means no file of it can
//!   be read, tested or moved alone; it is also where a low floor (an
//!   error type, a flag) grew up inside a high one.
//! - burn is named only by the burn engine's crate (`gpu-worker/burn/`):
//!   everything else talks to the engine seam, which another engine plugs
//!   into.
//! - An engine type is named only by the engine factory
//!   (`gpu-worker/src/factory.rs`), inside its own crate, and by
//!   `gpu-worker`'s `lib.rs` re-export for tests and benchmarks: the worker
//!   and the rest of the seam pick no engine themselves.
//! - The crates below the worker compile only what their job needs, however
//!   deep (`cargo tree`): the ONNX engine no burn or cudarc, the CUDA engine
//!   no burn or ONNX Runtime, the model families, the seam and the
//!   tokenizers no engine's runtime at all.
//! - Every relative link of every Markdown file of the repository leads to
//!   a file that is there, and every `#anchor` into a Markdown file to one
//!   of its headings: the docs are split across pages (ARCHITECTURE.md is
//!   a map of `docs/architecture/`), and a moved page or a renamed heading
//!   must not leave a link behind.
//!
//! Each crate's files are parsed with `syn`. An edge `a → b` is any path in
//! `a` that starts at `crate`, `self` or `super` and names `b`'s module or
//! something inside it (a `use`, a type, a call). `#[cfg(test)]` items are
//! left out: a file's tests may use what they test. Declaring `mod b;` is
//! not an edge. A parent `mod.rs` that re-exports from its child and a child
//! that uses the parent's items form a circle, as any two files would.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// A module path inside one crate: `[]` is the crate root.
type Module = Vec<String>;

/// The crates whose files must not form circles, and that may name burn
/// only where [`BURN_HOMES`] says.
const CRATES: [&str; 12] = [
    "pipeline-core",
    "loader",
    "gpu-worker/families",
    "gpu-worker/seam",
    "gpu-worker/tokenizers",
    "gpu-worker/nvidia",
    "gpu-worker/burn",
    "gpu-worker/cuda",
    "gpu-worker/onnx",
    "gpu-worker",
    "coordinator",
    "cli",
];

#[test]
fn no_source_file_imports_a_file_that_imports_it_back() {
    let mut report = String::new();
    for krate in CRATES {
        let sources: Vec<(Module, String)> = crate_sources(krate)
            .into_iter()
            .map(|(module, _, text)| (module, text))
            .collect();
        for circle in circles(&sources) {
            report.push_str(&format!("{krate}: {circle}\n"));
        }
    }
    assert!(report.is_empty(), "import circles:\n{report}");
}

/// The check itself finds a circle, one through a parent `mod.rs`, and
/// none where there is none; it ignores tests and visibilities.
#[test]
fn the_check_finds_circles_and_only_circles() {
    let files = |list: &[(&str, &str)]| -> Vec<(Module, String)> {
        list.iter()
            .map(|(m, text)| (module(m), (*text).to_owned()))
            .collect()
    };
    let two = files(&[
        ("", "mod a; mod b;"),
        ("a", "use crate::b::B; pub struct A;"),
        ("b", "pub struct B; fn f() -> crate::a::A { todo!() }"),
    ]);
    assert_eq!(circles(&two), ["a → b", "b → a"]);

    let parent = files(&[
        ("", "mod m;"),
        ("m", "mod c; pub use self::c::C; pub struct P;"),
        ("m::c", "use super::P; pub struct C(P);"),
    ]);
    assert_eq!(circles(&parent), ["m → m::c", "m::c → m"]);

    let clean = files(&[
        ("", "mod a; mod b; pub use a::A;"),
        ("a", "use crate::b::B; pub struct A(B);"),
        (
            "b",
            "pub(super) struct B; pub(in crate::b) fn g() {}\n\
             #[cfg(test)] mod tests { use crate::a::A; }",
        ),
    ]);
    assert_eq!(circles(&clean), Vec::<String>::new());
}

/// Where burn may be named: the burn engine's crate.
const BURN_HOMES: [&str; 1] = ["gpu-worker/burn/"];

/// The crates of burn and the runtime under it.
const BURN_CRATES: [&str; 6] = [
    "burn",
    "burn_flex",
    "burn_std",
    "burn_tensor",
    "cubecl",
    "cubecl_runtime",
];

#[test]
fn burn_is_named_only_by_the_burn_engine_and_its_model_families() {
    let mut outside = Vec::new();
    let mut inside = 0;
    for krate in CRATES {
        for (_, rel, text) in crate_sources(krate) {
            let named = burn_names(&text);
            if BURN_HOMES.iter().any(|home| rel.starts_with(home)) {
                inside += named.len();
            } else if let Some(first) = named.first() {
                outside.push(format!("{rel}: {first}"));
            }
        }
    }
    assert!(
        inside > 0,
        "the burn engine names burn (the check reads paths)"
    );
    assert!(
        outside.is_empty(),
        "burn named outside the burn engine:\n{}",
        outside.join("\n")
    );
}

#[test]
fn the_burn_check_finds_uses_types_and_calls_but_not_tests() {
    assert_eq!(
        burn_names("use burn::tensor::Tensor;"),
        ["burn::tensor::Tensor"]
    );
    assert_eq!(
        burn_names("fn f(x: burn_flex::FlexTensor) { cubecl::x(); }"),
        ["burn_flex::FlexTensor", "cubecl::x"]
    );
    assert!(burn_names("use crate::burn_engine::BurnEngine; // burn").is_empty());
    assert!(burn_names("#[cfg(test)] mod tests { use burn::tensor::Tensor; }").is_empty());
}

/// The engine types, by their paths from other crates, and (the last
/// three) inside `gpu-worker` through its re-exports.
const ENGINE_TYPES: [&str; 9] = [
    "engine_burn::BurnEngine",
    "engine_cuda::engine::CudaEngine",
    "engine_onnx::engine::OnnxEngine",
    "gpu_worker::BurnEngine",
    "gpu_worker::cuda::engine::CudaEngine",
    "gpu_worker::onnx::engine::OnnxEngine",
    "BurnEngine",
    "cuda::engine::CudaEngine",
    "onnx::engine::OnnxEngine",
];

/// Where an engine type may be named: the factory, the engines' own
/// crates, and `gpu-worker`'s root re-export.
const ENGINE_NAMERS: [&str; 5] = [
    "gpu-worker/src/factory.rs",
    "gpu-worker/src/lib.rs",
    "gpu-worker/burn/",
    "gpu-worker/cuda/",
    "gpu-worker/onnx/",
];

#[test]
fn only_the_engine_factory_picks_an_engine() {
    let mut outside = Vec::new();
    let mut in_factory = Vec::new();
    for krate in CRATES {
        for (module, rel, text) in crate_sources(krate) {
            let named = engine_names(&module, &text);
            if rel == "gpu-worker/src/factory.rs" {
                in_factory.extend(named);
            } else if !ENGINE_NAMERS.iter().any(|home| rel.starts_with(home))
                && let Some(first) = named.first()
            {
                outside.push(format!("{rel}: {first}"));
            }
        }
    }
    for engine in &ENGINE_TYPES[..3] {
        assert!(
            in_factory.iter().any(|p| p.starts_with(engine)),
            "the factory opens {engine} (the check reads paths): {in_factory:?}"
        );
    }
    assert!(
        outside.is_empty(),
        "an engine type named outside the engine factory:\n{}",
        outside.join("\n")
    );
}

#[test]
fn the_engine_check_finds_engine_types_through_any_path() {
    let worker = module("worker");
    assert_eq!(
        engine_names(&worker, "use engine_burn::BurnEngine;"),
        ["engine_burn::BurnEngine"]
    );
    assert_eq!(
        engine_names(
            &worker,
            "fn f() { engine_cuda::engine::CudaEngine::open(c, w); }"
        ),
        ["engine_cuda::engine::CudaEngine::open"]
    );
    assert_eq!(
        engine_names(&worker, "use crate::cuda::engine::{CudaEngine, Wiring};"),
        ["cuda::engine::CudaEngine"]
    );
    assert_eq!(
        engine_names(&worker, "fn f() { crate::BurnEngine::open(c); }"),
        ["BurnEngine::open"]
    );
    assert_eq!(
        engine_names(&module("text"), "use super::cuda::engine::CudaEngine;"),
        ["cuda::engine::CudaEngine"]
    );
    assert_eq!(
        engine_names(&module("plan"), "use gpu_worker::onnx::engine::OnnxEngine;"),
        ["gpu_worker::onnx::engine::OnnxEngine"]
    );
    assert!(engine_names(&worker, "use engine_seam::Engine;").is_empty());
    assert!(engine_names(&worker, "use gpu_worker::onnx::engine::OnnxOptions;").is_empty());
    assert!(
        engine_names(
            &worker,
            "#[cfg(test)] mod t { use engine_burn::BurnEngine; }"
        )
        .is_empty()
    );
}

/// What each crate below the worker must not compile, however deep: an
/// engine builds and tests alone (`cargo test -p engine-onnx` compiles no
/// burn), and what every engine shares compiles no engine's runtime.
const MUST_NOT_COMPILE: [(&str, &[&str]); 7] = [
    ("model-families", &NO_RUNTIME),
    ("engine-seam", &NO_RUNTIME),
    ("text-tokenizers", &NO_RUNTIME),
    (
        "nvidia-devices",
        &["burn", "cubecl", "wgpu", "ort", "loader"],
    ),
    (
        "engine-onnx",
        &["burn", "cubecl", "wgpu", "cudarc", "loader"],
    ),
    ("engine-cuda", &["burn", "cubecl", "wgpu", "ort"]),
    (
        "engine-burn",
        &["ort", "engine-cuda", "engine-onnx", "loader"],
    ),
];

/// No engine's runtime, and not the loader (parquet, object storage),
/// which is the worker's: what every engine shares.
const NO_RUNTIME: [&str; 6] = ["burn", "cubecl", "wgpu", "cudarc", "ort", "loader"];

/// `cargo tree`'s packages for `package` and its tests, every depth.
fn compiled_for(package: &str) -> BTreeSet<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let out = std::process::Command::new(cargo)
        .args(["tree", "--offline", "--locked", "-e", "normal,build,dev"])
        .args(["--prefix", "none", "--format", "{p}", "-p", package])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "cargo tree -p {package}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

/// Whether `package` is `family` or one of its crates (`burn-flex`,
/// `cubecl-runtime`, `ort-sys`).
fn of_family(package: &str, family: &str) -> bool {
    package == family
        || package
            .strip_prefix(family)
            .is_some_and(|rest| rest.starts_with('-') || rest.starts_with('_'))
}

#[test]
fn each_crate_below_the_worker_compiles_only_what_its_job_needs() {
    let mut report = Vec::new();
    for (package, banned) in MUST_NOT_COMPILE {
        let compiled = compiled_for(package);
        assert!(
            compiled.contains(package),
            "cargo tree lists {package} itself: {compiled:?}"
        );
        for found in &compiled {
            if let Some(family) = banned.iter().find(|f| of_family(found, f)) {
                report.push(format!("{package} compiles {found} ({family})"));
            }
        }
    }
    assert!(report.is_empty(), "{}", report.join("\n"));
}

/// The check sees what it bans: the worker compiles every engine.
#[test]
fn the_compile_check_sees_every_engine_under_the_worker() {
    let compiled = compiled_for("gpu-worker");
    for family in ["burn", "cudarc", "ort", "engine-onnx", "engine-cuda"] {
        assert!(
            compiled.iter().any(|p| of_family(p, family)),
            "gpu-worker compiles {family}"
        );
    }
    assert!(of_family("burn-flex", "burn") && of_family("ort-sys", "ort"));
    assert!(!of_family("burnish", "burn") && !of_family("sort", "ort"));
}

/// Every crate path in `text`, a file of module `me`, that names one of
/// [`ENGINE_TYPES`] (outside `#[cfg(test)]` items).
fn engine_names(me: &Module, text: &str) -> Vec<String> {
    let file = syn::parse_file(text).expect("a Rust file parses");
    let mut paths = Paths {
        me,
        found: Vec::new(),
        keep_external: true,
    };
    paths.visit_file(&file);
    paths
        .found
        .into_iter()
        .map(|p| p.join("::"))
        .filter(|p| {
            ENGINE_TYPES
                .iter()
                .any(|t| p == t || p.starts_with(&format!("{t}::")))
        })
        .collect()
}

/// Every path in `text` (outside `#[cfg(test)]` items) that starts at one
/// of [`BURN_CRATES`].
fn burn_names(text: &str) -> Vec<String> {
    let file = syn::parse_file(text).expect("a Rust file parses");
    let me = Vec::new();
    let mut paths = Paths {
        me: &me,
        found: Vec::new(),
        keep_external: true,
    };
    paths.visit_file(&file);
    paths
        .found
        .into_iter()
        .filter(|p| p.first().is_some_and(|c| BURN_CRATES.contains(&c.as_str())))
        .map(|p| p.join("::"))
        .collect()
}

/// Every source file of `krate`: its module, its path from the workspace
/// root, and its text.
fn crate_sources(krate: &str) -> Vec<(Module, String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("cli sits in the workspace");
    let files = crate_files(&root.join(krate).join("src"));
    // `nvidia-devices` is three files (lib.rs, gpus.rs, libs.rs).
    assert!(files.len() >= 3, "{krate}: found its source files");
    files
        .into_iter()
        .map(|(module, path)| {
            let rel = path
                .strip_prefix(root)
                .expect("under the workspace")
                .to_string_lossy()
                .into_owned();
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{rel}: {e}"));
            (module, rel, text)
        })
        .collect()
}

fn module(dotted: &str) -> Module {
    dotted
        .split("::")
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Every `.rs` file under `src` and the module it is.
fn crate_files(src: &Path) -> Vec<(Module, PathBuf)> {
    let mut out = Vec::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.expect("a readable folder entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path
                .strip_prefix(src)
                .expect("under src")
                .with_extension("");
            let mut module: Module = rel
                .iter()
                .map(|c| c.to_string_lossy().into_owned())
                .collect();
            if matches!(
                module.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                module.pop();
            }
            // A binary target beside the library (`src/bin/*.rs`, a second
            // `main.rs`) is a crate of its own.
            if module.first().is_some_and(|m| m == "bin") {
                continue;
            }
            out.push((module, path));
        }
    }
    out
}

/// Each edge that lies on a circle, as `a → b`, sorted.
fn circles(files: &[(Module, String)]) -> Vec<String> {
    let known: BTreeSet<&Module> = files.iter().map(|(m, _)| m).collect();
    let mut edges: BTreeMap<&Module, BTreeSet<&Module>> = BTreeMap::new();
    for (me, text) in files {
        let file = syn::parse_file(text).unwrap_or_else(|e| panic!("{}: {e}", me.join("::")));
        let mut paths = Paths {
            me,
            found: Vec::new(),
            keep_external: false,
        };
        paths.visit_file(&file);
        let targets = edges.entry(me).or_default();
        for path in paths.found {
            // The longest prefix that is a file's module.
            if let Some(target) = (0..=path.len())
                .rev()
                .find_map(|n| known.get(&path[..n].to_vec()).copied())
                && target != me
            {
                targets.insert(target);
            }
        }
    }
    let reaches = |from: &Module, to: &Module| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from];
        while let Some(m) = stack.pop() {
            if m == to {
                return true;
            }
            if seen.insert(m) {
                stack.extend(edges.get(m).into_iter().flatten().copied());
            }
        }
        false
    };
    let name = |m: &Module| {
        if m.is_empty() {
            "(root)".to_owned()
        } else {
            m.join("::")
        }
    };
    let mut out = Vec::new();
    for (a, targets) in &edges {
        for b in targets {
            if reaches(b, a) {
                out.push(format!("{} → {}", name(a), name(b)));
            }
        }
    }
    out
}

/// Collects the crate-relative paths a file names, resolved to absolute
/// module paths, outside `#[cfg(test)]` items.
struct Paths<'a> {
    me: &'a Module,
    found: Vec<Module>,
    /// Also keep paths that start at another crate, as written.
    keep_external: bool,
}

impl Paths<'_> {
    /// `segments` (starting at `crate`, `self` or `super`) from this file.
    fn resolve(&mut self, segments: &[String]) {
        let Some(first) = segments.first() else {
            return;
        };
        let mut at: Module = match first.as_str() {
            "crate" => Vec::new(),
            "self" | "super" => self.me.clone(),
            _ => {
                if self.keep_external {
                    self.found.push(segments.to_vec());
                }
                return;
            }
        };
        let mut rest = segments;
        if first == "crate" {
            rest = &rest[1..];
        }
        while let Some(s) = rest.first() {
            match s.as_str() {
                "self" => {}
                "super" => {
                    at.pop();
                }
                _ => break,
            }
            rest = &rest[1..];
        }
        at.extend(rest.iter().cloned());
        self.found.push(at);
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                prefix.push(n.ident.to_string());
                self.resolve(&prefix.clone());
                prefix.pop();
            }
            syn::UseTree::Rename(r) => {
                prefix.push(r.ident.to_string());
                self.resolve(&prefix.clone());
                prefix.pop();
            }
            syn::UseTree::Glob(_) => self.resolve(&prefix.clone()),
            syn::UseTree::Group(g) => {
                for item in &g.items {
                    self.use_tree(prefix, item);
                }
            }
        }
    }
}

fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.meta.require_list().is_ok_and(|list| {
                // `cfg(test)`, `cfg(all(test, …))`; not `cfg(not(test))`.
                let words = list.tokens.to_string();
                words == "test"
                    || (words.starts_with("all")
                        && words.contains("test")
                        && !words.contains("not"))
            })
    })
}

impl<'ast> Visit<'ast> for Paths<'_> {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let attrs = match item {
            syn::Item::Mod(i) => &i.attrs,
            syn::Item::Fn(i) => &i.attrs,
            syn::Item::Impl(i) => &i.attrs,
            syn::Item::Use(i) => &i.attrs,
            syn::Item::Struct(i) => &i.attrs,
            syn::Item::Enum(i) => &i.attrs,
            syn::Item::Const(i) => &i.attrs,
            syn::Item::Static(i) => &i.attrs,
            syn::Item::Trait(i) => &i.attrs,
            _ => return syn::visit::visit_item(self, item),
        };
        if !is_test(attrs) {
            syn::visit::visit_item(self, item);
        }
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if !is_test(&f.attrs) {
            syn::visit::visit_impl_item_fn(self, f);
        }
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        self.use_tree(&mut Vec::new(), &item.tree);
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        self.resolve(&segments);
        syn::visit::visit_path(self, path);
    }

    // `pub(super)`, `pub(in crate::x)`: who may see an item, not a use.
    fn visit_vis_restricted(&mut self, _: &'ast syn::VisRestricted) {}
}

/// Every Markdown file of the repository (README, ARCHITECTURE,
/// BENCHMARKS, the guide and `docs/architecture/`, `samples/`, any other):
/// each relative link leads to a file or folder that is there, and each
/// `#anchor` into a Markdown file names one of its headings, as GitHub
/// makes their ids. Moving a page or renaming a heading breaks a link
/// here, not in a reader's browser.
#[test]
fn every_markdown_link_leads_to_a_file_and_every_anchor_to_a_heading() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("cli sits in the workspace");
    let pages: BTreeMap<PathBuf, String> = markdown_files(root)
        .into_iter()
        .map(|rel| {
            let text = std::fs::read_to_string(root.join(&rel))
                .unwrap_or_else(|e| panic!("{}: {e}", rel.display()));
            (rel, text)
        })
        .collect();
    for page in ["README.md", "ARCHITECTURE.md", "BENCHMARKS.md"] {
        assert!(
            pages.contains_key(Path::new(page)),
            "{page} is among the Markdown files read: {:?}",
            pages.keys().collect::<Vec<_>>()
        );
    }
    let (broken, links) = broken_links(&pages, |rel| root.join(rel).exists());
    // The map alone links every topic page: a checker that stopped
    // finding links would pass with none.
    assert!(links >= 30, "only {links} relative links found");
    assert!(
        broken.is_empty(),
        "Markdown links that lead nowhere:\n{}",
        broken.join("\n")
    );
}

/// The link check finds a link to a missing file and an anchor to a
/// missing heading, and passes links that resolve: across folders, to a
/// heading by GitHub's id, to the same page, to a folder, and ignores
/// code and web addresses.
#[test]
fn the_link_check_finds_missing_files_and_missing_headings() {
    let pages: BTreeMap<PathBuf, String> = [
        (
            "README.md",
            "# Top\n\
             See [the guide](docs/guide.md), [its flags](docs/guide.md#the---gpus-flag-gpun),\n\
             [again](docs/guide.md#notes-1), [a folder](docs/), [top](#top),\n\
             [the web](https://example.org/x.md), `[code](nowhere.md)`,\n\
             [gone](docs/missing.md), [no such heading](docs/guide.md#flags).\n\
             ```\n[in a block](nowhere.md)\n```\n",
        ),
        (
            "docs/guide.md",
            "# The `--gpus` flag (`gpu:N`)\n## Notes\n## Notes\n\
             Back to [the readme](../README.md#top) and [the map](../ARCHITECTURE.md).\n\
             [defined]: ../samples/cat.jpg\n",
        ),
    ]
    .into_iter()
    .map(|(p, t)| (PathBuf::from(p), t.to_owned()))
    .collect();
    let others = ["docs", "samples/cat.jpg"];
    let exists = |rel: &Path| pages.contains_key(rel) || others.iter().any(|o| Path::new(o) == rel);
    let (broken, links) = broken_links(&pages, exists);
    assert_eq!(
        broken,
        [
            "README.md:5: docs/missing.md: no such file",
            "README.md:5: docs/guide.md#flags: no heading `flags` in docs/guide.md",
            "docs/guide.md:4: ../ARCHITECTURE.md: no such file",
        ]
    );
    assert_eq!(links, 10);
}

#[test]
fn headings_become_githubs_ids() {
    let ids = heading_ids(
        "# The life of one image\n\
         ## `pipeline bench` in depth\n\
         ### Loader after Pillow 13's pass order (2026-11-26, #39)\n\
         ## [Linked](x.md) and **bold**: a_b, c—d × e\n\
         ## Notes\n## Notes\n#not-a-heading\n\
         ```\n# in a block\n```\n",
    );
    let expected = [
        "the-life-of-one-image",
        "pipeline-bench-in-depth",
        "loader-after-pillow-13s-pass-order-2026-11-26-39",
        "linked-and-bold-a_b-cd--e",
        "notes",
        "notes-1",
    ];
    assert_eq!(
        ids,
        expected
            .iter()
            .map(|s| (*s).to_owned())
            .collect::<BTreeSet<_>>()
    );
}

/// Every `.md` file under `root`, relative to it, skipping build outputs
/// (`target/`) and hidden folders (`.git/`).
fn markdown_files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.expect("a readable folder entry").path();
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if name.starts_with('.') || name == "target" {
                continue;
            }
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                let rel = path.strip_prefix(root).expect("under the root");
                out.push(rel.to_path_buf());
            }
        }
    }
    out.sort();
    out
}

/// Each relative link of `pages` (path from the repository root → text)
/// that leads nowhere, as `page:line: target: why`, and how many relative
/// links there were. `exists` says whether a path from the root is a file
/// or folder; anchors are checked in the Markdown files of `pages`.
fn broken_links(
    pages: &BTreeMap<PathBuf, String>,
    exists: impl Fn(&Path) -> bool,
) -> (Vec<String>, usize) {
    let ids: BTreeMap<&PathBuf, BTreeSet<String>> = pages
        .iter()
        .map(|(page, text)| (page, heading_ids(text)))
        .collect();
    let mut broken = Vec::new();
    let mut count = 0;
    for (page, text) in pages {
        let dir = page.parent().unwrap_or(Path::new(""));
        for (line, target) in link_targets(text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            count += 1;
            let (file, anchor) = match target.split_once('#') {
                Some((file, anchor)) => (file, Some(anchor)),
                None => (target.as_str(), None),
            };
            let at = format!("{}:{line}: {target}", page.display());
            let resolved = if file.is_empty() {
                Some(page.clone())
            } else {
                normalise(&dir.join(percent_decoded(file)))
            };
            let Some(resolved) = resolved.filter(|r| r == page || exists(r)) else {
                broken.push(format!("{at}: no such file"));
                continue;
            };
            let Some(anchor) = anchor.filter(|_| resolved.extension().is_some_and(|e| e == "md"))
            else {
                continue;
            };
            let anchor = percent_decoded(anchor);
            match ids.get(&resolved) {
                Some(known) if known.contains(&anchor) => {}
                Some(_) => broken.push(format!(
                    "{at}: no heading `{anchor}` in {}",
                    resolved.display()
                )),
                None => broken.push(format!(
                    "{at}: an anchor into {}, which is not among the pages read",
                    resolved.display()
                )),
            }
        }
    }
    (broken, count)
}

/// `path` with `.` and `..` taken out; `None` if it climbs above the root.
fn normalise(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            std::path::Component::Normal(name) => out.push(name),
            // An absolute path is no relative link.
            std::path::Component::RootDir | std::path::Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

/// `%20` and its kind as the bytes they stand for.
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The lines of `text` outside fenced code blocks (```` ``` ```` or
/// `~~~`), numbered from 1.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fence: Option<String> = None;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let marker: String = line
            .trim_start()
            .chars()
            .take_while(|c| *c == '`' || *c == '~')
            .collect();
        if marker.len() >= 3 {
            match &fence {
                Some(open) if marker.starts_with(open.as_str()) => fence = None,
                Some(_) => {}
                None => fence = Some(marker),
            }
            continue;
        }
        if fence.is_none() {
            out.push((i + 1, line));
        }
    }
    out
}

/// `line` with each inline code span (`` `x` ``) replaced by its text
/// without the backticks, or with `blank`, by spaces: a heading keeps the
/// words, and a `[link](in code)` is not read.
fn code_spans(line: &str, blank: bool) -> String {
    let chars: Vec<char> = line.chars().collect();
    let mut out = String::with_capacity(line.len());
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '`' {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let run = chars[i..].iter().take_while(|c| **c == '`').count();
        // The closing run of the same length.
        let close = (i + run..chars.len()).find(|&j| {
            chars[j - 1] != '`' && chars[j..].iter().take_while(|c| **c == '`').count() == run
        });
        match close {
            Some(j) => {
                for c in &chars[i + run..j] {
                    out.push(if blank { ' ' } else { *c });
                }
                i = j + run;
            }
            None => {
                out.extend(&chars[i..i + run]);
                i += run;
            }
        }
    }
    out
}

/// The target of every inline link and image (`[text](target "title")`)
/// and every reference definition (`[name]: target`) outside code, with
/// its line.
fn link_targets(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (line, raw) in prose_lines(text) {
        let prose = code_spans(raw, true);
        let trimmed = prose.trim_start();
        if trimmed.starts_with('[')
            && let Some((_, target)) = trimmed.split_once("]: ")
            && !trimmed.starts_with("[^")
        {
            if let Some(target) = target.split_whitespace().next() {
                out.push((line, target.trim_matches(['<', '>']).to_owned()));
            }
            continue;
        }
        let mut rest = prose.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let end = after.find(')').unwrap_or(after.len());
            let inside = after[..end].trim();
            let target = match inside.strip_prefix('<') {
                Some(angled) => angled.split('>').next().unwrap_or_default(),
                None => inside.split_whitespace().next().unwrap_or_default(),
            };
            if !target.is_empty() {
                out.push((line, target.to_owned()));
            }
            rest = &after[end..];
        }
    }
    out
}

/// The ids GitHub gives the headings of a Markdown text: the heading's
/// text (a link's words, code without its backticks) lower-cased, each
/// space a `-`, every other character but letters, digits, `-` and `_`
/// dropped; a repeated id gets `-1`, `-2`, …. Also the `id`s and `name`s of
/// HTML anchors.
fn heading_ids(text: &str) -> BTreeSet<String> {
    let mut ids = BTreeSet::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for (_, line) in prose_lines(text) {
        let trimmed = line.trim_start();
        for attr in ["id=\"", "name=\""] {
            let mut rest = line;
            while let Some(at) = rest.find("<a ") {
                rest = &rest[at + 3..];
                let tag = &rest[..rest.find('>').unwrap_or(rest.len())];
                if let Some(value) = tag.split(attr).nth(1).and_then(|v| v.split('"').next()) {
                    ids.insert(value.to_owned());
                }
            }
        }
        if line.len() - trimmed.len() > 3 {
            continue;
        }
        let hashes = trimmed.chars().take_while(|c| *c == '#').count();
        let rest = &trimmed[hashes..];
        if !(1..=6).contains(&hashes) || !(rest.is_empty() || rest.starts_with([' ', '\t'])) {
            continue;
        }
        let title = rest.trim().trim_end_matches('#').trim_end();
        let slug = slug(&link_words(&code_spans(title, false)));
        let id = match seen.get_mut(&slug) {
            Some(n) => {
                *n += 1;
                format!("{slug}-{n}")
            }
            None => {
                seen.insert(slug.clone(), 0);
                slug
            }
        };
        ids.insert(id);
    }
    ids
}

/// `[words](target)` as its words.
fn link_words(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(open) = rest.find('[') {
        let Some(close) = rest[open..].find("](").map(|c| open + c) else {
            break;
        };
        let Some(end) = rest[close..].find(')').map(|e| close + e) else {
            break;
        };
        out.push_str(rest[..open].trim_end_matches('!'));
        out.push_str(&rest[open + 1..close]);
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

/// GitHub's id for a heading's text.
fn slug(title: &str) -> String {
    title
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .collect()
}
