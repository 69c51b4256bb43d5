//! The loader's integration tests, one binary: each module was a test
//! binary of its own, and each of those linked the whole dependency tree
//! again. Gathered, they link once; they still run in parallel, as the
//! tests inside one binary always did. Test names carry their module
//! (`pillow_exact::…`).

mod config_crops;
mod fuzz_found;
mod outside_world;
mod pillow_corpus;
mod pillow_exact;
mod truncation;
mod upstream_crops;
