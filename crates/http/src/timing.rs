//! Request latency per route family and method: a tower layer that starts a clock when a
//! request reaches the router and records into a fixed histogram when the response is
//! ready. Its future is a plain struct (no box per request) and the record is one atomic
//! add per bucket.

use crate::HttpMetrics;
use axum::http::{Method, Request, Uri};
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Instant;
use tower::{Layer, Service};

/// Route families, as the `route` label of `trireme_http_request_duration_seconds`.
pub(crate) const ROUTES: [&str; 13] = [
    "kv",
    "document",
    "collection",
    "search",
    "status",
    "metrics",
    "txn",
    "session",
    "backup",
    "acl",
    "console",
    "blocking",
    "other",
];

/// The route family of Consul blocking queries (`?index=`), whatever their path: they are
/// long polls, whose time is mostly the wait the client asked for.
pub(crate) const BLOCKING: usize = 11;
/// The route family of the console's page and its `/v1/ui/...` requests.
pub(crate) const CONSOLE: usize = 10;
/// Methods, as its `method` label.
pub(crate) const METHODS: [&str; 5] = ["GET", "PUT", "DELETE", "POST", "other"];

/// The histogram slot of a request: route family × method.
pub(crate) fn slot(method: &Method, uri: &Uri) -> usize {
    let path = uri.path();
    let kv = path == "/v1/kv" || path.starts_with("/v1/kv/");
    let route = if (kv || path.starts_with("/v1/session/"))
        && *method == Method::GET
        && blocks(uri.query())
    {
        // Held until a change or the wait: apart, so they do not read as slow requests.
        BLOCKING
    } else if kv {
        0
    } else if let Some(rest) = path.strip_prefix("/v0/") {
        if rest.trim_end_matches('/').contains('/') || rest.ends_with('/') {
            1
        } else if uri
            .query()
            .is_some_and(|q| q.split('&').any(|p| p.starts_with("query=")))
        {
            3
        } else {
            2
        }
    } else if path.starts_with("/v1/status/")
        || path.starts_with("/v1/cluster/")
        || path.starts_with("/v1/catalog/")
        || path == "/v1/health"
    {
        4
    } else if path == "/metrics" {
        5
    } else if path == "/v1/txn" {
        6
    } else if path.starts_with("/v1/session/") {
        7
    } else if path.starts_with("/v1/backup/") {
        8
    } else if path.starts_with("/v1/acl/") {
        9
    } else if path == "/ui" || path.starts_with("/ui/") || path.starts_with("/v1/ui/") {
        // The console's own page and polling, kept apart so its figures leave it out.
        CONSOLE
    } else {
        12
    };
    let method = match *method {
        Method::GET => 0,
        Method::PUT => 1,
        Method::DELETE => 2,
        Method::POST => 3,
        _ => 4,
    };
    route * METHODS.len() + method
}

/// Whether a query string asks for a blocking query: an `index` other than 0 (see
/// `blocking.rs`; a bad one is refused at once, and counts as blocking here all the same).
fn blocks(query: Option<&str>) -> bool {
    query.is_some_and(|q| {
        q.split('&').any(|pair| {
            pair.strip_prefix("index=")
                .is_some_and(|v| !v.is_empty() && v.bytes().any(|b| b != b'0'))
        })
    })
}

/// Times every request through the router it wraps.
#[derive(Clone)]
pub(crate) struct TimingLayer {
    pub(crate) metrics: Arc<HttpMetrics>,
}

impl<S> Layer<S> for TimingLayer {
    type Service = Timing<S>;

    fn layer(&self, inner: S) -> Timing<S> {
        Timing {
            inner,
            metrics: self.metrics.clone(),
        }
    }
}

/// The service [`TimingLayer`] makes.
#[derive(Clone)]
pub(crate) struct Timing<S> {
    inner: S,
    metrics: Arc<HttpMetrics>,
}

impl<S, B> Service<Request<B>> for Timing<S>
where
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Timed<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let slot = slot(request.method(), request.uri());
        Timed {
            start: Instant::now(),
            slot,
            metrics: self.metrics.clone(),
            inner: self.inner.call(request),
        }
    }
}

