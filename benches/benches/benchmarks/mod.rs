//! Benchmark areas.

pub(crate) mod loader;
pub(crate) mod model;
