//! Access control, the Consul way: policies of rules, and tokens that link to policies.
//!
//! The whole store is one row of the metadata group (`acl`): a JSON document changed only by
//! a compare-and-set on the row's modify index. A change that must see every token (none may
//! take away the last right to manage ACLs) is then checked and written as one step, and
//! two nodes changing ACLs at once never overwrite each other. Every node follows its own
//! copy of the metadata group and rebuilds its cache of authorizers when that row changes
//! (at the next applied metadata entry, so within a second); a request is judged by the
//! authorizer it resolved on arrival, whatever happens to its token meanwhile.
//!
//! The front ends check rights at the edge; the operations here only keep the store
//! coherent (names unique, policies that exist, built-in entries kept).

use crate::meta::META_SHARD;
use crate::{ClusterError, Node};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, RwLock};
use trireme_types::acl::{Authorizer, DefaultPolicy, GLOBAL_MANAGEMENT_RULES, Rules, parse_rules};
use trireme_types::{Command, ErrorCode, PutCondition, TriremeError, TtlUpdate};

/// The built-in policy every bootstrap token links to.
pub const GLOBAL_MANAGEMENT_ID: &str = "00000000-0000-0000-0000-000000000001";
/// Its name, as Consul calls it.
pub const GLOBAL_MANAGEMENT_NAME: &str = "global-management";
/// The token a request without one runs as; operators may link policies to it.
pub const ANONYMOUS_ACCESSOR: &str = "00000000-0000-0000-0000-000000000002";
const ANONYMOUS_SECRET: &str = "anonymous";
/// The metadata row that holds the store.
const ACL_KEY: &[u8] = b"acl";
/// Bounds on the store: it is one row, rewritten at every change and cached on every node.
const MAX_TOKENS: usize = 10_000;
const MAX_POLICIES: usize = 1_000;
const MAX_RULES_BYTES: usize = 64 << 10;
const MAX_DESCRIPTION_BYTES: usize = 1 << 10;
/// Attempts at a compare-and-set before a change gives up as a conflict.
const CAS_ATTEMPTS: usize = 8;
/// How long a change waits for this node to apply it before answering anyway.
const APPLY_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// How a node enforces ACLs (the `[acl]` table of its config).
#[derive(Debug, Clone, Default)]
pub struct AclConfig {
    /// Off: every request is allowed and tokens are ignored, as before ACLs existed.
    pub enabled: bool,
    /// What a request gets where no rule of its token answers.
    pub default_policy: DefaultPolicy,
    /// A management token created at start when no token has this secret yet; setting it
    /// counts as the bootstrap.
    pub initial_management_token: Option<String>,
}

/// A policy in Consul's JSON shape (`/v1/acl/policy`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct AclPolicy {
    /// Generated at creation, a UUID.
    #[serde(rename = "ID", default)]
    pub id: String,
    /// Unique: letters, digits, `-` and `_`, at most 128.
    #[serde(default)]
    pub name: String,
    /// Free text.
    #[serde(default)]
    pub description: String,
    /// Rules in Consul's HCL or JSON form.
    #[serde(default)]
    pub rules: String,
    /// Accepted and kept for Consul's clients; this cluster is one datacenter.
    #[serde(default, deserialize_with = "null_as_empty")]
    pub datacenters: Vec<String>,
    /// Revision of the store that created it.
    #[serde(default)]
    pub create_index: u64,
    /// Revision of the store that last changed it.
    #[serde(default)]
    pub modify_index: u64,
}

/// A token's link to a policy, by id or (when creating) by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyLink {
    /// The policy's id.
    #[serde(rename = "ID", default)]
    pub id: String,
    /// The policy's name, filled in from the policy when answering.
    #[serde(rename = "Name", default)]
    pub name: String,
}

/// A token in Consul's JSON shape (`/v1/acl/token`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct AclToken {
    /// Public id, a UUID: how operators name the token.
    #[serde(rename = "AccessorID", default)]
    pub accessor_id: String,
    /// What clients send; never logged.
    #[serde(rename = "SecretID", default)]
    pub secret_id: String,
    /// Free text.
    #[serde(default)]
    pub description: String,
    /// The policies whose rules the token carries.
    #[serde(default)]
    pub policies: Vec<PolicyLink>,
    /// Consul's datacenter-local flag; kept, meaningless in one cluster.
    #[serde(default)]
    pub local: bool,
    /// RFC 3339.
    #[serde(default)]
    pub create_time: String,
    /// Revision of the store that created it.
    #[serde(default)]
    pub create_index: u64,
    /// Revision of the store that last changed it.
    #[serde(default)]
    pub modify_index: u64,
}

