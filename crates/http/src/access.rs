//! Who a request runs as: the ACL token it carries, resolved once when it arrives.
//!
//! Consul's clients send the token in `X-Consul-Token` (or `?token=`); others use
//! `Authorization: Bearer`, and Trireme's own tools `X-Trireme-Token`. Several different
//! tokens in one request are refused rather than guessed between. Handlers take an
//! [`Access`] and ask it for each right they need before touching data.

use crate::{ApiError, AppState};
use axum::extract::FromRequestParts;
use axum::http::HeaderMap;
use axum::http::request::Parts;
use trireme_cluster::Caller;
use trireme_types::acl::Authorizer;
use trireme_types::{ErrorCode, TriremeError};

/// The caller of a request, for the rights checks of its handler.
#[derive(Debug, Clone)]
pub(crate) struct Access(pub(crate) Caller);

impl FromRequestParts<AppState> for Access {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        if !state.node.acl_enabled() {
            return Ok(Access(Caller::Unchecked));
        }
        let secret = token_of(&parts.headers, parts.uri.query())?;
        Ok(Access(state.node.resolve_token(secret.as_deref())?))
    }
}

impl Access {
    /// What the caller may do.
    pub(crate) fn can(&self) -> &Authorizer {
        self.0.authorizer()
    }

    /// `Ok` when `allowed`, else Consul's 403 naming the permission and what it was on.
    pub(crate) fn require(
        &self,
        allowed: bool,
        permission: &str,
        on: Option<&[u8]>,
    ) -> Result<(), ApiError> {
        if allowed {
            return Ok(());
        }
        let who = self.0.accessor_id().unwrap_or("");
        let message = match on {
            Some(on) => format!(
                "Permission denied: token with AccessorID '{who}' lacks permission '{permission}' on \"{}\"",
                String::from_utf8_lossy(&on[..on.len().min(256)])
            ),
            None => format!(
                "Permission denied: token with AccessorID '{who}' lacks permission '{permission}'"
            ),
        };
        Err(ApiError(TriremeError::new(
            ErrorCode::PermissionDenied,
            message,
        )))
    }

    /// `key:read` on `key`.
    pub(crate) fn key_read(&self, key: &[u8]) -> Result<(), ApiError> {
        self.require(self.can().key_read(key), "key:read", Some(key))
    }

    /// `key:list` on `prefix`.
    pub(crate) fn key_list(&self, prefix: &[u8]) -> Result<(), ApiError> {
        self.require(self.can().key_list(prefix), "key:list", Some(prefix))
    }

    /// `key:write` on `key`.
    pub(crate) fn key_write(&self, key: &[u8]) -> Result<(), ApiError> {
        self.require(self.can().key_write(key), "key:write", Some(key))
    }

    /// `key:write` on every key under `prefix`.
    pub(crate) fn key_write_prefix(&self, prefix: &[u8]) -> Result<(), ApiError> {
        self.require(
            self.can().key_write_prefix(prefix),
            "key:write",
            Some(prefix),
        )
    }

    /// `operator:read`.
    pub(crate) fn operator_read(&self) -> Result<(), ApiError> {
        self.require(self.can().operator_read(), "operator:read", None)
    }

    /// `operator:write`.
    pub(crate) fn operator_write(&self) -> Result<(), ApiError> {
        self.require(self.can().operator_write(), "operator:write", None)
    }

    /// `acl:read`.
    pub(crate) fn acl_read(&self) -> Result<(), ApiError> {
        self.require(self.can().acl_read(), "acl:read", None)
    }

    /// `acl:write`.
    pub(crate) fn acl_write(&self) -> Result<(), ApiError> {
        self.require(self.can().acl_write(), "acl:write", None)
    }
}

/// The one token a request carries, if any; 400 for several different ones or one that is
/// not printable ASCII.
fn token_of(headers: &HeaderMap, query: Option<&str>) -> Result<Option<String>, ApiError> {
    let mut found: Option<String> = None;
    let mut offer = |value: &[u8]| -> Result<(), ApiError> {
        let token = std::str::from_utf8(value)
            .ok()
            .map(str::trim)
            .filter(|t| t.bytes().all(|b| b.is_ascii_graphic()))
            .ok_or_else(|| ApiError::invalid("malformed ACL token: not printable ASCII"))?;
        if token.is_empty() {
            return Ok(());
        }
        match &found {
            Some(seen) if seen != token => Err(ApiError::invalid(
                "several different ACL tokens in one request; send one",
            )),
            Some(_) => Ok(()),
            None => {
                found = Some(token.to_string());
                Ok(())
            }
        }
    };
    for name in ["x-consul-token", "x-trireme-token"] {
        for value in headers.get_all(name) {
            offer(value.as_bytes())?;
        }
    }
    for value in headers.get_all(axum::http::header::AUTHORIZATION) {
        let value = value.as_bytes();
        let scheme_end = value.iter().position(|b| *b == b' ').unwrap_or(value.len());
        if !value[..scheme_end].eq_ignore_ascii_case(b"bearer") {
            return Err(ApiError::invalid(
                "the Authorization header must carry a Bearer token",
            ));
        }
        offer(&value[scheme_end..])?;
    }
    if let Some(query) = query {
        for (name, value) in form_urlencoded::parse(query.as_bytes()) {
            if name == "token" {
                offer(value.as_bytes())?;
            }
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn every_place_a_token_can_be_is_read() {
        for (h, q) in [
            (headers(&[("x-consul-token", "s1")]), None),
            (headers(&[("x-trireme-token", "s1")]), None),
            (headers(&[("authorization", "Bearer s1")]), None),
            (headers(&[("authorization", "bearer  s1 ")]), None),
            (headers(&[]), Some("recurse&token=s1")),
            (
                headers(&[("x-consul-token", "s1"), ("authorization", "Bearer s1")]),
                Some("token=s1"),
            ),
        ] {
            assert_eq!(
                token_of(&h, q).unwrap().as_deref(),
                Some("s1"),
                "{h:?} {q:?}"
            );
        }
        assert_eq!(token_of(&headers(&[]), Some("keys")).unwrap(), None);
        assert_eq!(
            token_of(&headers(&[("x-consul-token", "")]), None).unwrap(),
            None
        );
    }

    #[test]
    fn several_tokens_or_odd_ones_are_refused() {
        for (h, q) in [
            (
                headers(&[("x-consul-token", "s1"), ("x-consul-token", "s2")]),
                None,
            ),
            (
                headers(&[("x-consul-token", "s1"), ("authorization", "Bearer s2")]),
                None,
            ),
            (headers(&[("x-consul-token", "s1")]), Some("token=s2")),
            (headers(&[("authorization", "Basic dXNlcjpwYXNz")]), None),
            (headers(&[]), Some("token=a%20b")),
        ] {
            assert!(token_of(&h, q).is_err(), "{h:?} {q:?}");
        }
    }
}
