//! The Redis (RESP2) front end of Trireme.
//!
//! This crate turns bytes from a Redis client into requests and replies back into bytes.
//! [`codec`] decodes requests (arrays of bulk strings and inline commands) with caps on
//! every length and without rescanning partial input, [`reply`] encodes replies straight
//! into a `BytesMut`, and [`args`] walks a decoded request with Redis's parsing rules and
//! error texts, so every command reads its arguments the same way.
//!
//! Above those, [`RespServer`] accepts connections, `connection` runs one client (pipelined
//! requests are answered in order, replies batched into one write), and `cmd` holds one module
//! per command family, each parsing its arguments and calling the node's router. What a
//! command may read and change besides its arguments lives in `state` (the connection's
//! state, and what all connections share), and the counters in `metrics`, so the modules
//! depend one way: `server` → `connection` → `cmd` → `state`.

#![deny(missing_docs)]
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

pub mod args;
mod cmd;
pub mod codec;
mod connection;
mod glob;
mod memory;
mod metrics;
mod pubsub;
pub mod reply;
mod server;
mod state;

pub use args::{ArgError, Args};
pub use codec::{CodecLimits, ProtocolError, RespCodec};
pub use metrics::RespMetrics;
pub use reply::{Protocol, Reply};
pub use server::RespServer;
