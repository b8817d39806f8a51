//! The `trireme` driver: the Consul KV API over HTTP, slot-aware. At connect it reads the
//! cluster's shard map (`/v1/cluster/shards`) from the target, then sends each request straight
//! to the leader of its key's shard, over one keep-alive connection per node, as a cluster-aware
//! client would. A map gone stale (a leader moved) costs one forward inside the cluster, never
//! a wrong answer.

use super::{DriverError, HttpDriver};
use crate::scenario::{Consistency, Operation};
use std::collections::HashMap;
use trireme_types::admin::ShardsDoc;

/// One shard's slot range and the HTTP address (`host:port`) of its leader.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Route {
    first: u16,
    last: u16,
    leader: String,
}

/// A worker's connections to every node that leads a shard.
pub struct TriremeDriver {
    consistency: Consistency,
    routes: Vec<Route>,
    /// The target given, for keys whose shard has no known leader.
    fallback: String,
    nodes: HashMap<String, HttpDriver>,
    /// Every node the shard map named (leaders and replicas), to fall back on when the
    /// node in use goes away: any node forwards to the leader.
    known: Vec<String>,
    /// The target's ACL token, for the connections to the other nodes.
    token: Option<String>,
    /// Whether the target speaks TLS (so do the other nodes).
    tls: bool,
}

/// The URL of node `addr`, with the scheme and token the target has.
fn node_target(tls: bool, token: Option<&str>, addr: &str) -> String {
    let scheme = if tls { "https" } else { "http" };
    match token {
        Some(token) => format!(
            "{scheme}://:{}@{addr}",
            percent_encoding::utf8_percent_encode(token, percent_encoding::NON_ALPHANUMERIC)
        ),
        None => format!("{scheme}://{addr}"),
    }
}

impl TriremeDriver {
    /// Reads the shard map from `target` (`http://host:port`) and connects to the leaders.
    pub async fn connect(target: &str, consistency: Consistency) -> Result<Self, DriverError> {
        let mut first = HttpDriver::connect(target, consistency).await?;
        let (status, body) = first.request("GET", "/v1/cluster/shards", b"").await?;
        if status != 200 {
            return Err(DriverError::Server(format!(
                "HTTP {status} from /v1/cluster/shards: is {target} a Trireme node?"
            )));
        }
        let routes = parse_routes(&body)?;
        let token = super::target_token(target);
        let tls = super::is_tls(target);
        let fallback = super::host_port(target, "http")?;
        let mut known = parse_nodes(&body)?;
        if !known.contains(&fallback) {
            known.push(fallback.clone());
        }
        let mut nodes = HashMap::new();
        nodes.insert(fallback.clone(), first);
        for route in &routes {
            if !nodes.contains_key(&route.leader) {
                let driver = HttpDriver::connect(
                    &node_target(tls, token.as_deref(), &route.leader),
                    consistency,
                )
                .await?;
                nodes.insert(route.leader.clone(), driver);
            }
        }
        Ok(Self {
            consistency,
            routes,
            fallback,
            nodes,
            known,
            token,
            tls,
        })
    }

    /// Which operations this driver performs (those of the Consul KV driver).
    #[must_use]
    pub fn supports(op: Operation) -> bool {
        HttpDriver::supports(op)
    }

    /// The connection to the node leading `key`'s shard.
    fn node_for(&mut self, key: &str) -> Result<&mut HttpDriver, DriverError> {
        let slot = trireme_types::key_slot(key.as_bytes());
        let addr = self
            .routes
            .iter()
            .find(|r| (r.first..=r.last).contains(&slot))
            .map_or(&self.fallback, |r| &r.leader);
        if !self.nodes.contains_key(addr) {
            let driver = HttpDriver::new(
                &node_target(self.tls, self.token.as_deref(), addr),
                self.consistency,
            )?;
            self.nodes.insert(addr.clone(), driver);
        }
        self.nodes
            .get_mut(addr)
            .ok_or_else(|| DriverError::Protocol(format!("no connection to {addr}")))
    }

    /// Writes a key (the load phase).
    pub async fn put(&mut self, key: &str, value: &[u8]) -> Result<(), DriverError> {
        match self.node_for(key)?.put(key, value).await {
            Err(DriverError::Io(_)) if self.route_around(key) => {
                self.node_for(key)?.put(key, value).await
            }
            other => other,
        }
    }

    /// Performs `op` on `key` (`value` for writes).
    pub async fn execute(
        &mut self,
        op: Operation,
        key: &str,
        value: Option<&[u8]>,
    ) -> Result<(), DriverError> {
        match self.node_for(key)?.execute(op, key, value).await {
            Err(DriverError::Io(_)) if self.route_around(key) => {
                self.node_for(key)?.execute(op, key, value).await
            }
            other => other,
        }
    }

    /// After the connection to the node serving `key` failed (it stopped, or left the
    /// cluster): sends nothing there any more, and sends to another node the shard map named
    /// instead, which forwards to the shard's leader. Returns whether another node is left
    /// to try; the request is then tried there once.
    fn route_around(&mut self, key: &str) -> bool {
        let slot = trireme_types::key_slot(key.as_bytes());
        let dead = self
            .routes
            .iter()
            .find(|r| (r.first..=r.last).contains(&slot))
            .map_or_else(|| self.fallback.clone(), |r| r.leader.clone());
        self.routes.retain(|r| r.leader != dead);
        self.nodes.remove(&dead);
        self.known.retain(|n| *n != dead);
        if self.fallback == dead {
            match self.known.first() {
                Some(other) => self.fallback = other.clone(),
                None => return false,
            }
        }
        true
    }
}

