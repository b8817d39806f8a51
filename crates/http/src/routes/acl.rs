//! `/v1/acl/...`: Consul's ACL API for policies and tokens, in Consul's JSON shapes, so that
//! Consul's own clients (`api.ACL()` in Go) manage a Trireme cluster's tokens unchanged.
//!
//! Reading needs `acl:read`, changing `acl:write`; a token's secret is shown only to callers
//! with `acl:write`. The bootstrap needs no token and works once.

use crate::access::Access;
use crate::routes::request_body;
use crate::{ApiError, AppState};
use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, Path, Request, State};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use trireme_cluster::{AclPolicy, AclToken, PolicyRequest, TokenRequest};

/// A JSON body of type `T`; a 400 (or 413) naming what is wrong with it.
pub(crate) struct JsonBody<T>(T);

impl<T: DeserializeOwned> FromRequest<AppState> for JsonBody<T> {
    type Rejection = Response;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, Response> {
        let body = request_body(Bytes::from_request(request, state).await).map_err(|r| *r)?;
        parse(&body)
            .map(JsonBody)
            .map_err(IntoResponse::into_response)
    }
}

fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::invalid(format!("request body: {e}")))
}

fn hide_secret(mut token: AclToken, access: &Access) -> AclToken {
    if !access.can().acl_write() {
        token.secret_id = "<hidden>".into();
    }
    token
}

/// `PUT /v1/acl/bootstrap`.
pub(crate) async fn bootstrap(State(state): State<AppState>) -> Result<Json<AclToken>, ApiError> {
    Ok(Json(state.node.acl_bootstrap().await?))
}

/// `PUT /v1/acl/policy`.
pub(crate) async fn create_policy(
    State(state): State<AppState>,
    access: Access,
    JsonBody(request): JsonBody<PolicyRequest>,
) -> Result<Response, ApiError> {
    access.acl_write()?;
    Ok(Json(state.node.acl_put_policy(None, request).await?).into_response())
}

/// `PUT /v1/acl/policy/{id}`.
pub(crate) async fn update_policy(
    State(state): State<AppState>,
    access: Access,
    Path(id): Path<String>,
    JsonBody(request): JsonBody<PolicyRequest>,
) -> Result<Response, ApiError> {
    access.acl_write()?;
    if !request.id.is_empty() && request.id != id {
        return Err(ApiError::invalid(
            "the policy ID in the body differs from the path",
        ));
    }
    Ok(Json(state.node.acl_put_policy(Some(&id), request).await?).into_response())
}

/// `GET /v1/acl/policy/{id}`.
pub(crate) async fn read_policy(
    State(state): State<AppState>,
    access: Access,
    Path(id): Path<String>,
) -> Result<Json<AclPolicy>, ApiError> {
    access.acl_read()?;
    Ok(Json(state.node.acl_policy(&id).await?))
}

/// `GET /v1/acl/policy/name/{name}`.
pub(crate) async fn read_policy_by_name(
    State(state): State<AppState>,
    access: Access,
    Path(name): Path<String>,
) -> Result<Json<AclPolicy>, ApiError> {
    access.acl_read()?;
    Ok(Json(state.node.acl_policy_by_name(&name).await?))
}

/// `DELETE /v1/acl/policy/{id}`.
pub(crate) async fn delete_policy(
    State(state): State<AppState>,
    access: Access,
    Path(id): Path<String>,
) -> Result<Json<bool>, ApiError> {
    access.acl_write()?;
    state.node.acl_delete_policy(&id).await?;
    Ok(Json(true))
}

/// `GET /v1/acl/policies`.
pub(crate) async fn list_policies(
    State(state): State<AppState>,
    access: Access,
) -> Result<Json<Vec<AclPolicy>>, ApiError> {
    access.acl_read()?;
    Ok(Json(state.node.acl_policies().await?))
}

/// `PUT /v1/acl/token`.
pub(crate) async fn create_token(
    State(state): State<AppState>,
    access: Access,
    JsonBody(request): JsonBody<TokenRequest>,
) -> Result<Response, ApiError> {
    access.acl_write()?;
    Ok(Json(state.node.acl_put_token(None, request).await?).into_response())
}

/// `PUT /v1/acl/token/{accessor}`.
pub(crate) async fn update_token(
    State(state): State<AppState>,
    access: Access,
    Path(accessor): Path<String>,
    JsonBody(request): JsonBody<TokenRequest>,
) -> Result<Response, ApiError> {
    access.acl_write()?;
    Ok(Json(state.node.acl_put_token(Some(&accessor), request).await?).into_response())
}

/// `PUT /v1/acl/token/{accessor}/clone`: a new token with the same policies.
pub(crate) async fn clone_token(
    State(state): State<AppState>,
    access: Access,
    Path(accessor): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    access.acl_write()?;
    let body = match request_body(body) {
        Ok(body) => body,
        Err(response) => return Ok(*response),
    };
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct CloneRequest {
        #[serde(default)]
        description: Option<String>,
    }
    let request: CloneRequest = if body.is_empty() {
        CloneRequest { description: None }
    } else {
        parse(&body)?
    };
    let original = state.node.acl_token(&accessor).await?;
    let copy = TokenRequest {
        description: request.description.unwrap_or(original.description),
        policies: original.policies,
        local: original.local,
        ..TokenRequest::default()
    };
    Ok(Json(state.node.acl_put_token(None, copy).await?).into_response())
}

/// `GET /v1/acl/token/self`: the caller's own token (no `acl:read` needed).
pub(crate) async fn read_self(
    State(state): State<AppState>,
    access: Access,
) -> Result<Json<AclToken>, ApiError> {
    let Some(accessor) = access.0.accessor_id() else {
        return Err(ApiError::invalid(
            "ACLs are disabled on this node: set [acl] enabled = true",
        ));
    };
    // The caller holds the secret already.
    Ok(Json(state.node.acl_token(accessor).await?))
}

/// `GET /v1/acl/token/{accessor}`.
pub(crate) async fn read_token(
    State(state): State<AppState>,
    access: Access,
    Path(accessor): Path<String>,
) -> Result<Json<AclToken>, ApiError> {
    access.acl_read()?;
    let token = state.node.acl_token(&accessor).await?;
    Ok(Json(hide_secret(token, &access)))
}

/// `DELETE /v1/acl/token/{accessor}`.
pub(crate) async fn delete_token(
    State(state): State<AppState>,
    access: Access,
    Path(accessor): Path<String>,
) -> Result<Json<bool>, ApiError> {
    access.acl_write()?;
    state
        .node
        .acl_delete_token(&accessor, access.0.accessor_id())
        .await?;
    Ok(Json(true))
}

/// `GET /v1/acl/tokens`.
pub(crate) async fn list_tokens(
    State(state): State<AppState>,
    access: Access,
) -> Result<Json<Vec<AclToken>>, ApiError> {
    access.acl_read()?;
    let show = access.can().acl_write();
    Ok(Json(state.node.acl_tokens(show).await?))
}
