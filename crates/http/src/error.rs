use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use trireme_cluster::ClusterError;
use trireme_types::{ErrorCode, TriremeError};

/// An error answered as `{"error": message, "code": code}` with the code's HTTP status.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ApiError(pub TriremeError);

impl ApiError {
    /// A 400 with `message`.
    pub fn invalid(message: impl Into<String>) -> Self {
        ApiError(TriremeError::new(ErrorCode::InvalidArgument, message))
    }
}

impl From<ClusterError> for ApiError {
    fn from(e: ClusterError) -> Self {
        ApiError(e.to_client())
    }
}

impl From<TriremeError> for ApiError {
    fn from(e: TriremeError) -> Self {
        ApiError(e)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.0.code.http_status())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::json!({ "error": self.0.message, "code": self.0.code.as_str() });
        (status, axum::Json(body)).into_response()
    }
}