/// A list field that Go's JSON encoder sends as `null` when the client left it empty.
fn null_as_empty<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(Option::<Vec<T>>::deserialize(deserializer)?.unwrap_or_default())
}

/// The stored document.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct AclStore {
    /// Bumped by every change; the create and modify indexes of entries.
    pub revision: u64,
    /// Whether the one-time bootstrap (or an initial management token) has happened.
    pub bootstrapped: bool,
    pub policies: BTreeMap<String, AclPolicy>,
    pub tokens: BTreeMap<String, AclToken>,
}

/// What one node resolves tokens with: built from the store whenever its row changes.
#[derive(Default)]
pub(crate) struct AclCache {
    /// Modify index of the row the cache was built from (0: no row yet).
    row_index: u64,
    /// Secrets by a keyed hash, so a lookup costs one hash, and the final comparison is
    /// constant-time (see [`same_secret`]).
    by_secret: HashMap<u64, Vec<Arc<Resolved>>>,
    hasher: RandomState,
    anonymous: Option<Arc<Resolved>>,
}

/// A token ready to answer questions.
#[derive(Clone)]
pub struct Resolved {
    secret: String,
    /// The token's accessor id.
    pub accessor_id: String,
    /// Its rights.
    pub authorizer: Arc<Authorizer>,
}

impl std::fmt::Debug for Resolved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secret.
        f.debug_struct("Resolved")
            .field("accessor_id", &self.accessor_id)
            .finish_non_exhaustive()
    }
}

/// Who a request runs as once its token is resolved.
#[derive(Debug, Clone)]
pub enum Caller {
    /// ACLs are off: everything is allowed.
    Unchecked,
    /// No token was given: the anonymous token's rights.
    Anonymous(Arc<Resolved>),
    /// A known token.
    Token(Arc<Resolved>),
}

impl Caller {
    /// What this caller may do.
    pub fn authorizer(&self) -> &Authorizer {
        static ALLOW_ALL: std::sync::OnceLock<Authorizer> = std::sync::OnceLock::new();
        match self {
            Caller::Unchecked => ALLOW_ALL.get_or_init(Authorizer::allow_all),
            Caller::Anonymous(r) | Caller::Token(r) => &r.authorizer,
        }
    }

    /// Whether the caller gave no token while ACLs are on (RESP answers `NOAUTH` then).
    pub fn is_anonymous(&self) -> bool {
        matches!(self, Caller::Anonymous(_))
    }

    /// The accessor id of the caller's token, if ACLs are on.
    pub fn accessor_id(&self) -> Option<&str> {
        match self {
            Caller::Unchecked => None,
            Caller::Anonymous(r) | Caller::Token(r) => Some(&r.accessor_id),
        }
    }

    /// The refusal for a right this caller lacks.
    pub fn denied(&self) -> ClusterError {
        permission_denied()
    }
}

/// Consul's answer to a token nobody knows (HTTP 403).
pub fn acl_not_found() -> ClusterError {
    ClusterError::Request(TriremeError::new(ErrorCode::AclNotFound, "ACL not found"))
}

/// Consul's answer to a token without the right (HTTP 403).
pub fn permission_denied() -> ClusterError {
    ClusterError::Request(TriremeError::new(
        ErrorCode::PermissionDenied,
        "Permission denied",
    ))
}

fn invalid(message: impl Into<String>) -> ClusterError {
    ClusterError::Request(TriremeError::new(ErrorCode::InvalidArgument, message))
}

fn not_found(message: impl Into<String>) -> ClusterError {
    ClusterError::Request(TriremeError::new(ErrorCode::NotFound, message))
}

