//! The typed requests and outcomes of the writes a front end asks of a [`Node`]: what to
//! change, and what came of it, with no log command or applied result in between.
//!
//! A write goes through a shard's log as a [`Command`] and comes back as a
//! [`CommandResult`]. Front ends see those only in a transaction ([`TransactionRequest`]),
//! whose steps are log commands by design: a Redis `MULTI` or a Consul `/v1/txn` is a list of
//! commands the state machine applies whole, and any command may be one of them. Each
//! outcome type reads its result in [`FromApplied`], the one place a result becomes an
//! outcome, for a lone write and for a transaction's step alike; a result of another shape is
//! a [`ClusterError::Internal`], never a guess.
//!
//! [`Node`]: crate::Node

use crate::ClusterError;
use bytes::Bytes;
use trireme_types::{Command, CommandResult, ErrorCode, KeyCheck, PutCondition, Record, TtlUpdate};

/// Writes one key (Consul `PUT`, Redis `SET`, a document `PUT`), possibly on a condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PutRequest {
    /// The key.
    pub key: Bytes,
    /// The new value.
    pub value: Bytes,
    /// Client flags (Consul's `Flags`); `None` keeps the key's flags (0 for a new key).
    pub flags: Option<u64>,
    /// When the write may happen (check-and-set, `NX`, `XX`, `If-Match`).
    pub condition: PutCondition,
    /// What happens to the key's expiry.
    pub ttl: TtlUpdate,
    /// Whether the outcome carries the record the write replaced (see
    /// [`PutRequest::return_previous`]).
    pub return_previous: bool,
}

impl PutRequest {
    /// An unconditional write that keeps the key's flags and clears its expiry: a plain
    /// `SET`. The other fields are set with the methods below.
    pub fn new(key: impl Into<Bytes>, value: impl Into<Bytes>) -> Self {
        Self {
            key: key.into(),
            value: value.into(),
            flags: None,
            condition: PutCondition::Always,
            ttl: TtlUpdate::Clear,
            return_previous: false,
        }
    }

    /// Asks for the record the write replaces in [`PutOutcome::previous`] (`SET ... GET`).
    /// Without it, `previous` is given only when the write was refused, and a write whose
    /// condition holds does not read the old record.
    #[must_use]
    pub fn return_previous(mut self) -> Self {
        self.return_previous = true;
        self
    }

    /// Sets the key's flags to `flags`.
    #[must_use]
    pub fn flags(mut self, flags: u64) -> Self {
        self.flags = Some(flags);
        self
    }

    /// Writes only when `condition` holds.
    #[must_use]
    pub fn condition(mut self, condition: PutCondition) -> Self {
        self.condition = condition;
        self
    }

    /// Changes the expiry as `ttl` says.
    #[must_use]
    pub fn ttl(mut self, ttl: TtlUpdate) -> Self {
        self.ttl = ttl;
        self
    }

    /// The log command this request becomes (also as one step of a transaction).
    pub fn into_command(self) -> Command {
        Command::Put {
            key: self.key,
            value: self.value,
            flags: self.flags,
            condition: self.condition,
            ttl: self.ttl,
            return_previous: self.return_previous,
        }
    }
}

/// What came of a [`PutRequest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PutOutcome {
    /// False when the condition did not hold (nothing changed).
    pub written: bool,
    /// The live record the key held before, if any: when the write was refused (why its
    /// condition failed), or when the request asked for it ([`PutRequest::return_previous`]).
    pub previous: Option<Record>,
    /// The log index the write got: the key's new `ModifyIndex`, a document's new ref.
    pub index: u64,
}

/// Deletes one key, possibly only at a given `ModifyIndex` (Consul `?cas=N`, `If-Match`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteRequest {
    /// The key.
    pub key: Bytes,
    /// Delete only if the key's `ModifyIndex` is this.
    pub if_modify_index: Option<u64>,
}

impl DeleteRequest {
    /// An unconditional delete.
    pub fn new(key: impl Into<Bytes>) -> Self {
        Self {
            key: key.into(),
            if_modify_index: None,
        }
    }

