//! `PUT /v1/txn`: Consul's KV transactions, all or nothing.
//!
//! The operations become one transaction, applied in order: each condition (`cas`,
//! `check-index`, `check-not-exists`, `delete-cas`, and `get`'s "the key exists") is judged on
//! the state the operations before it left, as Consul judges it, and if one fails nothing of
//! the transaction takes effect. Keys in one shard make one entry of that shard's log; keys in
//! several shards are committed atomically across them (`trireme_cluster`'s `txn` module:
//! two-phase commit with intents). `lock`, `unlock` and `check-session` are conditions too (a
//! lock that cannot be taken undoes the transaction); a `lock` first notes the key in its
//! session's row, as an acquire does. Prefix operations (`get-tree`, `delete-tree`) cover
//! every shard, so a transaction with one always commits across shards; its prefixes are
//! held from the prepare to the resolve, so no other write lands under them in between.

use crate::access::Access;
use crate::routes::request_body;
use crate::{ApiError, AppState};
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use serde::{Deserialize, Serialize};
use trireme_cluster::{
    Command, CommandResult, FromApplied, KeyCheck, PutCondition, PutOutcome, PutRequest, Records,
    TransactionRequest,
};
use trireme_types::{ErrorCode, LockOp, Record, TriremeError};

/// One element of the request body: Consul also has `Node`, `Service` and `Check`
/// operations, which are refused here.
#[derive(Deserialize, Debug)]
struct TxnOp {
    #[serde(rename = "KV")]
    kv: Option<KvOp>,
    #[serde(rename = "Node")]
    node: Option<serde_json::Value>,
    #[serde(rename = "Service")]
    service: Option<serde_json::Value>,
    #[serde(rename = "Check")]
    check: Option<serde_json::Value>,
}

