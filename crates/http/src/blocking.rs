//! The parameters of a Consul blocking query: `?index=N&wait=D`.
//!
//! As in Consul: `wait` is a Go duration (`10s`, `1m30s`, `250ms`), 5 minutes when absent and
//! at most 10 minutes (a longer one is cut to 10, not refused), plus a random jitter of up to a
//! sixteenth of it so that many watchers set up together do not all return together. An index
//! of 0 (or none) does not block.

use crate::ApiError;
use crate::query::Query;
use std::time::Duration;
use trireme_cluster::Blocking;

/// Wait when the request names none.
pub(crate) const DEFAULT_WAIT: Duration = Duration::from_secs(5 * 60);

/// Longest wait a request may ask for.
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(10 * 60);

/// The blocking query the request asks for, if any.
pub(crate) fn blocking(query: &Query) -> Result<Option<Blocking>, ApiError> {
    let min_index = query
        .str("index")
        .map(|raw| {
            raw.parse::<u64>().map_err(|_| {
                ApiError::invalid(format!(
                    "Invalid index {raw:?}: expected an unsigned integer"
                ))
            })
        })
        .transpose()?;
    let wait = match query.str("wait") {
        Some(raw) => parse_go_duration(raw).ok_or_else(|| {
            ApiError::invalid(format!(
                "Invalid wait time {raw:?}: expected a duration such as 10s or 5m"
            ))
        })?,
        None => DEFAULT_WAIT,
    };
    let Some(min_index) = min_index.filter(|i| *i > 0) else {
        return Ok(None);
    };
    let wait = wait.min(MAX_WAIT);
    Ok(Some(Blocking {
        min_index,
        wait: wait + jitter(wait / 16),
    }))
}

/// A random duration below `most`.
fn jitter(most: Duration) -> Duration {
    let nanos = u64::try_from(most.as_nanos()).unwrap_or(u64::MAX);
    if nanos == 0 {
        return Duration::ZERO;
    }
    Duration::from_nanos(rand::random_range(0..nanos))
}

/// Parses a duration as Go's `time.ParseDuration` does (unsigned): one or more decimal numbers,
/// each with a unit among `ns`, `us`, `µs`, `ms`, `s`, `m`, `h`; or a bare `0`.
pub(crate) fn parse_go_duration(text: &str) -> Option<Duration> {
    if text == "0" {
        return Some(Duration::ZERO);
    }
    let mut rest = text;
    let mut total = 0f64;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number = &rest[..number_len];
        if number.is_empty() || number == "." {
            return None;
        }
        let value: f64 = number.parse().ok()?;
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let nanos_per = match &rest[..unit_len] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total += value * nanos_per;
    }
    // Longer than any limit a caller checks against (about 31 years).
    Some(Duration::from_nanos(total.min(1e18) as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_parse_like_go() {
        let ms = Duration::from_millis;
        assert_eq!(parse_go_duration("10s"), Some(ms(10_000)));
        assert_eq!(parse_go_duration("1m30s"), Some(ms(90_000)));
        assert_eq!(parse_go_duration("250ms"), Some(ms(250)));
        assert_eq!(parse_go_duration("1.5h"), Some(ms(5_400_000)));
        assert_eq!(parse_go_duration("0"), Some(Duration::ZERO));
        for bad in ["", "10", "s", "5x", "-1s", "1..2s", "ten seconds"] {
            assert_eq!(parse_go_duration(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn blocking_needs_an_index_and_caps_the_wait() {
        let parse = |q: &str| blocking(&Query::parse(Some(q)));
        assert_eq!(parse("recurse").unwrap(), None);
        assert_eq!(parse("index=0&wait=5s").unwrap(), None);
        let b = parse("index=7&wait=16s").unwrap().unwrap();
        assert_eq!(b.min_index, 7);
        assert!(b.wait >= Duration::from_secs(16) && b.wait < Duration::from_secs(17));
        let b = parse("index=7&wait=1h").unwrap().unwrap();
        assert!(b.wait >= MAX_WAIT && b.wait < MAX_WAIT + MAX_WAIT / 16);
        let b = parse("index=7").unwrap().unwrap();
        assert!(b.wait >= DEFAULT_WAIT);
        assert!(
            parse("index=x")
                .unwrap_err()
                .0
                .message
                .contains("Invalid index")
        );
        assert!(
            parse("index=1&wait=5")
                .unwrap_err()
                .0
                .message
                .contains("Invalid wait")
        );
    }
}
