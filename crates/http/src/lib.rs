//! Trireme's HTTP front end.
//!
//! - `/v1/kv/<key>`: the Consul KV API (GET with `raw`, `recurse`, `keys`, `separator`,
//!   `consistent`, `stale`, and blocking with `index` and `wait`; PUT with `flags` and `cas`; DELETE with `recurse` and `cas`), so
//!   Consul's client libraries work unchanged;
//! - `/v0/{collection}/{key}`: JSON documents (Orchestrate-style) in the same keyspace, with
//!   `If-Match` / `If-None-Match`, collection listing and search;
//! - `/v1/status/leader`, `/v1/status/peers`, `/v1/cluster/shards`, `/v1/health`, `/metrics`;
//! - `/ui`: the web console, its assets built in, and the `/v1/ui/...` JSON it reads.
//!
//! Every error is a JSON body `{"error": ..., "code": ...}` with the status from
//! [`trireme_types::ErrorCode::http_status`].
#![deny(missing_docs)]
#![deny(clippy::unwrap_used)]
#![cfg_attr(test, allow(clippy::unwrap_used))]

mod access;
mod blocking;
mod error;
mod figures;
mod query;
mod routes;
mod server;
mod state;
mod timing;
mod usage;

pub use error::ApiError;
pub use figures::{Buckets, spawn_figures};
/// Query-string parsing, public for the fuzz target `fuzz/fuzz_targets/http_query.rs`.
pub use query::Query;
pub use server::{HttpOptions, router, serve};
pub use state::{AppState, HttpMetrics};