    /// Deletes only if the key is at `ModifyIndex` `index`; `None` deletes whatever it is.
    #[must_use]
    pub fn if_modify_index(mut self, index: Option<u64>) -> Self {
        self.if_modify_index = index;
        self
    }
}

/// What came of an [`incr`](crate::Node::incr): the new value, or why there is none (the key
/// is left as it was).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IncrOutcome {
    /// The value after the increment.
    Value(i64),
    /// The key holds something that is not a 64-bit integer.
    NotInteger,
    /// The result would not fit in 64 bits.
    Overflow,
}

/// What came of an [`edit`](crate::Node::edit) of a string in place: the value it answers
/// (after the change, or as found for `GETDEL`/`GETEX`; `None` for a missing key), or why
/// the key was left as it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EditOutcome {
    /// The value to answer.
    Value(Option<Bytes>),
    /// The stored value or the increment is not a decimal number (`INCRBYFLOAT`).
    NotFloat,
    /// The sum would be infinite (`INCRBYFLOAT`).
    NotFinite,
    /// The value would pass the configured size limit (`APPEND`, `SETRANGE`).
    TooLong,
}

/// Keys removed by a delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deleted(pub u64);

/// Whether an expiry change found its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TtlChanged(pub bool);

/// A write that reports nothing (`MSET`, a reap).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Done;

/// How an outcome is read from the result of applying its command; the only place a
/// [`CommandResult`] is looked at outside the state machine. Public for the results of a
/// [`transaction`](crate::Node::transaction), which come back one per queued command.
pub trait FromApplied: Sized {
    /// What the write was, for the error when the result does not fit.
    const WHAT: &'static str;

    /// The outcome, or `result` back when it is not of this write's shape. The error is the
    /// result itself, handed back unchanged on a path taken only by a bug: boxing it would
    /// cost an allocation for nothing.
    #[allow(clippy::result_large_err)]
    fn from_applied(result: CommandResult) -> Result<Self, CommandResult>;

    /// The outcome, or an internal error naming the write and the result. The result is
    /// only formatted when it does not fit: a put's carries the old value, and formatting
    /// that on every write once cost a sixth of the server's CPU.
    fn read(result: CommandResult) -> Result<Self, ClusterError> {
        if is_wrong_type(&result) {
            return Err(wrong_type());
        }
        Self::from_applied(result).map_err(|other| {
            ClusterError::Internal(format!("{} answered with {other:?}", Self::WHAT))
        })
    }
}

/// Whether a command was refused because its key holds another type.
fn is_wrong_type(result: &CommandResult) -> bool {
    matches!(
        result,
        CommandResult::Incr(Err(ErrorCode::WrongType))
            | CommandResult::Edited(Err(ErrorCode::WrongType))
            | CommandResult::Hash(Err(ErrorCode::WrongType))
            | CommandResult::SetMembers(Err(ErrorCode::WrongType))
            | CommandResult::List(Err(ErrorCode::WrongType))
            | CommandResult::SortedSet(Err(ErrorCode::WrongType))
    )
}

/// The error of a command on a key of another type, in Redis's words.
pub(crate) fn wrong_type() -> ClusterError {
    ClusterError::Request(trireme_types::TriremeError::new(
        ErrorCode::WrongType,
        "Operation against a key holding the wrong kind of value",
    ))
}

/// What a Redis hash command answered, or why it changed nothing: `NotInteger` (the field is
/// not an integer), `InvalidArgument` (not a decimal number), `Overflow` (the result does not
/// fit, or is infinite), `ValueTooLarge` (the hash would pass its field limit). A key of
/// another type is an error of its own ([`ErrorCode::WrongType`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HashOutcome(pub Result<trireme_types::HashAnswer, ErrorCode>);

impl FromApplied for HashOutcome {
    const WHAT: &'static str = "a hash command";

    fn from_applied(result: CommandResult) -> Result<Self, CommandResult> {
        match result {
            CommandResult::Hash(answer) => Ok(HashOutcome(answer)),
            other => Err(other),
        }
    }
}