/// Compares secrets in time that depends on their lengths only.
fn same_secret(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

impl AclStore {
    /// The store as it starts: the built-in policy and the anonymous token.
    fn initial() -> Self {
        let mut store = AclStore {
            revision: 1,
            ..AclStore::default()
        };
        store.policies.insert(
            GLOBAL_MANAGEMENT_ID.into(),
            AclPolicy {
                id: GLOBAL_MANAGEMENT_ID.into(),
                name: GLOBAL_MANAGEMENT_NAME.into(),
                description: "Builtin Policy that grants unlimited access".into(),
                rules: GLOBAL_MANAGEMENT_RULES.into(),
                datacenters: Vec::new(),
                create_index: 1,
                modify_index: 1,
            },
        );
        store.tokens.insert(
            ANONYMOUS_ACCESSOR.into(),
            AclToken {
                accessor_id: ANONYMOUS_ACCESSOR.into(),
                secret_id: ANONYMOUS_SECRET.into(),
                description: "Anonymous Token".into(),
                policies: Vec::new(),
                local: false,
                create_time: now_rfc3339(),
                create_index: 1,
                modify_index: 1,
            },
        );
        store
    }

    fn rules_of(&self) -> HashMap<&str, Rules> {
        self.policies
            .iter()
            .filter_map(|(id, p)| match parse_rules(&p.rules) {
                Ok(rules) => Some((id.as_str(), rules)),
                Err(e) => {
                    // Policies are parsed before they are stored; a bad one here is a bug.
                    tracing::error!(policy = %id, error = %e, "a stored policy does not parse");
                    None
                }
            })
            .collect()
    }

    fn authorizer(
        &self,
        token: &AclToken,
        rules: &HashMap<&str, Rules>,
        default: DefaultPolicy,
    ) -> Authorizer {
        let linked: Vec<&Rules> = token
            .policies
            .iter()
            .filter_map(|link| rules.get(link.id.as_str()))
            .collect();
        Authorizer::new(&linked, default)
    }

    /// Refuses a store in which no token may manage ACLs any more (unless none ever could:
    /// before the bootstrap).
    fn check_manageable(&self, default: DefaultPolicy) -> Result<(), ClusterError> {
        if !self.bootstrapped {
            return Ok(());
        }
        let rules = self.rules_of();
        // One question per distinct set of policies, not per token.
        let mut seen: std::collections::HashSet<Vec<&str>> = std::collections::HashSet::new();
        let any = self.tokens.values().any(|t| {
            let mut ids: Vec<&str> = t.policies.iter().map(|l| l.id.as_str()).collect();
            ids.sort_unstable();
            seen.insert(ids) && self.authorizer(t, &rules, default).acl_write()
        });
        if any {
            Ok(())
        } else {
            Err(invalid(
                "this change would leave no token that may manage ACLs; nothing was changed",
            ))
        }
    }

    fn policy_by_name(&self, name: &str) -> Option<&AclPolicy> {
        self.policies.values().find(|p| p.name == name)
    }

    /// A token's links with the current policy names; links to deleted policies dropped.
    fn with_names(&self, mut token: AclToken) -> AclToken {
        token
            .policies
            .retain_mut(|link| match self.policies.get(&link.id) {
                Some(policy) => {
                    link.name = policy.name.clone();
                    true
                }
                None => false,
            });
        token
    }

    /// Resolves links given by id or by name to ids; refuses one to no policy.
    fn resolve_links(&self, links: &[PolicyLink]) -> Result<Vec<PolicyLink>, ClusterError> {
        let mut out: Vec<PolicyLink> = Vec::new();
        for link in links {
            let policy = if !link.id.is_empty() {
                self.policies.get(&link.id)
            } else {
                self.policy_by_name(&link.name)
            };
            let Some(policy) = policy else {
                let named = if link.id.is_empty() {
                    &link.name
                } else {
                    &link.id
                };
                return Err(invalid(format!("no such ACL policy: \"{named}\"")));
            };
            if !out.iter().any(|l| l.id == policy.id) {
                out.push(PolicyLink {
                    id: policy.id.clone(),
                    name: policy.name.clone(),
                });
            }
        }
        Ok(out)
    }
}

fn check_policy_fields(policy: &AclPolicy) -> Result<(), ClusterError> {
    let name_ok = !policy.name.is_empty()
        && policy.name.len() <= 128
        && policy
            .name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !name_ok {
        return Err(invalid(format!(
            "invalid policy name \"{}\": use 1 to 128 letters, digits, '-' or '_'",
            policy.name.chars().take(140).collect::<String>()
        )));
    }
    if policy.description.len() > MAX_DESCRIPTION_BYTES {
        return Err(invalid("the description is longer than 1 KiB"));
    }
    if policy.rules.len() > MAX_RULES_BYTES {
        return Err(invalid("the rules are longer than 64 KiB"));
    }
    parse_rules(&policy.rules).map_err(|e| invalid(format!("invalid policy rules: {e}")))?;
    Ok(())
}

fn check_secret(secret: &str) -> Result<(), ClusterError> {
    let ok = !secret.is_empty()
        && secret.len() <= 256
        && secret.bytes().all(|b| b.is_ascii_graphic())
        && secret != ANONYMOUS_SECRET;
    if ok {
        Ok(())
    } else {
        Err(invalid(
            "a SecretID must be 1 to 256 printable ASCII characters without spaces",
        ))
    }
}

impl AclCache {
    fn build(row_index: u64, store: AclStore, default: DefaultPolicy) -> Self {
        let rules = store.rules_of();
        let hasher = RandomState::new();
        let mut by_secret: HashMap<u64, Vec<Arc<Resolved>>> = HashMap::new();
        let mut anonymous = None;
        // Tokens with the same policies share one authorizer: thousands of tokens of one
        // application policy cost one.
        let mut shared: HashMap<Vec<&str>, Arc<Authorizer>> = HashMap::new();
        for token in store.tokens.values() {
            let mut ids: Vec<&str> = token.policies.iter().map(|l| l.id.as_str()).collect();
            ids.sort_unstable();
            let authorizer = shared
                .entry(ids)
                .or_insert_with(|| Arc::new(store.authorizer(token, &rules, default)))
                .clone();
            let resolved = Arc::new(Resolved {
                secret: token.secret_id.clone(),
                accessor_id: token.accessor_id.clone(),
                authorizer,
            });
            if token.accessor_id == ANONYMOUS_ACCESSOR {
                anonymous = Some(resolved);
                continue;
            }
            by_secret
                .entry(hasher.hash_one(token.secret_id.as_bytes()))
                .or_default()
                .push(resolved);
        }
        AclCache {
            row_index,
            by_secret,
            hasher,
            anonymous,
        }
    }

    fn find(&self, secret: &str) -> Option<&Arc<Resolved>> {
        self.by_secret
            .get(&self.hasher.hash_one(secret.as_bytes()))?
            .iter()
            .find(|r| same_secret(&r.secret, secret))
    }
}

/// The ACL side of a node: its configuration and its cache.
pub(crate) struct Acl {
    pub(crate) config: AclConfig,
    cache: RwLock<Arc<AclCache>>,
}

impl Acl {
    pub(crate) fn new(config: AclConfig) -> Self {
        let default = config.default_policy;
        Acl {
            config,
            cache: RwLock::new(Arc::new(AclCache::build(0, AclStore::initial(), default))),
        }
    }

    fn cache(&self) -> Arc<AclCache> {
        self.cache
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// A policy to create or update (`/v1/acl/policy`); the id and indexes are ignored.
pub type PolicyRequest = AclPolicy;

/// A token to create or update (`/v1/acl/token`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct TokenRequest {
    /// Chosen by the client (a UUID) or generated.
    #[serde(rename = "AccessorID", default)]
    pub accessor_id: String,
    /// Chosen by the client or generated; cannot change once set.
    #[serde(rename = "SecretID", default)]
    pub secret_id: String,
    /// Free text.
    #[serde(default)]
    pub description: String,
    /// Policies by id or name.
    #[serde(default, deserialize_with = "null_as_empty")]
    pub policies: Vec<PolicyLink>,
    /// Consul's flag; kept.
    #[serde(default)]
    pub local: bool,
    /// Roles are not supported; a request naming any is refused.
    #[serde(default, deserialize_with = "null_as_empty")]
    pub roles: Vec<serde_json::Value>,
    /// Token expiry is not supported; a request asking for it is refused.
    #[serde(rename = "ExpirationTTL", default)]
    pub expiration_ttl: Option<serde_json::Value>,
}

impl Node {
    /// Whether ACLs are enforced on this node.
    pub fn acl_enabled(&self) -> bool {
        self.acl.config.enabled
    }

    /// Resolves the token a request carries (`None` or empty: none) to who it runs as;
    /// `ACL not found` for a secret no token has. With ACLs off every request is unchecked.
    pub fn resolve_token(&self, secret: Option<&str>) -> Result<Caller, ClusterError> {
        if !self.acl.config.enabled {
            return Ok(Caller::Unchecked);
        }
        let cache = self.acl.cache();
        match secret.filter(|s| !s.is_empty()) {
            None => match &cache.anonymous {
                Some(anonymous) => Ok(Caller::Anonymous(anonymous.clone())),
                None => Err(acl_not_found()),
            },
            Some(secret) => match cache.find(secret) {
                Some(resolved) => Ok(Caller::Token(resolved.clone())),
                None => Err(acl_not_found()),
            },
        }
    }

    /// Rebuilds the cache when this node's copy of the `acl` row changed.
    pub(crate) fn refresh_acl(&self) {
        if !self.acl.config.enabled {
            return;
        }
        let record = match self.storage.get(META_SHARD, ACL_KEY, crate::now_ms()) {
            Ok(record) => record,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the ACL store");
                return;
            }
        };
        let Some(record) = record else { return };
        if record.modify_index == self.acl.cache().row_index {
            return;
        }
        let store: AclStore = match serde_json::from_slice(&record.value) {
            Ok(store) => store,
            Err(e) => {
                tracing::error!(error = %e, "unreadable ACL store; keeping the last one");
                return;
            }
        };
        let cache = AclCache::build(record.modify_index, store, self.acl.config.default_policy);
        let mut current = self
            .acl
            .cache
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Two refreshes may race (the metadata watcher, a change made here): the older row
        // never replaces a newer one, or a deleted token could live on until the next entry.
        if cache.row_index > current.row_index {
            *current = Arc::new(cache);
        }
    }

    /// The store as the metadata leader has it, with its row's modify index (0: no row).
    async fn read_acl_store(&self) -> Result<(AclStore, u64), ClusterError> {
        if !self.acl.config.enabled {
            // Its answers would be unchecked here, secrets included.
            return Err(invalid(
                "ACLs are disabled on this node: set [acl] enabled = true",
            ));
        }
        let read = crate::forward::Read::whole(
            trireme_raft::ReadMode::Consistent,
            crate::forward::GetKeys(vec![Bytes::from_static(ACL_KEY)]),
        );
        let (mut found, _) = self.on_shard(META_SHARD, read).await?;
        match found.pop().flatten() {
            None => Ok((AclStore::initial(), 0)),
            Some(record) => serde_json::from_slice(&record.value)
                .map(|store| (store, record.modify_index))
                .map_err(|e| ClusterError::Internal(format!("unreadable ACL store: {e}"))),
        }
    }

    /// Reads the store through the leader, lets `change` edit it and writes it back with a
    /// compare-and-set, retrying when another change got in first. `change` sees the next
    /// revision number, for the indexes of what it creates or changes.
    async fn change_acl<T>(
        &self,
        mut change: impl FnMut(&mut AclStore, u64) -> Result<T, ClusterError>,
    ) -> Result<T, ClusterError> {
        if !self.acl.config.enabled {
            return Err(invalid(
                "ACLs are disabled on this node: set [acl] enabled = true",
            ));
        }
        for _ in 0..CAS_ATTEMPTS {
            let (mut store, index) = self.read_acl_store().await?;
            let revision = store.revision + 1;
            let outcome = change(&mut store, revision)?;
            store.revision = revision;
            if store.tokens.len() > MAX_TOKENS || store.policies.len() > MAX_POLICIES {
                return Err(invalid(format!(
                    "the ACL store holds at most {MAX_TOKENS} tokens and {MAX_POLICIES} policies"
                )));
            }
            store.check_manageable(self.acl.config.default_policy)?;
            let value = serde_json::to_vec(&store)
                .map_err(|e| ClusterError::Internal(format!("cannot encode the ACL store: {e}")))?;
            let condition = if index == 0 {
                PutCondition::IfAbsent
            } else {
                PutCondition::IfModifyIndex(index)
            };
            let put = Command::Put {
                key: Bytes::from_static(ACL_KEY),
                value: Bytes::from(value),
                flags: None,
                condition,
                ttl: TtlUpdate::Clear,
                return_previous: false,
            };
            let written: crate::request::PutOutcome = self.write_shard(META_SHARD, put).await?;
            if written.written {
                // Read-your-writes on this node: the next request here sees the change once
                // this node's copy of the metadata group has applied it (the write returned
                // when the metadata leader committed it).
                self.meta
                    .await_applied_beyond(written.index.saturating_sub(1), APPLY_WAIT)
                    .await;
                self.refresh_acl();
                return Ok(outcome);
            }
        }
        Err(ClusterError::Request(TriremeError::new(
            ErrorCode::Conflict,
            "the ACL store kept changing while this change was being made; try again",
        )))
    }

    /// `PUT /v1/acl/bootstrap`: the first management token, once.
    pub async fn acl_bootstrap(&self) -> Result<AclToken, ClusterError> {
        if self.acl.config.initial_management_token.is_some() {
            // The configured token is the bootstrap; a request must not race it at start.
            return Err(ClusterError::Request(TriremeError::new(
                ErrorCode::PermissionDenied,
                "Permission denied: ACL bootstrap no longer allowed (an initial management token is configured)",
            )));
        }
        self.change_acl(|store, revision| {
            if store.bootstrapped {
                return Err(ClusterError::Request(TriremeError::new(
                    ErrorCode::PermissionDenied,
                    format!(
                        "Permission denied: ACL bootstrap no longer allowed (reset index: {})",
                        store.revision
                    ),
                )));
            }
            store.bootstrapped = true;
            let token = management_token(
                crate::new_uuid(),
                "Bootstrap Token (Global Management)",
                revision,
            );
            store
                .tokens
                .insert(token.accessor_id.clone(), token.clone());
            Ok(store.with_names(token))
        })
        .await
    }

    /// Creates the configured initial management token unless a token has its secret.
    pub(crate) async fn ensure_initial_management_token(&self) -> Result<(), ClusterError> {
        let Some(secret) = self.acl.config.initial_management_token.clone() else {
            return Ok(());
        };
        check_secret(&secret).map_err(|_| {
            ClusterError::Config(
                "[acl] initial_management_token must be 1 to 256 printable ASCII characters".into(),
            )
        })?;
        if self.acl.cache().find(&secret).is_some() {
            return Ok(());
        }
        self.change_acl(|store, revision| {
            if store
                .tokens
                .values()
                .any(|t| same_secret(&t.secret_id, &secret))
            {
                return Ok(());
            }
            store.bootstrapped = true;
            let mut token = management_token(secret.clone(), "Initial Management Token", revision);
            token.accessor_id = crate::new_uuid();
            store.tokens.insert(token.accessor_id.clone(), token);
            Ok(())
        })
        .await?;
        tracing::info!("created the initial management token");
        Ok(())
    }

    /// All policies, by name.
    pub async fn acl_policies(&self) -> Result<Vec<AclPolicy>, ClusterError> {
        let (store, _) = self.read_acl_store().await?;
        let mut policies: Vec<AclPolicy> = store.policies.into_values().collect();
        policies.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(policies)
    }

    /// One policy by id.
    pub async fn acl_policy(&self, id: &str) -> Result<AclPolicy, ClusterError> {
        let (store, _) = self.read_acl_store().await?;
        store
            .policies
            .get(id)
            .cloned()
            .ok_or_else(|| not_found(format!("ACL policy not found: \"{id}\"")))
    }

    /// One policy by name.
    pub async fn acl_policy_by_name(&self, name: &str) -> Result<AclPolicy, ClusterError> {
        let (store, _) = self.read_acl_store().await?;
        store
            .policy_by_name(name)
            .cloned()
            .ok_or_else(|| not_found(format!("ACL policy not found: \"{name}\"")))
    }

    /// Creates a policy (`id` empty) or updates the policy `id`.
    pub async fn acl_put_policy(
        &self,
        id: Option<&str>,
        request: PolicyRequest,
    ) -> Result<AclPolicy, ClusterError> {
        check_policy_fields(&request)?;
        self.change_acl(|store, revision| {
            if store
                .policy_by_name(&request.name)
                .is_some_and(|p| Some(p.id.as_str()) != id)
            {
                return Err(invalid(format!(
                    "Invalid Policy: A Policy with Name \"{}\" already exists",
                    request.name
                )));
            }
            let policy = match id {
                None => AclPolicy {
                    id: crate::new_uuid(),
                    create_index: revision,
                    modify_index: revision,
                    ..request.clone()
                },
                Some(id) => {
                    let Some(old) = store.policies.get(id) else {
                        return Err(not_found(format!("ACL policy not found: \"{id}\"")));
                    };
                    if id == GLOBAL_MANAGEMENT_ID && request.rules != old.rules {
                        return Err(invalid(
                            "Changing the Rules for the builtin global-management policy is not permitted",
                        ));
                    }
                    AclPolicy {
                        id: id.to_string(),
                        create_index: old.create_index,
                        modify_index: revision,
                        ..request.clone()
                    }
                }
            };
            store.policies.insert(policy.id.clone(), policy.clone());
            Ok(policy)
        })
        .await
    }

    /// Deletes the policy `id`; tokens linking to it lose its rules.
    pub async fn acl_delete_policy(&self, id: &str) -> Result<(), ClusterError> {
        if id == GLOBAL_MANAGEMENT_ID {
            return Err(invalid(
                "Delete of the builtin global-management policy is not permitted",
            ));
        }
        self.change_acl(|store, revision| {
            if store.policies.remove(id).is_none() {
                return Err(not_found(format!("ACL policy not found: \"{id}\"")));
            }
            for token in store.tokens.values_mut() {
                let before = token.policies.len();
                token.policies.retain(|link| link.id != id);
                if token.policies.len() != before {
                    token.modify_index = revision;
                }
            }
            Ok(())
        })
        .await
    }

    /// All tokens, by accessor id; secrets shown only when `show_secrets`.
    pub async fn acl_tokens(&self, show_secrets: bool) -> Result<Vec<AclToken>, ClusterError> {
        let (store, _) = self.read_acl_store().await?;
        Ok(store
            .tokens
            .values()
            .map(|t| {
                let mut t = store.with_names(t.clone());
                if !show_secrets {
                    t.secret_id = "<hidden>".into();
                }
                t
            })
            .collect())
    }

    /// One token by accessor id.
    pub async fn acl_token(&self, accessor_id: &str) -> Result<AclToken, ClusterError> {
        let (store, _) = self.read_acl_store().await?;
        let token = store
            .tokens
            .get(accessor_id)
            .cloned()
            .ok_or_else(|| not_found(format!("ACL token not found: \"{accessor_id}\"")))?;
        Ok(store.with_names(token))
    }

    /// Creates a token (`accessor` `None`) or updates the token `accessor`.
    pub async fn acl_put_token(
        &self,
        accessor: Option<&str>,
        request: TokenRequest,
    ) -> Result<AclToken, ClusterError> {
        if !request.roles.is_empty() {
            return Err(invalid(
                "ACL roles are not supported; link policies instead",
            ));
        }
        if request
            .expiration_ttl
            .as_ref()
            .is_some_and(|ttl| !ttl.is_null() && ttl != &serde_json::json!(0))
        {
            return Err(invalid("token expiration is not supported"));
        }
        if request.description.len() > MAX_DESCRIPTION_BYTES {
            return Err(invalid("the description is longer than 1 KiB"));
        }
        if !request.accessor_id.is_empty() && !crate::is_session_id(&request.accessor_id) {
            return Err(invalid("an AccessorID must be a UUID"));
        }
        if !request.secret_id.is_empty() {
            check_secret(&request.secret_id)?;
        }
        self.change_acl(|store, revision| {
            let policies = store.resolve_links(&request.policies)?;
            let token = match accessor {
                None => {
                    let accessor_id = if request.accessor_id.is_empty() {
                        crate::new_uuid()
                    } else {
                        request.accessor_id.clone()
                    };
                    if store.tokens.contains_key(&accessor_id) {
                        return Err(invalid("Invalid Token: AccessorID is already in use"));
                    }
                    let secret_id = if request.secret_id.is_empty() {
                        crate::new_uuid()
                    } else {
                        request.secret_id.clone()
                    };
                    if store
                        .tokens
                        .values()
                        .any(|t| same_secret(&t.secret_id, &secret_id))
                    {
                        return Err(invalid("Invalid Token: SecretID is already in use"));
                    }
                    AclToken {
                        accessor_id,
                        secret_id,
                        description: request.description.clone(),
                        policies,
                        local: request.local,
                        create_time: now_rfc3339(),
                        create_index: revision,
                        modify_index: revision,
                    }
                }
                Some(accessor) => {
                    let Some(old) = store.tokens.get(accessor) else {
                        return Err(not_found(format!("ACL token not found: \"{accessor}\"")));
                    };
                    if !request.accessor_id.is_empty() && request.accessor_id != accessor {
                        return Err(invalid("the AccessorID in the body differs from the path"));
                    }
                    if !request.secret_id.is_empty() && request.secret_id != old.secret_id {
                        return Err(invalid("Changing a token's SecretID is not permitted"));
                    }
                    AclToken {
                        description: request.description.clone(),
                        policies,
                        local: request.local,
                        modify_index: revision,
                        ..old.clone()
                    }
                }
            };
            store
                .tokens
                .insert(token.accessor_id.clone(), token.clone());
            Ok(token)
        })
        .await
    }

    /// Deletes the token `accessor`; `caller` (the request's own accessor) may not delete
    /// itself, and the anonymous token stays.
    pub async fn acl_delete_token(
        &self,
        accessor: &str,
        caller: Option<&str>,
    ) -> Result<(), ClusterError> {
        if accessor == ANONYMOUS_ACCESSOR {
            return Err(invalid("Delete of the anonymous token is not allowed"));
        }
        if caller == Some(accessor) {
            return Err(invalid(
                "Deletion of the request's authorization token is not permitted",
            ));
        }
        self.change_acl(|store, _| {
            store
                .tokens
                .remove(accessor)
                .map(|_| ())
                .ok_or_else(|| not_found(format!("ACL token not found: \"{accessor}\"")))
        })
        .await
    }
}

/// Creates the configured initial management token in the background, retrying while the
/// metadata group has no leader; every node configured with it tries, and the first wins.
pub(crate) fn spawn_initial_token(node: &Arc<Node>) {
    if !node.acl.config.enabled || node.acl.config.initial_management_token.is_none() {
        return;
    }
    let node = Arc::downgrade(node);
    tokio::spawn(async move {
        let mut delay = std::time::Duration::from_millis(100);
        loop {
            let Some(node) = node.upgrade() else { return };
            if node.is_stopping() {
                return;
            }
            match node.ensure_initial_management_token().await {
                Ok(()) => return,
                Err(ClusterError::Config(message)) => {
                    tracing::error!("{message}");
                    return;
                }
                Err(e) => tracing::info!(error = %e, "initial management token not written yet"),
            }
            drop(node);
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(std::time::Duration::from_secs(2));
        }
    });
}

fn management_token(secret: String, description: &str, revision: u64) -> AclToken {
    AclToken {
        accessor_id: crate::new_uuid(),
        secret_id: secret,
        description: description.into(),
        policies: vec![PolicyLink {
            id: GLOBAL_MANAGEMENT_ID.into(),
            name: GLOBAL_MANAGEMENT_NAME.into(),
        }],
        local: false,
        create_time: now_rfc3339(),
        create_index: revision,
        modify_index: revision,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store_with(tokens: &[(&str, &[&str])]) -> AclStore {
        let mut store = AclStore::initial();
        store.bootstrapped = true;
        store.policies.insert(
            "p-read".into(),
            AclPolicy {
                id: "p-read".into(),
                name: "read".into(),
                description: String::new(),
                rules: "key_prefix \"\" { policy = \"read\" }".into(),
                datacenters: Vec::new(),
                create_index: 2,
                modify_index: 2,
            },
        );
        for (secret, policies) in tokens {
            let token = AclToken {
                accessor_id: crate::new_uuid(),
                secret_id: secret.to_string(),
                description: String::new(),
                policies: policies
                    .iter()
                    .map(|id| PolicyLink {
                        id: id.to_string(),
                        name: String::new(),
                    })
                    .collect(),
                local: false,
                create_time: String::new(),
                create_index: 3,
                modify_index: 3,
            };
            store.tokens.insert(token.accessor_id.clone(), token);
        }
        store
    }

    #[test]
    fn secrets_resolve_to_their_tokens_only() {
        let store = store_with(&[
            ("s-admin", &[GLOBAL_MANAGEMENT_ID]),
            ("s-read", &["p-read"]),
        ]);
        let cache = AclCache::build(5, store, DefaultPolicy::Deny);
        let admin = cache.find("s-admin").unwrap();
        assert!(admin.authorizer.acl_write());
        let reader = cache.find("s-read").unwrap();
        assert!(reader.authorizer.key_read(b"any"));
        assert!(!reader.authorizer.key_write(b"any"));
        assert!(cache.find("s-rea").is_none());
        assert!(
            cache.find("anonymous").is_none(),
            "the anonymous token has no usable secret"
        );
        let anonymous = cache.anonymous.as_ref().unwrap();
        assert!(!anonymous.authorizer.key_read(b"any"));
    }

    #[test]
    fn a_store_without_a_manager_is_refused_once_bootstrapped() {
        let store = store_with(&[("s-read", &["p-read"])]);
        assert!(store.check_manageable(DefaultPolicy::Allow).is_err());
        let store = store_with(&[("s-admin", &[GLOBAL_MANAGEMENT_ID])]);
        assert!(store.check_manageable(DefaultPolicy::Deny).is_ok());
        let mut fresh = AclStore::initial();
        assert!(fresh.check_manageable(DefaultPolicy::Deny).is_ok());
        fresh.bootstrapped = true;
        assert!(fresh.check_manageable(DefaultPolicy::Deny).is_err());
    }

    #[test]
    fn links_resolve_by_id_or_name_and_drop_deleted_policies() {
        let mut store = store_with(&[]);
        let links = store
            .resolve_links(&[
                PolicyLink {
                    id: String::new(),
                    name: "read".into(),
                },
                PolicyLink {
                    id: "p-read".into(),
                    name: String::new(),
                },
            ])
            .unwrap();
        assert_eq!(links.len(), 1, "one link per policy");
        assert_eq!(links[0].id, "p-read");
        assert!(
            store
                .resolve_links(&[PolicyLink {
                    id: String::new(),
                    name: "nope".into(),
                }])
                .is_err()
        );
        let token = AclToken {
            accessor_id: "a".into(),
            secret_id: "s".into(),
            description: String::new(),
            policies: links,
            local: false,
            create_time: String::new(),
            create_index: 0,
            modify_index: 0,
        };
        store.policies.remove("p-read");
        assert!(store.with_names(token).policies.is_empty());
    }

    #[test]
    fn go_clients_null_lists_read_as_empty() {
        let policy: AclPolicy =
            serde_json::from_str(r#"{"Name":"p","Rules":"","Datacenters":null}"#).unwrap();
        assert!(policy.datacenters.is_empty());
        let token: TokenRequest =
            serde_json::from_str(r#"{"Policies":null,"Roles":null,"Description":"d"}"#).unwrap();
        assert!(token.policies.is_empty() && token.roles.is_empty());
    }

    #[test]
    fn secrets_compare_whole() {
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abc", "abd"));
        assert!(!same_secret("abc", "abcd"));
        assert!(!same_secret("", "a"));
    }
}
