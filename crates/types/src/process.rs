//! Facts about this process that several front ends report: its resident memory, for Redis's
//! `INFO memory` and the web console alike. A figure from the kernel is the honest one for a
//! process whose memory is mostly the storage engine's caches and buffers.

/// Resident set size of this process in bytes, from `/proc/self/status` (`VmRSS`, in kB);
/// `None` where there is no such file (not Linux).
pub fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_vm_rss(&status)
}

fn parse_vm_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line
        .trim_start_matches("VmRSS:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    kb.checked_mul(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rss_is_read_from_the_status_file() {
        let status = "Name:\ttrireme\nVmPeak:\t  9000 kB\nVmRSS:\t    1536 kB\nThreads:\t4\n";
        assert_eq!(parse_vm_rss(status), Some(1536 * 1024));
        assert_eq!(parse_vm_rss("Name:\tx\n"), None);
        if cfg!(target_os = "linux") {
            assert!(resident_bytes().is_some_and(|b| b > 0));
        }
    }
}
