//! The process's resident memory, for `INFO memory`: Redis clients and dashboards read
//! `used_memory` from there, and a figure from the kernel is the honest one for a process
//! whose memory is mostly the storage engine's caches and buffers.

/// Resident set size of this process in bytes, from `/proc/self/status` (`VmRSS`, in kB);
/// `None` where there is no such file (not Linux).
pub(crate) fn resident_bytes() -> Option<u64> {
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

/// Bytes as Redis's `*_human` fields show them (`1.50M`).
pub(crate) fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "K", "M", "G", "T"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes}B")
    } else {
        format!("{value:.2}{}", UNITS[unit])
    }
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
        assert_eq!(human(512), "512B");
        assert_eq!(human(1536 * 1024), "1.50M");
    }
}
