//! Query-string parsing for the Consul API: flags (`?recurse`), numbers (`?cas=12`) and
//! strings (`?separator=/`), with a clear error naming the parameter on a bad value.

use crate::ApiError;
use std::collections::HashMap;

/// Parsed query parameters. A parameter given without a value (`?raw`) is present with "".
#[derive(Debug, Default)]
pub struct Query {
    params: HashMap<String, String>,
}

impl Query {
    /// Parses a raw query string (`None` when the URL has none).
    pub fn parse(raw: Option<&str>) -> Self {
        let params = raw
            .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
            .unwrap_or_default();
        Self { params }
    }

    /// Whether a flag is present. As in Consul, only presence counts, not the value:
    /// `?recurse`, `?recurse=1` and `?keys=True` (what py-consul sends) all set it.
    pub fn flag(&self, name: &str) -> Result<bool, ApiError> {
        Ok(self.params.contains_key(name))
    }

    /// An unsigned integer parameter.
    pub fn u64(&self, name: &str) -> Result<Option<u64>, ApiError> {
        match self.params.get(name) {
            None => Ok(None),
            Some(v) => v.parse::<u64>().map(Some).map_err(|_| {
                ApiError::invalid(format!(
                    "invalid value {v:?} for ?{name}: expected an unsigned integer"
                ))
            }),
        }
    }

    /// A string parameter.
    pub fn str(&self, name: &str) -> Option<&str> {
        self.params.get(name).map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_flags_numbers_and_strings() {
        let q = Query::parse(Some("recurse&cas=12&separator=%2F&keys=True&flags=-1"));
        assert!(q.flag("recurse").unwrap());
        assert!(
            q.flag("keys").unwrap(),
            "presence counts, whatever the value"
        );
        assert!(!q.flag("consistent").unwrap());
        assert_eq!(q.u64("cas").unwrap(), Some(12));
        assert_eq!(q.u64("missing").unwrap(), None);
        assert_eq!(q.str("separator"), Some("/"));
        let err = q.u64("flags").unwrap_err();
        assert!(err.0.message.contains("?flags"), "{}", err.0.message);
    }
}