/// What a Redis set command answered, or why it changed nothing (`ValueTooLarge`: the set
/// would pass its member limit). A key of another type is an error of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetOutcome(pub Result<trireme_types::SetAnswer, ErrorCode>);

impl FromApplied for SetOutcome {
    const WHAT: &'static str = "a set command";

    fn from_applied(result: CommandResult) -> Result<Self, CommandResult> {
        match result {
            CommandResult::SetMembers(answer) => Ok(SetOutcome(answer)),
            other => Err(other),
        }
    }
}

/// What a Redis list command answered, or why it changed nothing: `NotFound` (`LSET` on a
/// missing list), `InvalidArgument` (an index out of range), `ValueTooLarge` (the list would
/// pass its length limit). A key of another type is an error of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListOutcome(pub Result<trireme_types::ListAnswer, ErrorCode>);

impl FromApplied for ListOutcome {
    const WHAT: &'static str = "a list command";

    fn from_applied(result: CommandResult) -> Result<Self, CommandResult> {
        match result {
            CommandResult::List(answer) => Ok(ListOutcome(answer)),
            other => Err(other),
        }
    }
}

/// What a Redis sorted set command answered, or why it changed nothing: `InvalidArgument`
/// (an increment would make a score NaN), `ValueTooLarge` (the set would pass its member
/// limit). A key of another type is an error of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SortedSetOutcome(pub Result<trireme_types::SortedSetAnswer, ErrorCode>);

impl FromApplied for SortedSetOutcome {
    const WHAT: &'static str = "a sorted set command";

    fn from_applied(result: CommandResult) -> Result<Self, CommandResult> {
        match result {
            CommandResult::SortedSet(answer) => Ok(SortedSetOutcome(answer)),
            other => Err(other),
        }
    }
}

impl FromApplied for PutOutcome {
    const WHAT: &'static str = "a put";

    fn from_applied(result: CommandResult) -> Result<Self, CommandResult> {
        match result {
            CommandResult::Put {
                written,
                previous,
                index,
            } => Ok(PutOutcome {
                written,
                previous,
                index,
            }),
            other => Err(other),
        }
    }
}

impl FromApplied for Deleted {
    const WHAT: &'static str = "a delete";

    fn from_applied(result: CommandResult) -> Result<Self, CommandResult> {
        match result {
            CommandResult::Deleted(n) => Ok(Deleted(n)),
            other => Err(other),
        }
    }
}

impl FromApplied for IncrOutcome {
    const WHAT: &'static str = "an increment";

    fn from_applied(result: CommandResult) -> Result<Self, CommandResult> {
        match result {
            CommandResult::Incr(Ok(n)) => Ok(IncrOutcome::Value(n)),
            CommandResult::Incr(Err(ErrorCode::NotInteger)) => Ok(IncrOutcome::NotInteger),
            CommandResult::Incr(Err(ErrorCode::Overflow)) => Ok(IncrOutcome::Overflow),
            other => Err(other),
        }
    }
}

impl FromApplied for EditOutcome {
    const WHAT: &'static str = "an edit";

    fn from_applied(result: CommandResult) -> Result<Self, CommandResult> {
        match result {
            CommandResult::Edited(Ok(value)) => Ok(EditOutcome::Value(value)),
            CommandResult::Edited(Err(ErrorCode::InvalidArgument)) => Ok(EditOutcome::NotFloat),
            CommandResult::Edited(Err(ErrorCode::Overflow)) => Ok(EditOutcome::NotFinite),
            CommandResult::Edited(Err(ErrorCode::ValueTooLarge)) => Ok(EditOutcome::TooLong),
            other => Err(other),
        }
    }
}

/// Each key's live record, as a [`Command::Read`] inside a transaction found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Records(pub Vec<Option<Record>>);

impl FromApplied for Records {
    const WHAT: &'static str = "a read";

    fn from_applied(result: CommandResult) -> Result<Self, CommandResult> {
        match result {
            CommandResult::Records(records) => Ok(Records(records)),
            other => Err(other),
        }
    }
}

