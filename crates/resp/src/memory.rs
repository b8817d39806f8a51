//! The process's resident memory, for `INFO memory`: Redis clients and dashboards read
//! `used_memory` from there. The figure itself comes from [`trireme_types::process`], which
//! the web console reads too.

pub(crate) use trireme_types::process::resident_bytes;

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
    fn sizes_read_as_redis_shows_them() {
        assert_eq!(human(512), "512B");
        assert_eq!(human(1536 * 1024), "1.50M");
    }
}
