//! One module per family of endpoints.

pub(crate) mod kv;
pub(crate) mod metrics;
pub(crate) mod status;
