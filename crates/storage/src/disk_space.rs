//! The free space on the data directory's file system, so that writes stop while some is
//! left: a log append or a table flush that meets a full disk fails the node's storage (it
//! then refuses every write until restarted), whereas a write refused before it is proposed
//! costs nothing and is tried again by the client. Reads, and everything already in the log,
//! go on; writes resume by themselves once space is freed.
//!
//! The file system is asked at most every [`RECHECK`]: a `statvfs` per write would cost
//! more than the check is worth, and the reserve covers what a tenth of a second can write.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long a measurement of the free space stands.
const RECHECK: Duration = Duration::from_millis(100);

/// Why a write is refused: the free space is below the reserve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskFull {
    /// Bytes free for this process's files when last measured.
    pub free_bytes: u64,
    /// Bytes the node keeps free (`[storage] min_free_bytes`).
    pub reserve_bytes: u64,
}

impl std::fmt::Display for DiskFull {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const MIB: u64 = 1024 * 1024;
        write!(
            f,
            "disk full: {} MiB free, below the {} MiB this node keeps free for its log and \
             tables ([storage] min_free_bytes); writes resume once space is freed",
            self.free_bytes / MIB,
            self.reserve_bytes / MIB
        )
    }
}

/// The free space of one directory's file system, measured at most every [`RECHECK`].
#[derive(Debug)]
pub(crate) struct DiskSpace {
    dir: PathBuf,
    reserve: u64,
    opened: Instant,
    /// Bytes free at the last measurement (`u64::MAX` when it failed: a file system that
    /// cannot say is not taken for a full one).
    free: AtomicU64,
    /// When it was taken, in milliseconds since `opened`, plus one (0: never).
    measured_at: AtomicU64,
}

impl DiskSpace {
    /// Watches `dir`'s file system, keeping `reserve` bytes free (0: never refuses).
    pub(crate) fn new(dir: PathBuf, reserve: u64) -> Self {
        DiskSpace {
            dir,
            reserve,
            opened: Instant::now(),
            free: AtomicU64::new(u64::MAX),
            measured_at: AtomicU64::new(0),
        }
    }

    /// `Err` while less than the reserve is free.
    pub(crate) fn check(&self) -> Result<(), DiskFull> {
        self.check_room(0)
    }

    /// `Err` while less than the reserve and `incoming` more bytes is free (with the check
    /// off, never).
    pub(crate) fn check_room(&self, incoming: u64) -> Result<(), DiskFull> {
        if self.reserve == 0 {
            return Ok(());
        }
        let free = self.free_bytes();
        if free < self.reserve.saturating_add(incoming) {
            Err(DiskFull {
                free_bytes: free,
                reserve_bytes: self.reserve,
            })
        } else {
            Ok(())
        }
    }

    /// Bytes free as last measured; measures again when that is older than [`RECHECK`].
    /// One caller measures, the others take the figure that stands.
    pub(crate) fn free_bytes(&self) -> u64 {
        let now = self.opened.elapsed().as_millis() as u64 + 1;
        let last = self.measured_at.load(Ordering::Acquire);
        let stale = last == 0 || now.saturating_sub(last) >= RECHECK.as_millis() as u64;
        if stale
            && self
                .measured_at
                .compare_exchange(last, now, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            self.free.store(self.measure(), Ordering::Release);
        }
        self.free.load(Ordering::Acquire)
    }

    fn measure(&self) -> u64 {
        match rustix::fs::statvfs(&self.dir) {
            Ok(stats) => stats.f_bavail.saturating_mul(stats.f_frsize),
            Err(e) => {
                tracing::warn!(dir = %self.dir.display(), error = %e, "cannot measure the free disk space");
                u64::MAX
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reserve_above_the_free_space_refuses_and_zero_never_does() {
        let dir = tempfile::tempdir().unwrap();
        let free = DiskSpace::new(dir.path().into(), 1).free_bytes();
        assert!(free > 0 && free < u64::MAX, "{free}");
        let full = DiskSpace::new(dir.path().into(), u64::MAX - 1);
        let refused = full.check().unwrap_err();
        assert_eq!(refused.reserve_bytes, u64::MAX - 1);
        assert!(refused.to_string().starts_with("disk full: "), "{refused}");
        assert_eq!(DiskSpace::new(dir.path().into(), 0).check(), Ok(()));
        assert_eq!(DiskSpace::new(dir.path().into(), 1).check(), Ok(()));
    }
}
