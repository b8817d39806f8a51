//! One module per family of endpoints.

pub(crate) mod acl;
pub(crate) mod admin;
pub(crate) mod backup;
pub(crate) mod documents;
pub(crate) mod kv;
pub(crate) mod metrics;
pub(crate) mod patch;
pub(crate) mod session;
pub(crate) mod status;
pub(crate) mod txn;
pub(crate) mod ui;

use crate::ApiError;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use trireme_types::{ErrorCode, TriremeError};

/// A request body, or the error response to send instead (boxed: it is the rare path).
pub(crate) fn request_body(body: Result<Bytes, BytesRejection>) -> Result<Bytes, Box<Response>> {
    match body {
        Ok(body) => Ok(body),
        Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            // The rest of the body is never read, so this connection cannot carry another
            // request: say so, so that clients reusing connections open a new one.
            let error = ApiError(TriremeError::new(
                ErrorCode::RequestTooLarge,
                format!("request body: {}", rejection.body_text()),
            ));
            let mut response = error.into_response();
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            Err(Box::new(response))
        }
        Err(rejection) => Err(Box::new(
            ApiError::invalid(format!("request body: {}", rejection.body_text())).into_response(),
        )),
    }
}