#[derive(Deserialize, Debug)]
#[serde(rename_all = "PascalCase")]
struct KvOp {
    verb: String,
    #[serde(default)]
    key: String,
    /// Base64, as Consul sends `[]byte`.
    #[serde(default)]
    value: Option<String>,
    #[serde(default)]
    flags: u64,
    #[serde(default)]
    index: u64,
    #[serde(default)]
    session: String,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct TxnResponse {
    results: Option<Vec<TxnResult>>,
    errors: Option<Vec<TxnError>>,
}

#[derive(Serialize)]
struct TxnResult {
    #[serde(rename = "KV")]
    kv: KvEntry,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct KvEntry {
    lock_index: u64,
    key: String,
    flags: u64,
    value: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    session: Option<String>,
    create_index: u64,
    modify_index: u64,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct TxnError {
    op_index: usize,
    what: String,
}

/// What one operation answers once the transaction applied.
enum Answer {
    /// Nothing (deletes, `check-not-exists`).
    None,
    /// The entry written (`set`, `cas`), without its value.
    Written { key: String, flags: u64 },
    /// The entry read (`get` with its value, `check-index` without).
    Read { key: String, with_value: bool },
    /// Every entry under a prefix the caller may read (`get-tree`).
    Tree,
}

/// A condition's operation, verb, key and check, to say what failed.
struct Condition {
    op: usize,
    verb: &'static str,
    key: Bytes,
    check: KeyCheck,
    /// The session of a lock operation.
    session: String,
}

/// `PUT /v1/txn`.
///
/// An operation the caller's token may not do fails the whole transaction with a 409 that
/// names it, as Consul answers.
pub(crate) async fn txn(
    State(state): State<AppState>,
    access: Access,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = match request_body(body) {
        Ok(body) => body,
        Err(response) => return Ok(*response),
    };
    let ops: Vec<TxnOp> = serde_json::from_slice(&body)
        .map_err(|e| ApiError::invalid(format!("Failed to parse body: {e}")))?;
    let max_ops = state.node.config().limits.max_txn_ops;
    if ops.len() > max_ops {
        return Err(ApiError(TriremeError::new(
            ErrorCode::RequestTooLarge,
            format!(
                "Transaction contains too many operations ({} > {max_ops})",
                ops.len()
            ),
        )));
    }
    // By position in `commands`: the condition a `Check` stands for.
    let mut conditions: Vec<Option<Condition>> = Vec::new();
    let mut commands = Vec::new();
    let mut answers = Vec::new();
    // The `lock` operations: (operation, session, key), noted in their sessions first.
    let mut locks: Vec<(usize, String, Bytes)> = Vec::new();
    let mut denied: Vec<TxnError> = Vec::new();
    for (i, op) in ops.into_iter().enumerate() {
        let kv = match op {
            TxnOp { kv: Some(kv), .. } => kv,
            TxnOp {
                node,
                service,
                check,
                ..
            } if node.is_some() || service.is_some() || check.is_some() => {
                return Err(ApiError::invalid(format!(
                    "operation {i}: only KV operations are supported in transactions"
                )));
            }
            _ => return Err(ApiError::invalid(format!("operation {i} is empty"))),
        };
        let verb = kv.verb.as_str();
        // A tree delete may cover every key, as in Consul.
        if kv.key.is_empty() && verb != "delete-tree" {
            return Err(ApiError::invalid(format!(
                "operation {i}: Key cannot be empty"
            )));
        }
        let key = Bytes::from(kv.key.clone().into_bytes());
        let reads_only = matches!(
            verb,
            "get" | "check-index" | "check-not-exists" | "check-session"
        );
        let allowed = match verb {
            "get-tree" => access.can().key_list(&key),
            "delete-tree" => access.can().key_write_prefix(&key),
            _ if reads_only => access.can().key_read(&key),
            _ => access.can().key_write(&key),
        };
        if !allowed {
            denied.push(TxnError {
                op_index: i,
                what: "Permission denied".into(),
            });
        }
        let value = match &kv.value {
            Some(text) => Bytes::from(
                base64::engine::general_purpose::STANDARD
                    .decode(text)
                    .map_err(|e| ApiError::invalid(format!("operation {i}: Value: {e}")))?,
            ),
            None => Bytes::new(),
        };
        let mut condition = |check| {
            commands.push(Command::Check {
                key: key.clone(),
                check,
            });
            answers.push(Answer::None);
            conditions.push(Some(Condition {
                op: i,
                verb: known_verb(&kv.verb),
                key: key.clone(),
                check,
                session: String::new(),
            }));
        };
        let put = || {
            PutRequest::new(key.clone(), value.clone())
                .flags(kv.flags)
                .condition(PutCondition::Always)
                // The answer's CreateIndex and lock come from the record it replaces.
                .return_previous()
                .into_command()
        };
        let read = || Command::Read {
            keys: vec![key.clone()],
        };
        let delete = || Command::Delete {
            keys: vec![key.clone()],
            cas: None,
        };
        let written = Answer::Written {
            key: kv.key.clone(),
            flags: kv.flags,
        };
        match verb {
            "set" => {
                commands.push(put());
                answers.push(written);
            }
            "cas" => {
                condition(KeyCheck::At((kv.index > 0).then_some(kv.index)));
                commands.push(put());
                answers.push(written);
            }
            "get" | "check-index" => {
                if verb == "get" {
                    condition(KeyCheck::Exists);
                } else {
                    condition(KeyCheck::At(Some(kv.index)));
                }
                commands.push(read());
                answers.push(Answer::Read {
                    key: kv.key.clone(),
                    with_value: verb == "get",
                });
            }
            "check-not-exists" => condition(KeyCheck::At(None)),
            "delete" => {
                commands.push(delete());
                answers.push(Answer::None);
            }
            "delete-cas" => {
                // Deleting a key that is already gone succeeds, as in Consul.
                condition(KeyCheck::AtOrMissing(kv.index));
                commands.push(delete());
                answers.push(Answer::None);
            }
            "get-tree" => {
                commands.push(Command::ReadPrefix {
                    prefix: key.clone(),
                });
                answers.push(Answer::Tree);
            }
            "delete-tree" => {
                commands.push(Command::DeletePrefix {
                    prefix: key.clone(),
                });
                answers.push(Answer::None);
            }
            "lock" | "unlock" | "check-session" => {
                if kv.session.is_empty() {
                    return Err(ApiError::invalid(format!(
                        "operation {i}: {verb} needs a Session"
                    )));
                }
                let session = Bytes::from(kv.session.clone().into_bytes());
                let op = match verb {
                    "lock" => {
                        locks.push((i, kv.session.clone(), key.clone()));
                        LockOp::Acquire {
                            session,
                            value: value.clone(),
                            flags: kv.flags,
                        }
                    }
                    "unlock" => LockOp::Release {
                        session,
                        value: value.clone(),
                        flags: kv.flags,
                    },
                    _ => LockOp::CheckHeld { session },
                };
                commands.push(Command::Lock {
                    key: key.clone(),
                    op,
                });
                answers.push(Answer::None);
                conditions.resize_with(commands.len() - 1, || None);
                conditions.push(Some(Condition {
                    op: i,
                    verb: known_verb(verb),
                    key: key.clone(),
                    check: KeyCheck::Exists,
                    session: kv.session.clone(),
                }));
                commands.push(read());
                answers.push(Answer::Read {
                    key: kv.key.clone(),
                    with_value: false,
                });
            }
            other => {
                return Err(ApiError::invalid(format!(
                    "operation {i}: unknown KV verb {other:?}"
                )));
            }
        }
        // Each operation's check, if it has one, comes first among its commands.
        conditions.resize_with(commands.len(), || None);
    }
    if !denied.is_empty() {
        return Ok(conflict(denied));
    }
    for (op, session, key) in locks {
        match state.node.note_lock(&session, key).await {
            Ok(()) => {}
            Err(e) if e.to_client().code == ErrorCode::InvalidSession => {
                return Ok(conflict(vec![TxnError {
                    op_index: op,
                    what: e.to_client().message,
                }]));
            }
            Err(e) => return Err(e.into()),
        }
    }
    let request = TransactionRequest {
        watches: Vec::new(),
        commands,
    };
    let outcome = state.node.transaction(request).await?;
    let results = match outcome.0 {
        Ok(results) => results,
        Err(failed) => {
            let condition = conditions
                .get(failed as usize)
                .and_then(Option::as_ref)
                .ok_or_else(|| ApiError::invalid("a transaction check failed"))?;
            let what = failure_message(&state, condition).await;
            return Ok(conflict(vec![TxnError {
                op_index: condition.op,
                what,
            }]));
        }
    };
    let mut out = Vec::new();
    for (answer, result) in answers.into_iter().zip(results) {
        if let Answer::Tree = answer {
            let CommandResult::Entries { entries, .. } = result else {
                return Err(ApiError::invalid("a prefix read answered something else"));
            };
            out.extend(
                entries
                    .into_iter()
                    .filter(|(key, _)| access.can().key_read(key))
                    .map(|(key, record)| TxnResult {
                        kv: entry_from_record(
                            String::from_utf8_lossy(&key).into_owned(),
                            record,
                            true,
                        ),
                    }),
            );
            continue;
        }
        if let Some(entry) = entry_of(answer, result)? {
            out.push(TxnResult { kv: entry });
        }
    }
    let body = TxnResponse {
        results: (!out.is_empty()).then_some(out),
        errors: None,
    };
    Ok(json(StatusCode::OK, &body))
}

/// The entry an operation answers, if it answers one.
fn entry_of(answer: Answer, result: CommandResult) -> Result<Option<KvEntry>, ApiError> {
    Ok(match answer {
        Answer::None => None,
        Answer::Written { key, flags } => {
            let outcome = PutOutcome::read(result)?;
            let lock = outcome
                .previous
                .as_ref()
                .map(|r| r.lock.clone())
                .unwrap_or_default();
            Some(KvEntry {
                lock_index: lock.index,
                key,
                flags,
                value: None,
                session: lock
                    .session
                    .map(|s| String::from_utf8_lossy(&s).into_owned()),
                create_index: outcome
                    .previous
                    .as_ref()
                    .map_or(outcome.index, |r| r.create_index),
                modify_index: outcome.index,
            })
        }
        Answer::Read { key, with_value } => {
            let record: Option<Record> = Records::read(result)?.0.into_iter().next().flatten();
            record.map(|r| entry_from_record(key, r, with_value))
        }
        Answer::Tree => None,
    })
}

/// The entry of `key` read as `r`, with its value or without.
fn entry_from_record(key: String, r: Record, with_value: bool) -> KvEntry {
    KvEntry {
        lock_index: r.lock.index,
        key,
        flags: r.flags,
        // A Redis collection's row holds a count, not a value: it reads as empty.
        value: (with_value && !r.value.is_empty() && r.kind == trireme_types::ValueKind::String)
            .then(|| base64::engine::general_purpose::STANDARD.encode(&r.value)),
        session: r
            .lock
            .session
            .as_ref()
            .map(|s| String::from_utf8_lossy(s).into_owned()),
        create_index: r.create_index,
        modify_index: r.modify_index,
    }
}

/// The verb as a static name (for the conditions' messages).
fn known_verb(verb: &str) -> &'static str {
    match verb {
        "cas" => "cas",
        "get" => "get",
        "check-index" => "check-index",
        "check-not-exists" => "check-not-exists",
        "delete-cas" => "delete-cas",
        "lock" => "lock",
        "unlock" => "unlock",
        "check-session" => "check-session",
        _ => "other",
    }
}

/// What Consul says when a condition fails; `check-index` reads the key's index now.
async fn failure_message(state: &AppState, condition: &Condition) -> String {
    let key = String::from_utf8_lossy(&condition.key).into_owned();
    match condition.verb {
        "cas" => format!("failed to set key {key:?}, index is stale"),
        "delete-cas" => format!("failed to delete key {key:?}, index is stale"),
        "check-not-exists" => format!("key {key:?} exists"),
        "lock" => {
            format!("failed to lock key {key:?}, lock is already held or the session has ended")
        }
        "unlock" => {
            format!("failed to unlock key {key:?}, lock isn't held, or is held by another session")
        }
        "check-session" => {
            let current = current_record(state, &condition.key)
                .await
                .and_then(|r| r.lock.session)
                .map(|s| String::from_utf8_lossy(&s).into_owned())
                .unwrap_or_default();
            format!(
                "failed session check for key {key:?}, current session {current:?} != {:?}",
                condition.session
            )
        }
        "check-index" => {
            let current = current_record(state, &condition.key)
                .await
                .map(|r| r.modify_index);
            match (condition.check, current) {
                (KeyCheck::At(Some(expected)), Some(now)) => {
                    format!("current modify index {now} != {expected}")
                }
                _ => format!("key {key:?} doesn't exist"),
            }
        }
        _ => format!("key {key:?} doesn't exist"),
    }
}

/// The key as it is now, to explain a failed condition (`None` if it cannot be read).
async fn current_record(state: &AppState, key: &[u8]) -> Option<Record> {
    state
        .node
        .get_record(key, trireme_cluster::ReadMode::Default)
        .await
        .ok()
        .flatten()
}

fn conflict(errors: Vec<TxnError>) -> Response {
    json(
        StatusCode::CONFLICT,
        &TxnResponse {
            results: None,
            errors: Some(errors),
        },
    )
}

fn json(status: StatusCode, body: &impl Serialize) -> Response {
    match serde_json::to_vec(body) {
        Ok(bytes) => (status, [(header::CONTENT_TYPE, "application/json")], bytes).into_response(),
        Err(e) => ApiError(TriremeError::new(
            ErrorCode::Internal,
            format!("cannot render the answer: {e}"),
        ))
        .into_response(),
    }
}
