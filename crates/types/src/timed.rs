//! [`Timed`]: how many times a step ran and how long it took in total, for `/metrics`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A count of occurrences and their summed duration, both only ever growing (Prometheus
/// counters). Their ratio over an interval is the mean duration in that interval, which is
/// how the write path's steps are compared (`bench/set-cost.sh` prints them per entry).
#[derive(Debug, Default)]
pub struct Timed {
    count: AtomicU64,
    micros: AtomicU64,
}

impl Timed {
    /// Counts one occurrence that took `took`.
    pub fn record(&self, took: Duration) {
        self.record_many(1, took);
    }

    /// Counts `count` occurrences that took `took` together.
    pub fn record_many(&self, count: u64, took: Duration) {
        self.count.fetch_add(count, Ordering::Relaxed);
        self.micros
            .fetch_add(took.as_micros() as u64, Ordering::Relaxed);
    }

    /// Occurrences so far.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Their total duration so far, microseconds.
    pub fn micros(&self) -> u64 {
        self.micros.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_durations_add_up() {
        let timed = Timed::default();
        timed.record(Duration::from_micros(250));
        timed.record_many(3, Duration::from_millis(2));
        assert_eq!(timed.count(), 4);
        assert_eq!(timed.micros(), 2_250);
    }
}