/// The HTTP address (`host:port`) of every node `/v1/cluster/shards` names, in order.
fn parse_nodes(body: &[u8]) -> Result<Vec<String>, DriverError> {
    let doc: ShardsDoc = serde_json::from_slice(body)
        .map_err(|e| DriverError::Protocol(format!("/v1/cluster/shards: {e}")))?;
    let mut nodes: Vec<String> = Vec::new();
    for shard in doc.shards {
        for node in shard.leader.into_iter().chain(shard.replicas) {
            if !node.http.is_empty() && !nodes.contains(&node.http) {
                nodes.push(node.http);
            }
        }
    }
    Ok(nodes)
}

/// Reads the slot ranges and leaders out of `/v1/cluster/shards`.
fn parse_routes(body: &[u8]) -> Result<Vec<Route>, DriverError> {
    let doc: ShardsDoc = serde_json::from_slice(body)
        .map_err(|e| DriverError::Protocol(format!("/v1/cluster/shards: {e}")))?;
    Ok(doc
        .shards
        .into_iter()
        .filter_map(|shard| {
            Some(Route {
                first: shard.slots[0],
                last: shard.slots[1],
                leader: shard.leader?.http,
            })
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_come_from_the_shard_map_and_skip_leaderless_shards() {
        let n1 = r#"{"name":"n1","peer":"127.0.0.1:7702","http":"127.0.0.1:7700","resp":"127.0.0.1:7701"}"#;
        let body = format!(
            r#"{{"node":"n1","epoch":0,"shard_count":2,"shards":[
            {{"shard":0,"slots":[0,8191],"leader":{n1},"replicas":[{n1}],"local_role":"Leader",
              "term":1,"applied_index":3,"committed_index":3}},
            {{"shard":1,"slots":[8192,16383],"leader":null,"replicas":[],"local_role":null,
              "term":0,"applied_index":0,"committed_index":0}}]}}"#
        );
        let body = body.as_bytes();
        assert_eq!(
            parse_routes(body).unwrap(),
            vec![Route {
                first: 0,
                last: 8191,
                leader: "127.0.0.1:7700".into()
            }]
        );
        assert!(parse_routes(b"not json").is_err());
        assert!(parse_routes(br#"{"shards":[{"slots":[0],"leader":null}]}"#).is_err());
        assert!(
            parse_routes(br#"{"shards":[]}"#).is_err(),
            "not a shard map"
        );
    }

    #[test]
    fn a_node_that_went_away_is_routed_around() {
        let route = |first, last, leader: &str| Route {
            first,
            last,
            leader: leader.into(),
        };
        let mut nodes = HashMap::new();
        for addr in ["127.0.0.1:1", "127.0.0.1:2"] {
            let driver = HttpDriver::new(&format!("http://{addr}"), Consistency::Default).unwrap();
            nodes.insert(addr.to_string(), driver);
        }
        let mut driver = TriremeDriver {
            consistency: Consistency::Default,
            routes: vec![
                route(0, 8191, "127.0.0.1:1"),
                route(8192, 16383, "127.0.0.1:2"),
            ],
            fallback: "127.0.0.1:1".into(),
            nodes,
            known: vec!["127.0.0.1:1".into(), "127.0.0.1:2".into()],
            token: None,
            tls: false,
        };
        // "bar" is in slot 5061: served by the first node, which went away.
        assert!(driver.route_around("bar"));
        assert_eq!(driver.routes, vec![route(8192, 16383, "127.0.0.1:2")]);
        assert_eq!(driver.fallback, "127.0.0.1:2");
        // With the last node gone too, nothing is left to try.
        assert!(!driver.route_around("bar"));
    }

    #[test]
    fn a_worker_whose_only_node_went_away_falls_back_on_a_replica() {
        // One shard led by the worker's own target, which stops: the routes and the
        // connections knew only that node; the replicas in the map are the way out.
        let n =
            |i: u16| format!(r#"{{"name":"n{i}","peer":"p","http":"127.0.0.1:{i}","resp":"r"}}"#);
        let body = format!(
            r#"{{"node":"n1","epoch":0,"shard_count":1,"shards":[
            {{"shard":0,"slots":[0,16383],"leader":{},"replicas":[{},{},{}],"local_role":"Leader",
              "term":1,"applied_index":3,"committed_index":3}}]}}"#,
            n(1),
            n(1),
            n(2),
            n(3)
        );
        let known = parse_nodes(body.as_bytes()).unwrap();
        assert_eq!(known, ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]);
        let mut nodes = HashMap::new();
        let only = HttpDriver::new("http://127.0.0.1:1", Consistency::Default).unwrap();
        nodes.insert("127.0.0.1:1".to_string(), only);
        let mut driver = TriremeDriver {
            consistency: Consistency::Default,
            routes: parse_routes(body.as_bytes()).unwrap(),
            fallback: "127.0.0.1:1".into(),
            nodes,
            known,
            token: None,
            tls: false,
        };
        assert!(driver.route_around("bar"));
        assert_eq!(driver.fallback, "127.0.0.1:2");
        assert!(driver.routes.is_empty());
        assert!(driver.route_around("bar"));
        assert_eq!(driver.fallback, "127.0.0.1:3");
    }
}
