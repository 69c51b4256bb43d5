//! Benchmark areas.

pub(crate) mod coordinator;
pub(crate) mod loader;
pub(crate) mod model;
