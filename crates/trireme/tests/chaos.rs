//! The chaos runs (`t90_chaos.rs`), a test binary of their own. Each run wants the machine's
//! two cores, and cargo runs test binaries one after another: in this binary, nothing of
//! another area shares the machine with them.

mod common;
mod t90_chaos;
