//! Benchmark areas.

pub(crate) mod loader;
