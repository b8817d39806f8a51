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
