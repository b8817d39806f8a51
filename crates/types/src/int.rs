//! Integers written as text, parsed with Redis's rules, so that `INCR` on a stored value and an
//! integer argument accept exactly the same strings.

/// Parses an unsigned decimal integer as Redis's `string2ll` would, without a sign:
/// ASCII digits only, no leading zeros (except `"0"` itself), no spaces, no `+`, and the
/// value must fit in a `u64`.
pub fn parse_u64(text: &[u8]) -> Option<u64> {
    match text {
        [b'0'] => Some(0),
        [b'1'..=b'9', ..] => text.iter().try_fold(0u64, |acc, &byte| {
            if !byte.is_ascii_digit() {
                return None;
            }
            acc.checked_mul(10)?.checked_add(u64::from(byte - b'0'))
        }),
        _ => None,
    }
}

/// Parses a signed decimal integer as Redis's `string2ll` does: an optional leading `-`,
/// then digits without leading zeros (`"0"` is allowed, `"-0"` is not), no spaces, no
/// `+`, and the value must fit in an `i64`.
pub fn parse_i64(text: &[u8]) -> Option<i64> {
    match text.split_first() {
        Some((b'-', digits)) => match parse_u64(digits)? {
            0 => None,
            magnitude => 0i64.checked_sub_unsigned(magnitude),
        },
        _ => i64::try_from(parse_u64(text)?).ok(),
    }
}

/// Parses a decimal floating-point number as Redis's `string2ld` accepts one: no spaces,
/// not empty, not NaN; exponents and `inf` are allowed. Used for `INCRBYFLOAT`'s argument
/// and for the value it adds to, so both accept the same strings.
pub fn parse_f64(text: &[u8]) -> Option<f64> {
    if text.is_empty() || text.len() > 5120 || text.iter().any(u8::is_ascii_whitespace) {
        return None;
    }
    let value: f64 = std::str::from_utf8(text).ok()?.parse().ok()?;
    (!value.is_nan()).then_some(value)
}

/// Prints a float as `INCRBYFLOAT` stores it: plain decimal notation (no exponent), no
/// trailing zeros. A whole number prints exactly (large counters keep every digit); any other
/// value is rounded to 15 significant digits first, so that sums such as 0.1 + 0.2 print as
/// `0.3`, as Redis (which computes in 80-bit long doubles) prints them.
pub fn format_f64(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e21 {
        let text = format!("{value:.0}");
        return if text == "-0" { "0".to_string() } else { text };
    }
    let rounded: f64 = format!("{value:.14e}").parse().unwrap_or(value);
    let text = format!("{rounded}");
    if text == "-0" { "0".to_string() } else { text }
}

#[cfg(test)]
mod float_tests {
    use super::*;

    #[test]
    fn floats_parse_as_redis_accepts_them() {
        assert_eq!(parse_f64(b"10.5"), Some(10.5));
        assert_eq!(parse_f64(b"5.0e3"), Some(5000.0));
        assert_eq!(parse_f64(b"-inf"), Some(f64::NEG_INFINITY));
        for bad in [&b""[..], b" 1", b"1 ", b"abc", b"nan", b"1.2.3"] {
            assert_eq!(parse_f64(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn floats_print_as_incrbyfloat_stores_them() {
        assert_eq!(format_f64(0.1 + 0.2), "0.3");
        assert_eq!(format_f64(10.5 + 0.1), "10.6");
        assert_eq!(format_f64(5000.0), "5000");
        assert_eq!(format_f64(1e20), "100000000000000000000");
        assert_eq!(format_f64(-0.0), "0");
        assert_eq!(format_f64(3.0e-5), "0.00003");
        // Whole numbers keep every digit f64 holds, as Redis's long doubles do.
        assert_eq!(format_f64(12345678901234567.0 + 1.0), "12345678901234568");
        assert_eq!(format_f64(-7.0), "-7");
    }
}