/// What came of a [`transaction`](crate::Node::transaction): each command's result, or the
/// position of the first check that failed (nothing was applied).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionOutcome(pub Result<Vec<CommandResult>, u32>);

impl FromApplied for TransactionOutcome {
    const WHAT: &'static str = "a transaction";

    fn from_applied(result: CommandResult) -> Result<Self, CommandResult> {
        match result {
            CommandResult::Transaction(results) => Ok(TransactionOutcome(results)),
            other => Err(other),
        }
    }
}

/// A Redis transaction: keys watched at the index they had, and the commands to apply
/// together if none of them changed since. Every key must be in one shard (one slot, for
/// Redis Cluster clients).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TransactionRequest {
    /// Keys and what must hold of each before anything is applied.
    pub watches: Vec<(Bytes, KeyCheck)>,
    /// The queued commands.
    pub commands: Vec<Command>,
}

impl FromApplied for TtlChanged {
    const WHAT: &'static str = "an expiry change";

    fn from_applied(result: CommandResult) -> Result<Self, CommandResult> {
        match result {
            CommandResult::TtlSet(changed) => Ok(TtlChanged(changed)),
            other => Err(other),
        }
    }
}

impl FromApplied for trireme_types::LockOutcome {
    const WHAT: &'static str = "a lock operation";

    fn from_applied(result: CommandResult) -> Result<Self, CommandResult> {
        match result {
            CommandResult::Lock(outcome) => Ok(outcome),
            other => Err(other),
        }
    }
}

impl FromApplied for Done {
    const WHAT: &'static str = "a write without a result";

    fn from_applied(result: CommandResult) -> Result<Self, CommandResult> {
        match result {
            CommandResult::Done => Ok(Done),
            other => Err(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_of_the_wrong_shape_are_internal_errors() {
        let put = PutOutcome::read(CommandResult::Put {
            written: true,
            previous: None,
            index: 4,
        })
        .unwrap();
        assert_eq!(put.index, 4);
        let err = PutOutcome::read(CommandResult::Deleted(1)).unwrap_err();
        assert!(matches!(err, ClusterError::Internal(_)), "{err:?}");
        assert_eq!(err.to_client().code, ErrorCode::Internal);
        assert!(
            err.to_string().contains("a put answered with Deleted(1)"),
            "{err}"
        );
        assert!(Deleted::read(CommandResult::Done).is_err());
        assert!(TtlChanged::read(CommandResult::Incr(Ok(1))).is_err());
        assert!(Done::read(CommandResult::TtlSet(true)).is_err());
    }

    #[test]
    fn increments_report_only_the_failures_they_can_have() {
        let read = |r| IncrOutcome::read(CommandResult::Incr(r));
        assert_eq!(read(Ok(5)).unwrap(), IncrOutcome::Value(5));
        assert_eq!(
            read(Err(ErrorCode::NotInteger)).unwrap(),
            IncrOutcome::NotInteger
        );
        assert_eq!(
            read(Err(ErrorCode::Overflow)).unwrap(),
            IncrOutcome::Overflow
        );
        assert!(read(Err(ErrorCode::NotFound)).is_err());
    }

    #[test]
    fn a_put_request_defaults_to_a_plain_set() {
        let put = PutRequest::new(Bytes::from_static(b"k"), Bytes::from_static(b"v"));
        assert_eq!(put.flags, None);
        assert_eq!(put.condition, PutCondition::Always);
        assert_eq!(put.ttl, TtlUpdate::Clear);
        let put = put
            .flags(3)
            .condition(PutCondition::IfAbsent)
            .ttl(TtlUpdate::Keep);
        assert_eq!(
            put.into_command(),
            Command::Put {
                key: Bytes::from_static(b"k"),
                value: Bytes::from_static(b"v"),
                flags: Some(3),
                condition: PutCondition::IfAbsent,
                ttl: TtlUpdate::Keep,
                return_previous: false,
            }
        );
    }
}
