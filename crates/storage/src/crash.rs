//! Crash points: places on the write path where a test can make the process abort, to check
//! that a crash between any two steps (append, sync, apply, flush, snapshot, purge; a
//! transaction's prepare, commit and resolve) loses no acknowledged write, applies no entry
//! twice and leaves no transaction half done.
//!
//! Armed by the environment only: `TRIREME_CRASH_AT=NAME:N` aborts the process the `N`th
//! time the write path passes point `NAME` (one of [`POINTS`]). Unset, a point costs one
//! load of an initialized `OnceLock`.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// The environment variable that arms a crash point.
pub const VARIABLE: &str = "TRIREME_CRASH_AT";

/// Every crash point, in the order an entry passes them.
pub const POINTS: [&str; 9] = [
    // A log append is written to the log store but not synced.
    "log-written",
    // The log store's fdatasync returned; no flush callback has fired yet.
    "log-synced",
    // A batch of committed entries is written to the rows; no client has its answer yet.
    "applied",
    // Memtables were flushed to synced tables; the flush's callers do not know yet.
    "data-flushed",
    // A snapshot is built and saved; openraft does not know it yet, nor purged the log.
    "snapshot-saved",
    // A log was purged up to a snapshot.
    "log-purged",
    // A transaction across shards is prepared in every shard; its coordinator has not
    // decided it yet.
    "txn-prepared",
    // A transaction across shards is committed in its record; no shard has resolved it yet.
    "txn-committed",
    // A committed transaction's client may have its answer; its resolutions are about to go
    // to the shards, and its record is not forgotten.
    "txn-resolving",
];

struct Armed {
    name: String,
    at: u64,
    passed: AtomicU64,
}

fn armed() -> Option<&'static Armed> {
    static ARMED: OnceLock<Option<Armed>> = OnceLock::new();
    ARMED
        .get_or_init(|| {
            let value = std::env::var(VARIABLE).ok()?;
            let (name, at) = value.rsplit_once(':')?;
            let at = at.parse().ok()?;
            if !POINTS.contains(&name) {
                eprintln!("{VARIABLE}: no crash point {name:?}; known: {POINTS:?}");
                return None;
            }
            Some(Armed {
                name: name.to_string(),
                at,
                passed: AtomicU64::new(0),
            })
        })
        .as_ref()
}

/// Passes crash point `name`: aborts the process if it is armed and this is its turn.
pub fn point(name: &'static str) {
    if let Some(armed) = armed()
        && armed.name == name
        && armed.passed.fetch_add(1, Ordering::SeqCst) + 1 == armed.at
    {
        eprintln!("crash point {name} reached (pass {}): aborting", armed.at);
        std::process::abort();
    }
}