pin_project! {
    /// A response future that records how long it took when it completes.
    pub(crate) struct Timed<F> {
        #[pin]
        inner: F,
        start: Instant,
        slot: usize,
        metrics: Arc<HttpMetrics>,
    }
}

impl<F: Future> Future for Timed<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let output = ready!(this.inner.poll(cx));
        if let Some(histogram) = this.metrics.latency.get(*this.slot) {
            histogram.record(this.start.elapsed());
        }
        Poll::Ready(output)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_fall_in_their_route_family() {
        let label = |method: Method, uri: &str| {
            let slot = slot(&method, &uri.parse().unwrap());
            (ROUTES[slot / METHODS.len()], METHODS[slot % METHODS.len()])
        };
        assert_eq!(label(Method::GET, "/v1/kv/a/b?raw"), ("kv", "GET"));
        assert_eq!(label(Method::PUT, "/v1/kv"), ("kv", "PUT"));
        assert_eq!(label(Method::DELETE, "/v1/kv/x"), ("kv", "DELETE"));
        assert_eq!(label(Method::GET, "/v1/kvx"), ("other", "GET"));
        assert_eq!(label(Method::PUT, "/v1/acl/token"), ("acl", "PUT"));
        assert_eq!(label(Method::PUT, "/v0/users/alice"), ("document", "PUT"));
        assert_eq!(label(Method::GET, "/v0/users/"), ("document", "GET"));
        assert_eq!(label(Method::GET, "/v0/users"), ("collection", "GET"));
        assert_eq!(
            label(Method::GET, "/v0/users?limit=5&query=bob"),
            ("search", "GET")
        );
        assert_eq!(label(Method::DELETE, "/v0/users"), ("collection", "DELETE"));
        assert_eq!(label(Method::GET, "/v1/cluster/shards"), ("status", "GET"));
        assert_eq!(
            label(Method::POST, "/v1/cluster/nodes/n2/remove"),
            ("status", "POST")
        );
        assert_eq!(label(Method::GET, "/metrics"), ("metrics", "GET"));
        assert_eq!(label(Method::HEAD, "/v1/health"), ("status", "other"));
        assert_eq!(label(Method::PUT, "/v1/txn"), ("txn", "PUT"));
        assert_eq!(label(Method::PUT, "/v1/session/create"), ("session", "PUT"));
        assert_eq!(label(Method::GET, "/v1/backup/shard/3"), ("backup", "GET"));
        assert_eq!(label(Method::GET, "/v1/agent/self"), ("other", "GET"));
        assert_eq!(label(Method::GET, "/ui"), ("console", "GET"));
        assert_eq!(label(Method::GET, "/ui/js/app.js"), ("console", "GET"));
        assert_eq!(label(Method::GET, "/v1/ui/figures"), ("console", "GET"));
        assert_eq!(label(Method::GET, "/uix"), ("other", "GET"));
        assert_eq!(
            label(Method::GET, "/v1/kv/a?index=12&wait=5m"),
            ("blocking", "GET")
        );
        assert_eq!(
            label(Method::GET, "/v1/kv/a/?recurse&index=3"),
            ("blocking", "GET")
        );
        assert_eq!(
            label(Method::GET, "/v1/session/list?index=7"),
            ("blocking", "GET")
        );
        // An index of 0 does not block; a write with an index is no query.
        assert_eq!(label(Method::GET, "/v1/kv/a?index=0"), ("kv", "GET"));
        assert_eq!(label(Method::GET, "/v1/kv/a?index="), ("kv", "GET"));
        assert_eq!(label(Method::PUT, "/v1/kv/a?index=4"), ("kv", "PUT"));
        assert_eq!(label(Method::GET, "/v1/kv/a?reindex=4"), ("kv", "GET"));
        assert_eq!(label(Method::GET, "/v1/health?index=4"), ("status", "GET"));
        assert_eq!(ROUTES[CONSOLE], "console");
        assert_eq!(ROUTES[BLOCKING], "blocking");
        assert_eq!(ROUTES[ROUTES.len() - 1], "other");
    }
}
