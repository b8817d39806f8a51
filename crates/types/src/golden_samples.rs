//! Golden encodings (see [`crate::golden`]) of every type here that the Raft log stores, a
//! shard keeps, a backup file holds or a node sends to another. Each enum's samples are named
//! through an exhaustive `match`, so a new variant does not compile until it gets a name here,
//! and the test fails until that name has a sample, whose bytes then go in the golden file.

use crate::backup::{
    BackupEntry, Frame, FrameReader, HashEntry, ListEntry, MAGIC, SetEntry, SortedSetEntry,
    encode_frame,
};
use crate::collection::{encode_count, encode_list};
use crate::golden::Golden;
use crate::session::{SessionBehavior, SessionState, session_key};
use crate::{
    Command, CommandResult, End, ErrorCode, GroupId, HashAnswer, HashOp, HashRead, KeyCheck,
    LexBound, ListAnswer, ListOp, ListRead, LockInfo, LockOp, LockOutcome, LogCommand, NodeId,
    PutCondition, Record, Score, ScoreBound, SessionOp, SetAnswer, SetCombine, SetOp, SetRead,
    ShardId, SortedSetAnswer, SortedSetOp, SortedSetRead, StringEdit, TriremeError, TtlUpdate,
    ValueKind, ZAddCompare, ZAddWhen, ZRange,
};
use bytes::Bytes;
use std::collections::BTreeSet;

/// Defines `fn $name(&T) -> &'static str`, an exhaustive match naming each variant's
/// sample, and `$all`, every name it gives, which the samples must cover.
macro_rules! names {
    (fn $name:ident($ty:ty), $all:ident {
        $($pat:pat $(if $guard:expr)? => $label:literal),+ $(,)?
    }) => {
        fn $name(value: &$ty) -> &'static str {
            match value {
                $($pat $(if $guard)? => $label),+
            }
        }
        const $all: &[&str] = &[$($label),+];
    };
}

const NOW: u64 = 1_700_000_000_000;
const LATER: u64 = 1_700_000_060_000;
const MAX_LEN: u64 = 512 * 1024;
const MAX_MEMBERS: u64 = 10_000_000;
const SESSION: &str = "adf4238a-882b-9ddc-4a9d-5b6758e4159e";

fn b(text: &'static str) -> Bytes {
    Bytes::from_static(text.as_bytes())
}

fn score(value: f64) -> Score {
    Score::new(value).expect("a number")
}

/// Checks every sample, after making sure every name `name` can give has one.
fn check_all<T>(
    golden: &mut Golden,
    samples: Vec<T>,
    name: fn(&T) -> &'static str,
    all: &[&str],
    check: impl Fn(&mut Golden, &str, &T),
) {
    let named: BTreeSet<&str> = samples.iter().map(name).collect();
    for wanted in all {
        assert!(
            named.contains(wanted),
            "no sample is named {wanted}: add one"
        );
    }
    for sample in &samples {
        check(golden, name(sample), sample);
    }
}

fn postcard<T>(golden: &mut Golden, name: &str, value: &T)
where
    T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
{
    golden.postcard(name, value);
}

#[test]
fn every_replicated_type_keeps_its_encoding() {
    let mut golden = Golden::open(concat!(env!("CARGO_MANIFEST_DIR"), "/golden/types.golden"));
    let g = &mut golden;

    // What the Raft log stores.
    check_all(g, commands(), command_name, COMMAND_NAMES, |g, name, c| {
        let entry = LogCommand {
            now_ms: NOW,
            command: c.clone(),
        };
        g.postcard(name, &entry);
    });
    check_all(
        g,
        put_conditions(),
        put_condition_name,
        PUT_CONDITION_NAMES,
        postcard,
    );
    check_all(
        g,
        ttl_updates(),
        ttl_update_name,
        TTL_UPDATE_NAMES,
        postcard,
    );
    check_all(g, ends(), end_name, END_NAMES, postcard);
    check_all(g, list_ops(), list_op_name, LIST_OP_NAMES, postcard);
    check_all(g, list_reads(), list_read_name, LIST_READ_NAMES, postcard);
    check_all(g, set_ops(), set_op_name, SET_OP_NAMES, postcard);
    check_all(
        g,
        set_combines(),
        set_combine_name,
        SET_COMBINE_NAMES,
        postcard,
    );
    check_all(g, set_reads(), set_read_name, SET_READ_NAMES, postcard);
    check_all(g, hash_ops(), hash_op_name, HASH_OP_NAMES, postcard);
    check_all(g, hash_reads(), hash_read_name, HASH_READ_NAMES, postcard);
    check_all(g, lock_ops(), lock_op_name, LOCK_OP_NAMES, postcard);
    check_all(
        g,
        session_ops(),
        session_op_name,
        SESSION_OP_NAMES,
        postcard,
    );
    check_all(g, key_checks(), key_check_name, KEY_CHECK_NAMES, postcard);
    check_all(
        g,
        string_edits(),
        string_edit_name,
        STRING_EDIT_NAMES,
        postcard,
    );
    check_all(g, lex_bounds(), lex_bound_name, LEX_BOUND_NAMES, postcard);
    check_all(g, z_ranges(), z_range_name, Z_RANGE_NAMES, postcard);
    check_all(
        g,
        z_add_whens(),
        z_add_when_name,
        Z_ADD_WHEN_NAMES,
        postcard,
    );
    check_all(
        g,
        z_add_compares(),
        z_add_compare_name,
        Z_ADD_COMPARE_NAMES,
        postcard,
    );
    check_all(
        g,
        sorted_set_ops(),
        sorted_set_op_name,
        SORTED_SET_OP_NAMES,
        postcard,
    );
    check_all(
        g,
        sorted_set_reads(),
        sorted_set_read_name,
        SORTED_SET_READ_NAMES,
        postcard,
    );

    // What applying a command answers, as it travels back to the node that asked.
    check_all(
        g,
        command_results(),
        command_result_name,
        COMMAND_RESULT_NAMES,
        postcard,
    );
    check_all(
        g,
        list_answers(),
        list_answer_name,
        LIST_ANSWER_NAMES,
        postcard,
    );
    check_all(
        g,
        set_answers(),
        set_answer_name,
        SET_ANSWER_NAMES,
        postcard,
    );
    check_all(
        g,
        hash_answers(),
        hash_answer_name,
        HASH_ANSWER_NAMES,
        postcard,
    );
    check_all(
        g,
        lock_outcomes(),
        lock_outcome_name,
        LOCK_OUTCOME_NAMES,
        postcard,
    );
    check_all(
        g,
        sorted_set_answers(),
        sorted_set_answer_name,
        SORTED_SET_ANSWER_NAMES,
        postcard,
    );
    check_all(
        g,
        error_codes(),
        error_code_name,
        ERROR_CODE_NAMES,
        postcard,
    );
    g.postcard(
        "trireme_error",
        &TriremeError::new(ErrorCode::PermissionDenied, "Permission denied"),
    );
    check_all(
        g,
        value_kinds(),
        value_kind_name,
        VALUE_KIND_NAMES,
        postcard,
    );
    g.postcard("id.node", &NodeId::from_name("n1"));
    g.postcard("id.shard", &ShardId(300));
    g.postcard("id.group", &GroupId(301));

    // What a shard stores: records in their own encoding, session rows in postcard.
    check_all(g, records(), record_name, RECORD_NAMES, |g, name, r| {
        g.check(
            name,
            r,
            |r| Ok(r.encode().to_vec()),
            |bytes| Record::decode(bytes).map_err(|e| e.to_string()),
        );
    });
    check_all(
        g,
        session_behaviors(),
        session_behavior_name,
        SESSION_BEHAVIOR_NAMES,
        postcard,
    );
    g.postcard("session_state", &session_state());
    g.postcard(
        "txn.record",
        &crate::txn::TxnRecord {
            state: crate::txn::TxnState::Pending,
            expires_ms: NOW + 2_000,
            keys: vec![b("vault/a"), b("vault/b")],
        },
    );
    g.postcard(
        "txn.intent",
        &crate::txn::Intent {
            txn: 9,
            record: crate::txn::record_key(9),
            expires_ms: NOW + 2_000,
            commands: vec![Command::Delete {
                keys: vec![b("vault/b")],
                cas: None,
            }],
        },
    );

    // What a backup file holds: the magic line, then length-prefixed frames.
    g.check(
        "backup.magic",
        &MAGIC.to_vec(),
        |magic| Ok(magic.clone()),
        |bytes| Ok(bytes.to_vec()),
    );
    check_all(g, frames(), frame_name, FRAME_NAMES, |g, name, f| {
        g.check(name, f, |f| Ok(encode_frame(f)), decode_frame);
    });

    golden.finish();
}

fn decode_frame(bytes: &[u8]) -> Result<Frame, String> {
    let mut reader = FrameReader::new();
    reader.push(bytes);
    match reader.next_frame() {
        Ok(Some((frame, _))) if !reader.has_partial() => Ok(frame),
        Ok(Some(_)) => Err("bytes after the frame".into()),
        Ok(None) => Err("not a whole frame".into()),
        Err(e) => Err(e.to_string()),
    }
}

// ---------------------------------------------------------------------------------------------
// Commands

names! {
    fn command_name(Command), COMMAND_NAMES {
        Command::Put { .. } => "command.put",
        Command::PutMany { .. } => "command.put_many",
        Command::Delete { .. } => "command.delete",
        Command::DeletePrefix { .. } => "command.delete_prefix",
        Command::Incr { .. } => "command.incr",
        Command::SetTtl { .. } => "command.set_ttl",
        Command::Reap { .. } => "command.reap",
        Command::Batch(_) => "command.batch",
        Command::Split { .. } => "command.split",
        Command::Edit { .. } => "command.edit",
        Command::Check { .. } => "command.check",
        Command::Read { .. } => "command.read",
        Command::Transaction { .. } => "command.transaction",
        Command::Lock { .. } => "command.lock",
        Command::Session { .. } => "command.session",
        Command::Hash { .. } => "command.hash",
        Command::SetMembers { .. } => "command.set_members",
        Command::List { .. } => "command.list",
        Command::SortedSet { .. } => "command.sorted_set",
        Command::Prepare { .. } => "command.prepare",
        Command::Decide { .. } => "command.decide",
        Command::Resolve { .. } => "command.resolve",
        Command::Forget { .. } => "command.forget",
        Command::ResolveMany { .. } => "command.resolve_many",
        Command::ReadPrefix { .. } => "command.read_prefix",
        Command::OwnsSlots { .. } => "command.owns_slots",
    }
}

fn commands() -> Vec<Command> {
    vec![
        Command::Put {
            key: b("user:42"),
            value: b("alice"),
            flags: Some(7),
            condition: PutCondition::IfModifyIndex(12),
            ttl: TtlUpdate::At(LATER),
            return_previous: true,
        },
        Command::PutMany {
            pairs: vec![(b("a"), b("1")), (b("b"), b("2"))],
        },
        Command::Delete {
            keys: vec![b("user:42")],
            cas: Some(12),
        },
        Command::DeletePrefix { prefix: b("app/") },
        Command::Incr {
            key: b("counter"),
            delta: -5,
        },
        Command::SetTtl {
            key: b("user:42"),
            ttl: TtlUpdate::At(LATER),
        },
        Command::Reap {
            keys: vec![b("old:1"), b("old:2")],
        },
        Command::Batch(vec![
            Command::Incr {
                key: b("counter"),
                delta: 1,
            },
            Command::Delete {
                keys: vec![b("gone")],
                cas: None,
            },
        ]),
        Command::Split {
            at_slot: 8192,
            child: 3,
            range: (4096, 16383),
        },
        Command::Edit {
            key: b("greeting"),
            edit: StringEdit::SetRange {
                offset: 6,
                bytes: b("world"),
                max_len: MAX_LEN,
            },
        },
        Command::Check {
            key: b("user:42"),
            check: KeyCheck::At(Some(12)),
        },
        Command::Read {
            keys: vec![b("user:42"), b("user:43")],
        },
        Command::Transaction {
            watches: vec![(b("user:42"), KeyCheck::AtOrMissing(9))],
            commands: vec![
                Command::Put {
                    key: b("user:42"),
                    value: b("bob"),
                    flags: None,
                    condition: PutCondition::Always,
                    ttl: TtlUpdate::Keep,
                    return_previous: false,
                },
                Command::Check {
                    key: b("user:43"),
                    check: KeyCheck::Exists,
                },
            ],
        },
        Command::Lock {
            key: b("service/leader"),
            op: LockOp::Acquire {
                session: b(SESSION),
                value: b("n2"),
                flags: 3,
            },
        },
        Command::Session {
            key: session_key(SESSION),
            op: SessionOp::Hold {
                key: b("service/leader"),
            },
        },
        Command::Hash {
            key: b("profile"),
            op: HashOp::IncrByFloat {
                field: b("balance"),
                increment: b("10.5"),
                max_fields: MAX_MEMBERS,
            },
        },
        Command::SetMembers {
            key: b("{s}all"),
            op: SetOp::Store {
                combine: SetCombine::Union,
                sources: vec![b("{s}a"), b("{s}b")],
                max_members: MAX_MEMBERS,
            },
        },
        Command::List {
            key: b("{q}jobs"),
            op: ListOp::Move {
                to: b("{q}done"),
                from: End::Left,
                onto: End::Right,
                max_len: MAX_MEMBERS,
            },
        },
        Command::SortedSet {
            key: b("board"),
            op: SortedSetOp::Add {
                members: vec![(score(1.5), b("alice"))],
                when: ZAddWhen::IfExists,
                compare: ZAddCompare::Greater,
                increment: true,
                max_members: MAX_MEMBERS,
            },
        },
        Command::Prepare {
            txn: 0x0123_4567_89ab_cdef_0011_2233_4455_6677,
            record: crate::txn::record_key(0x0123_4567_89ab_cdef_0011_2233_4455_6677),
            expires_ms: NOW + 2_000,
            creates_record: true,
            all_keys: vec![b("vault/a"), b("vault/b")],
            commands: vec![
                Command::Check {
                    key: b("vault/a"),
                    check: KeyCheck::At(Some(7)),
                },
                Command::Put {
                    key: b("vault/a"),
                    value: b("v"),
                    flags: Some(0),
                    condition: PutCondition::Always,
                    ttl: TtlUpdate::Clear,
                    return_previous: true,
                },
            ],
        },
        Command::Decide {
            record: crate::txn::record_key(9),
            decision: crate::txn::Decision::AbortIfExpired,
        },
        Command::Resolve {
            txn: 9,
            keys: vec![b("vault/a")],
            commit: true,
        },
        Command::Forget {
            records: vec![crate::txn::record_key(9)],
        },
        Command::ResolveMany {
            slots: Some((0, 8191)),
            resolutions: vec![
                crate::txn::Resolution {
                    txn: 9,
                    keys: vec![b("vault/a"), crate::txn::hold_key(9, b"vault/")],
                    commit: true,
                },
                crate::txn::Resolution {
                    txn: 10,
                    keys: vec![b("vault/c")],
                    commit: false,
                },
            ],
        },
        Command::ReadPrefix {
            prefix: b("vault/"),
        },
        Command::OwnsSlots {
            slots: (8192, 16383),
        },
    ]
}

names! {
    fn put_condition_name(PutCondition), PUT_CONDITION_NAMES {
        PutCondition::Always => "put_condition.always",
        PutCondition::IfAbsent => "put_condition.if_absent",
        PutCondition::IfPresent => "put_condition.if_present",
        PutCondition::IfModifyIndex(_) => "put_condition.if_modify_index",
        PutCondition::IfNotCollection => "put_condition.if_not_collection",
        PutCondition::IfPresentString => "put_condition.if_present_string",
    }
}

fn put_conditions() -> Vec<PutCondition> {
    vec![
        PutCondition::Always,
        PutCondition::IfAbsent,
        PutCondition::IfPresent,
        PutCondition::IfModifyIndex(300),
        PutCondition::IfNotCollection,
        PutCondition::IfPresentString,
    ]
}

names! {
    fn ttl_update_name(TtlUpdate), TTL_UPDATE_NAMES {
        TtlUpdate::Clear => "ttl_update.clear",
        TtlUpdate::Keep => "ttl_update.keep",
        TtlUpdate::At(_) => "ttl_update.at",
    }
}

fn ttl_updates() -> Vec<TtlUpdate> {
    vec![TtlUpdate::Clear, TtlUpdate::Keep, TtlUpdate::At(LATER)]
}

names! {
    fn end_name(End), END_NAMES {
        End::Left => "end.left",
        End::Right => "end.right",
    }
}

fn ends() -> Vec<End> {
    vec![End::Left, End::Right]
}

names! {
    fn list_op_name(ListOp), LIST_OP_NAMES {
        ListOp::Push { .. } => "list_op.push",
        ListOp::Pop { .. } => "list_op.pop",
        ListOp::PopFirst { .. } => "list_op.pop_first",
        ListOp::Set { .. } => "list_op.set",
        ListOp::Trim { .. } => "list_op.trim",
        ListOp::Remove { .. } => "list_op.remove",
        ListOp::Insert { .. } => "list_op.insert",
        ListOp::Move { .. } => "list_op.move",
        ListOp::Read(_) => "list_op.read",
        ListOp::Restore { .. } => "list_op.restore",
    }
}

fn list_ops() -> Vec<ListOp> {
    vec![
        ListOp::Push {
            elements: vec![b("x"), b("y")],
            end: End::Right,
            only_existing: true,
            max_len: MAX_MEMBERS,
        },
        ListOp::Pop {
            end: End::Right,
            count: 2,
        },
        ListOp::PopFirst {
            end: End::Left,
            others: vec![b("{q}b"), b("{q}c")],
        },
        ListOp::Set {
            index: -1,
            element: b("z"),
        },
        ListOp::Trim { start: 1, stop: -2 },
        ListOp::Remove {
            count: -3,
            element: b("x"),
        },
        ListOp::Insert {
            before: true,
            pivot: b("y"),
            element: b("w"),
            max_len: MAX_MEMBERS,
        },
        ListOp::Move {
            to: b("{q}done"),
            from: End::Right,
            onto: End::Left,
            max_len: MAX_MEMBERS,
        },
        ListOp::Read(ListRead::Index(-1)),
        ListOp::Restore {
            elements: vec![b("e1"), b("e2")],
            from: 1000,
            max_len: MAX_MEMBERS,
        },
    ]
}

names! {
    fn list_read_name(ListRead), LIST_READ_NAMES {
        ListRead::Len => "list_read.len",
        ListRead::Range { .. } => "list_read.range",
        ListRead::Index(_) => "list_read.index",
        ListRead::Positions { .. } => "list_read.positions",
    }
}

fn list_reads() -> Vec<ListRead> {
    vec![
        ListRead::Len,
        ListRead::Range { start: 2, stop: -3 },
        ListRead::Index(-7),
        ListRead::Positions {
            element: b("x"),
            rank: -2,
            count: 3,
            max_len: 500,
        },
    ]
}

names! {
    fn set_op_name(SetOp), SET_OP_NAMES {
        SetOp::Add { .. } => "set_op.add",
        SetOp::Remove { .. } => "set_op.remove",
        SetOp::Pop { .. } => "set_op.pop",
        SetOp::Move { .. } => "set_op.move",
        SetOp::Store { .. } => "set_op.store",
        SetOp::Read(_) => "set_op.read",
    }
}

fn set_ops() -> Vec<SetOp> {
    vec![
        SetOp::Add {
            members: vec![b("red"), b("green")],
            max_members: MAX_MEMBERS,
        },
        SetOp::Remove {
            members: vec![b("red")],
        },
        SetOp::Pop {
            count: 2,
            seed: 0xdead_beef_cafe,
        },
        SetOp::Move {
            to: b("{s}other"),
            member: b("green"),
            max_members: MAX_MEMBERS,
        },
        SetOp::Store {
            combine: SetCombine::Difference,
            sources: vec![b("{s}a"), b("{s}b")],
            max_members: MAX_MEMBERS,
        },
        SetOp::Read(SetRead::Len),
    ]
}

names! {
    fn set_combine_name(SetCombine), SET_COMBINE_NAMES {
        SetCombine::Intersection => "set_combine.intersection",
        SetCombine::Union => "set_combine.union",
        SetCombine::Difference => "set_combine.difference",
    }
}

fn set_combines() -> Vec<SetCombine> {
    vec![
        SetCombine::Intersection,
        SetCombine::Union,
        SetCombine::Difference,
    ]
}

names! {
    fn set_read_name(SetRead), SET_READ_NAMES {
        SetRead::Contains { .. } => "set_read.contains",
        SetRead::Len => "set_read.len",
        SetRead::Members { .. } => "set_read.members",
        SetRead::Combine { .. } => "set_read.combine",
    }
}

fn set_reads() -> Vec<SetRead> {
    vec![
        SetRead::Contains {
            members: vec![b("red"), b("blue")],
        },
        SetRead::Len,
        SetRead::Members {
            after: Some(b("green")),
            limit: 100,
        },
        SetRead::Combine {
            combine: SetCombine::Intersection,
            others: vec![b("{s}b")],
        },
    ]
}

names! {
    fn hash_op_name(HashOp), HASH_OP_NAMES {
        HashOp::Set { .. } => "hash_op.set",
        HashOp::Delete { .. } => "hash_op.delete",
        HashOp::IncrBy { .. } => "hash_op.incr_by",
        HashOp::IncrByFloat { .. } => "hash_op.incr_by_float",
        HashOp::Read(_) => "hash_op.read",
    }
}

fn hash_ops() -> Vec<HashOp> {
    vec![
        HashOp::Set {
            pairs: vec![(b("name"), b("alice")), (b("age"), b("30"))],
            only_new: true,
            max_fields: MAX_MEMBERS,
        },
        HashOp::Delete {
            fields: vec![b("age")],
        },
        HashOp::IncrBy {
            field: b("visits"),
            delta: -2,
            max_fields: MAX_MEMBERS,
        },
        HashOp::IncrByFloat {
            field: b("balance"),
            increment: b("-0.25"),
            max_fields: MAX_MEMBERS,
        },
        HashOp::Read(HashRead::Len),
    ]
}

names! {
    fn hash_read_name(HashRead), HASH_READ_NAMES {
        HashRead::Get { .. } => "hash_read.get",
        HashRead::Len => "hash_read.len",
        HashRead::Fields { .. } => "hash_read.fields",
    }
}

fn hash_reads() -> Vec<HashRead> {
    vec![
        HashRead::Get {
            fields: vec![b("name"), b("age")],
        },
        HashRead::Len,
        HashRead::Fields {
            after: Some(b("age")),
            limit: 50,
        },
    ]
}

names! {
    fn lock_op_name(LockOp), LOCK_OP_NAMES {
        LockOp::Acquire { .. } => "lock_op.acquire",
        LockOp::Release { .. } => "lock_op.release",
        LockOp::CheckHeld { .. } => "lock_op.check_held",
        LockOp::SessionEnded { .. } => "lock_op.session_ended",
    }
}

fn lock_ops() -> Vec<LockOp> {
    vec![
        LockOp::Acquire {
            session: b(SESSION),
            value: b("n1"),
            flags: 5,
        },
        LockOp::Release {
            session: b(SESSION),
            value: b("none"),
            flags: 6,
        },
        LockOp::CheckHeld {
            session: b(SESSION),
        },
        LockOp::SessionEnded {
            session: b(SESSION),
            delete: true,
            lock_delay_ms: 15_000,
        },
    ]
}

names! {
    fn session_op_name(SessionOp), SESSION_OP_NAMES {
        SessionOp::Create(_) => "session_op.create",
        SessionOp::Renew => "session_op.renew",
        SessionOp::Hold { .. } => "session_op.hold",
        SessionOp::Invalidate { .. } => "session_op.invalidate",
        SessionOp::Remove => "session_op.remove",
    }
}

fn session_ops() -> Vec<SessionOp> {
    vec![
        SessionOp::Create(session_state()),
        SessionOp::Renew,
        SessionOp::Hold {
            key: b("service/leader"),
        },
        SessionOp::Invalidate {
            only_if_expired: true,
        },
        SessionOp::Remove,
    ]
}

names! {
    fn key_check_name(KeyCheck), KEY_CHECK_NAMES {
        KeyCheck::At(Some(_)) => "key_check.at",
        KeyCheck::At(None) => "key_check.at_missing",
        KeyCheck::Exists => "key_check.exists",
        KeyCheck::AtOrMissing(_) => "key_check.at_or_missing",
    }
}

fn key_checks() -> Vec<KeyCheck> {
    vec![
        KeyCheck::At(Some(300)),
        KeyCheck::At(None),
        KeyCheck::Exists,
        KeyCheck::AtOrMissing(301),
    ]
}

names! {
    fn string_edit_name(StringEdit), STRING_EDIT_NAMES {
        StringEdit::Append { .. } => "string_edit.append",
        StringEdit::SetRange { .. } => "string_edit.set_range",
        StringEdit::IncrByFloat(_) => "string_edit.incr_by_float",
        StringEdit::GetDel => "string_edit.get_del",
        StringEdit::GetEx(_) => "string_edit.get_ex",
    }
}

fn string_edits() -> Vec<StringEdit> {
    vec![
        StringEdit::Append {
            bytes: b("tail"),
            max_len: MAX_LEN,
        },
        StringEdit::SetRange {
            offset: 300,
            bytes: b("mid"),
            max_len: MAX_LEN,
        },
        StringEdit::IncrByFloat(b("3.0e2")),
        StringEdit::GetDel,
        StringEdit::GetEx(TtlUpdate::At(LATER)),
    ]
}

// ---------------------------------------------------------------------------------------------
// Sorted sets

names! {
    fn lex_bound_name(LexBound), LEX_BOUND_NAMES {
        LexBound::Lowest => "lex_bound.lowest",
        LexBound::Highest => "lex_bound.highest",
        LexBound::Inclusive(_) => "lex_bound.inclusive",
        LexBound::Exclusive(_) => "lex_bound.exclusive",
    }
}

fn lex_bounds() -> Vec<LexBound> {
    vec![
        LexBound::Lowest,
        LexBound::Highest,
        LexBound::Inclusive(b("apple")),
        LexBound::Exclusive(b("pear")),
    ]
}

names! {
    fn z_range_name(ZRange), Z_RANGE_NAMES {
        ZRange::Rank { .. } => "z_range.rank",
        ZRange::Score { .. } => "z_range.score",
        ZRange::Lex { .. } => "z_range.lex",
    }
}

fn z_ranges() -> Vec<ZRange> {
    vec![
        ZRange::Rank { start: 3, stop: -4 },
        ZRange::Score {
            min: ScoreBound {
                score: score(-2.5),
                exclusive: true,
            },
            max: ScoreBound {
                score: score(f64::INFINITY),
                exclusive: false,
            },
        },
        ZRange::Lex {
            min: LexBound::Inclusive(b("a")),
            max: LexBound::Exclusive(b("m")),
        },
    ]
}

names! {
    fn z_add_when_name(ZAddWhen), Z_ADD_WHEN_NAMES {
        ZAddWhen::Always => "z_add_when.always",
        ZAddWhen::IfNew => "z_add_when.if_new",
        ZAddWhen::IfExists => "z_add_when.if_exists",
    }
}

fn z_add_whens() -> Vec<ZAddWhen> {
    vec![ZAddWhen::Always, ZAddWhen::IfNew, ZAddWhen::IfExists]
}

names! {
    fn z_add_compare_name(ZAddCompare), Z_ADD_COMPARE_NAMES {
        ZAddCompare::Any => "z_add_compare.any",
        ZAddCompare::Greater => "z_add_compare.greater",
        ZAddCompare::Less => "z_add_compare.less",
    }
}

fn z_add_compares() -> Vec<ZAddCompare> {
    vec![ZAddCompare::Any, ZAddCompare::Greater, ZAddCompare::Less]
}

names! {
    fn sorted_set_op_name(SortedSetOp), SORTED_SET_OP_NAMES {
        SortedSetOp::Add { .. } => "sorted_set_op.add",
        SortedSetOp::Remove { .. } => "sorted_set_op.remove",
        SortedSetOp::Pop { .. } => "sorted_set_op.pop",
        SortedSetOp::RemoveRange { .. } => "sorted_set_op.remove_range",
        SortedSetOp::Read(_) => "sorted_set_op.read",
        SortedSetOp::PopFirst { .. } => "sorted_set_op.pop_first",
    }
}

fn sorted_set_ops() -> Vec<SortedSetOp> {
    vec![
        SortedSetOp::Add {
            members: vec![(score(1.5), b("alice")), (score(-3.0), b("bob"))],
            when: ZAddWhen::IfNew,
            compare: ZAddCompare::Less,
            increment: false,
            max_members: MAX_MEMBERS,
        },
        SortedSetOp::Remove {
            members: vec![b("bob")],
        },
        SortedSetOp::Pop {
            count: 2,
            highest: true,
        },
        SortedSetOp::RemoveRange {
            range: ZRange::Rank { start: 0, stop: 9 },
        },
        SortedSetOp::Read(SortedSetRead::Len),
        SortedSetOp::PopFirst {
            highest: false,
            others: vec![b("{tag}other"), b("{tag}third")],
        },
    ]
}

names! {
    fn sorted_set_read_name(SortedSetRead), SORTED_SET_READ_NAMES {
        SortedSetRead::Len => "sorted_set_read.len",
        SortedSetRead::Scores { .. } => "sorted_set_read.scores",
        SortedSetRead::Rank { .. } => "sorted_set_read.rank",
        SortedSetRead::Count { .. } => "sorted_set_read.count",
        SortedSetRead::Range { .. } => "sorted_set_read.range",
        SortedSetRead::Members { .. } => "sorted_set_read.members",
    }
}

fn sorted_set_reads() -> Vec<SortedSetRead> {
    vec![
        SortedSetRead::Len,
        SortedSetRead::Scores {
            members: vec![b("alice"), b("carol")],
        },
        SortedSetRead::Rank {
            member: b("alice"),
            reverse: true,
        },
        SortedSetRead::Count {
            range: ZRange::Lex {
                min: LexBound::Lowest,
                max: LexBound::Highest,
            },
        },
        SortedSetRead::Range {
            range: ZRange::Score {
                min: ScoreBound {
                    score: score(f64::NEG_INFINITY),
                    exclusive: false,
                },
                max: ScoreBound {
                    score: score(10.0),
                    exclusive: true,
                },
            },
            reverse: true,
            offset: 5,
            limit: 20,
        },
        SortedSetRead::Members {
            after: Some(b("alice")),
            limit: 10,
        },
    ]
}

// ---------------------------------------------------------------------------------------------
// Results

names! {
    fn command_result_name(CommandResult), COMMAND_RESULT_NAMES {
        CommandResult::Put { .. } => "command_result.put",
        CommandResult::Deleted(_) => "command_result.deleted",
        CommandResult::Incr(Ok(_)) => "command_result.incr",
        CommandResult::Incr(Err(_)) => "command_result.incr_error",
        CommandResult::TtlSet(_) => "command_result.ttl_set",
        CommandResult::Done => "command_result.done",
        CommandResult::Batch(_) => "command_result.batch",
        CommandResult::Moved => "command_result.moved",
        CommandResult::Edited(Ok(_)) => "command_result.edited",
        CommandResult::Edited(Err(_)) => "command_result.edited_error",
        CommandResult::Records(_) => "command_result.records",
        CommandResult::Transaction(Ok(_)) => "command_result.transaction",
        CommandResult::Transaction(Err(_)) => "command_result.transaction_failed",
        CommandResult::Lock(_) => "command_result.lock",
        CommandResult::Hash(_) => "command_result.hash",
        CommandResult::SetMembers(_) => "command_result.set_members",
        CommandResult::List(_) => "command_result.list",
        CommandResult::SortedSet(_) => "command_result.sorted_set",
        CommandResult::InTransaction(_) => "command_result.in_transaction",
        CommandResult::Prepared(_) => "command_result.prepared",
        CommandResult::Decided(_) => "command_result.decided",
        CommandResult::Resolved(_) => "command_result.resolved",
        CommandResult::Entries { .. } => "command_result.entries",
    }
}

fn command_results() -> Vec<CommandResult> {
    // Records travel in results through serde, not through `Record::encode`.
    let records = records();
    let [string, expiring, locked, hash] = [0, 1, 3, 4].map(|i| records[i].clone());
    let string_entry = string.clone();
    vec![
        CommandResult::Put {
            written: true,
            previous: Some(expiring),
            index: 300,
        },
        CommandResult::Deleted(2),
        CommandResult::Incr(Ok(-42)),
        CommandResult::Incr(Err(ErrorCode::NotInteger)),
        CommandResult::TtlSet(true),
        CommandResult::Done,
        CommandResult::Batch(vec![CommandResult::Done, CommandResult::Deleted(1)]),
        CommandResult::Moved,
        CommandResult::Edited(Ok(Some(b("hello world")))),
        CommandResult::Edited(Err(ErrorCode::ValueTooLarge)),
        CommandResult::Records(vec![Some(string), None, Some(locked), Some(hash)]),
        CommandResult::Transaction(Ok(vec![
            CommandResult::Incr(Ok(1)),
            CommandResult::Lock(LockOutcome::Done(true)),
        ])),
        CommandResult::Transaction(Err(3)),
        CommandResult::Lock(LockOutcome::SessionEnded),
        CommandResult::Hash(Ok(HashAnswer::Int(7))),
        CommandResult::SetMembers(Err(ErrorCode::WrongType)),
        CommandResult::List(Ok(ListAnswer::Count(4))),
        CommandResult::SortedSet(Ok(SortedSetAnswer::Score(Some(score(2.5))))),
        CommandResult::InTransaction(b("vault/a")),
        CommandResult::Prepared(crate::txn::PrepareOutcome::Busy(b("vault/b"))),
        CommandResult::Decided(crate::txn::TxnState::Committed),
        CommandResult::Resolved(vec![vec![CommandResult::Done], Vec::new()]),
        CommandResult::Entries {
            entries: vec![(b("vault/a"), string_entry)],
            index: 301,
        },
    ]
}

names! {
    fn list_answer_name(ListAnswer), LIST_ANSWER_NAMES {
        ListAnswer::Count(_) => "list_answer.count",
        ListAnswer::Int(_) => "list_answer.int",
        ListAnswer::Elements(_) => "list_answer.elements",
        ListAnswer::Popped(_) => "list_answer.popped",
        ListAnswer::Positions(_) => "list_answer.positions",
        ListAnswer::Done => "list_answer.done",
    }
}

fn list_answers() -> Vec<ListAnswer> {
    vec![
        ListAnswer::Count(300),
        ListAnswer::Int(-1),
        ListAnswer::Elements(vec![b("x"), b("y")]),
        ListAnswer::Popped(Some((b("{q}b"), b("job")))),
        ListAnswer::Positions(vec![1, 300]),
        ListAnswer::Done,
    ]
}

names! {
    fn set_answer_name(SetAnswer), SET_ANSWER_NAMES {
        SetAnswer::Count(_) => "set_answer.count",
        SetAnswer::Members(_) => "set_answer.members",
        SetAnswer::Flags(_) => "set_answer.flags",
    }
}

fn set_answers() -> Vec<SetAnswer> {
    vec![
        SetAnswer::Count(300),
        SetAnswer::Members(vec![b("green"), b("red")]),
        SetAnswer::Flags(vec![true, false, true]),
    ]
}

names! {
    fn hash_answer_name(HashAnswer), HASH_ANSWER_NAMES {
        HashAnswer::Count(_) => "hash_answer.count",
        HashAnswer::Int(_) => "hash_answer.int",
        HashAnswer::Float(_) => "hash_answer.float",
        HashAnswer::Values(_) => "hash_answer.values",
        HashAnswer::Pairs(_) => "hash_answer.pairs",
    }
}

fn hash_answers() -> Vec<HashAnswer> {
    vec![
        HashAnswer::Count(300),
        HashAnswer::Int(-300),
        HashAnswer::Float(b("10.25")),
        HashAnswer::Values(vec![Some(b("alice")), None]),
        HashAnswer::Pairs(vec![(b("age"), b("30")), (b("name"), b("alice"))]),
    ]
}

names! {
    fn lock_outcome_name(LockOutcome), LOCK_OUTCOME_NAMES {
        LockOutcome::Done(_) => "lock_outcome.done",
        LockOutcome::SessionEnded => "lock_outcome.session_ended",
    }
}

fn lock_outcomes() -> Vec<LockOutcome> {
    vec![LockOutcome::Done(true), LockOutcome::SessionEnded]
}

names! {
    fn sorted_set_answer_name(SortedSetAnswer), SORTED_SET_ANSWER_NAMES {
        SortedSetAnswer::Count(_) => "sorted_set_answer.count",
        SortedSetAnswer::Added { .. } => "sorted_set_answer.added",
        SortedSetAnswer::Score(_) => "sorted_set_answer.score",
        SortedSetAnswer::Scores(_) => "sorted_set_answer.scores",
        SortedSetAnswer::Rank(_) => "sorted_set_answer.rank",
        SortedSetAnswer::Pairs(_) => "sorted_set_answer.pairs",
        SortedSetAnswer::Popped(_) => "sorted_set_answer.popped",
    }
}

fn sorted_set_answers() -> Vec<SortedSetAnswer> {
    vec![
        SortedSetAnswer::Count(300),
        SortedSetAnswer::Added {
            added: 2,
            updated: 1,
        },
        SortedSetAnswer::Score(Some(score(-0.5))),
        SortedSetAnswer::Scores(vec![Some(score(1.5)), None]),
        SortedSetAnswer::Rank(Some(4)),
        SortedSetAnswer::Pairs(vec![(b("alice"), score(1.5)), (b("bob"), score(1e300))]),
        SortedSetAnswer::Popped(Some((b("{tag}other"), b("alice"), score(-0.5)))),
    ]
}

names! {
    fn error_code_name(ErrorCode), ERROR_CODE_NAMES {
        ErrorCode::InvalidArgument => "error_code.invalid_argument",
        ErrorCode::KeyTooLarge => "error_code.key_too_large",
        ErrorCode::ValueTooLarge => "error_code.value_too_large",
        ErrorCode::RequestTooLarge => "error_code.request_too_large",
        ErrorCode::NotInteger => "error_code.not_integer",
        ErrorCode::Overflow => "error_code.overflow",
        ErrorCode::NoLeader => "error_code.no_leader",
        ErrorCode::Timeout => "error_code.timeout",
        ErrorCode::StorageFailure => "error_code.storage_failure",
        ErrorCode::Unavailable => "error_code.unavailable",
        ErrorCode::Internal => "error_code.internal",
        ErrorCode::NotFound => "error_code.not_found",
        ErrorCode::PreconditionFailed => "error_code.precondition_failed",
        ErrorCode::Conflict => "error_code.conflict",
        ErrorCode::Moved => "error_code.moved",
        ErrorCode::InvalidSession => "error_code.invalid_session",
        ErrorCode::WrongType => "error_code.wrong_type",
        ErrorCode::AclNotFound => "error_code.acl_not_found",
        ErrorCode::PermissionDenied => "error_code.permission_denied",
        ErrorCode::DiskFull => "error_code.disk_full",
        ErrorCode::KeyInTransaction => "error_code.key_in_transaction",
    }
}

fn error_codes() -> Vec<ErrorCode> {
    vec![
        ErrorCode::InvalidArgument,
        ErrorCode::KeyTooLarge,
        ErrorCode::ValueTooLarge,
        ErrorCode::RequestTooLarge,
        ErrorCode::NotInteger,
        ErrorCode::Overflow,
        ErrorCode::NoLeader,
        ErrorCode::Timeout,
        ErrorCode::StorageFailure,
        ErrorCode::Unavailable,
        ErrorCode::Internal,
        ErrorCode::NotFound,
        ErrorCode::PreconditionFailed,
        ErrorCode::Conflict,
        ErrorCode::Moved,
        ErrorCode::InvalidSession,
        ErrorCode::WrongType,
        ErrorCode::AclNotFound,
        ErrorCode::PermissionDenied,
        ErrorCode::DiskFull,
        ErrorCode::KeyInTransaction,
    ]
}

// ---------------------------------------------------------------------------------------------
// Stored state

names! {
    fn value_kind_name(ValueKind), VALUE_KIND_NAMES {
        ValueKind::String => "value_kind.string",
        ValueKind::Hash => "value_kind.hash",
        ValueKind::Set => "value_kind.set",
        ValueKind::List => "value_kind.list",
        ValueKind::SortedSet => "value_kind.sorted_set",
    }
}

fn value_kinds() -> Vec<ValueKind> {
    vec![
        ValueKind::String,
        ValueKind::Hash,
        ValueKind::Set,
        ValueKind::List,
        ValueKind::SortedSet,
    ]
}

names! {
    fn record_name(Record), RECORD_NAMES {
        Record { kind: ValueKind::String, lock, .. } if lock.session.is_some() => "record.locked",
        Record { kind: ValueKind::String, lock, .. } if *lock != LockInfo::default() => "record.released",
        Record { kind: ValueKind::String, expires_at_ms: Some(_), .. } => "record.expiring",
        Record { kind: ValueKind::String, .. } => "record.string",
        Record { kind: ValueKind::Hash, .. } => "record.hash",
        Record { kind: ValueKind::Set, .. } => "record.set",
        Record { kind: ValueKind::List, .. } => "record.list",
        Record { kind: ValueKind::SortedSet, .. } => "record.sorted_set",
    }
}

/// One of each kind (the results above take some by position).
fn records() -> Vec<Record> {
    let collection = |kind, value| Record {
        value,
        flags: 0,
        create_index: 20,
        modify_index: 300,
        expires_at_ms: Some(LATER),
        lock: LockInfo::default(),
        kind,
    };
    vec![
        Record::string(b("hello"), 7),
        Record {
            value: b("hello"),
            flags: 42,
            create_index: 7,
            modify_index: 300,
            expires_at_ms: Some(LATER),
            lock: LockInfo::default(),
            kind: ValueKind::String,
        },
        Record {
            value: b("n1"),
            flags: 3,
            create_index: 4,
            modify_index: 9,
            expires_at_ms: None,
            lock: LockInfo {
                index: 2,
                session: None,
                delay_until_ms: NOW + 15_000,
            },
            kind: ValueKind::String,
        },
        Record {
            value: b("leader=n2"),
            flags: 3_304_740_253_564_472_344,
            create_index: 4,
            modify_index: 8,
            expires_at_ms: Some(LATER),
            lock: LockInfo {
                index: 3,
                session: Some(b(SESSION)),
                delay_until_ms: NOW,
            },
            kind: ValueKind::String,
        },
        collection(ValueKind::Hash, encode_count(3)),
        collection(ValueKind::Set, encode_count(300)),
        collection(ValueKind::List, encode_list(4, -2)),
        collection(ValueKind::SortedSet, encode_count(2)),
    ]
}

names! {
    fn session_behavior_name(SessionBehavior), SESSION_BEHAVIOR_NAMES {
        SessionBehavior::Release => "session_behavior.release",
        SessionBehavior::Delete => "session_behavior.delete",
    }
}

fn session_behaviors() -> Vec<SessionBehavior> {
    vec![SessionBehavior::Release, SessionBehavior::Delete]
}

fn session_state() -> SessionState {
    SessionState {
        id: SESSION.into(),
        name: "leader".into(),
        node: "n1".into(),
        lock_delay_ms: 15_000,
        behavior: SessionBehavior::Delete,
        ttl_ms: 10_000,
        renewed_at_ms: NOW,
        invalidated: true,
        held: vec![b("service/leader"), b("service/lock")],
    }
}

// ---------------------------------------------------------------------------------------------
// Backups

names! {
    fn frame_name(Frame), FRAME_NAMES {
        Frame::Entry(_) => "backup_frame.entry",
        Frame::End { .. } => "backup_frame.end",
        Frame::ShardEnd { .. } => "backup_frame.shard_end",
        Frame::Hash(_) => "backup_frame.hash",
        Frame::Set(_) => "backup_frame.set",
        Frame::List(_) => "backup_frame.list",
        Frame::SortedSet(_) => "backup_frame.sorted_set",
    }
}

fn frames() -> Vec<Frame> {
    vec![
        Frame::Entry(BackupEntry {
            key: b("user:42"),
            value: b("alice"),
            flags: 42,
            expires_at_ms: Some(LATER),
        }),
        Frame::End {
            entries: 300,
            checksum: 0x0123_4567_89ab_cdef,
        },
        Frame::ShardEnd {
            entries: 150,
            first_slot: 4096,
            last_slot: 8191,
        },
        Frame::Hash(HashEntry {
            key: b("profile"),
            fields: vec![(b("age"), b("30")), (b("name"), b("alice"))],
            expires_at_ms: Some(LATER),
        }),
        Frame::Set(SetEntry {
            key: b("colors"),
            members: vec![b("green"), b("red")],
            expires_at_ms: Some(LATER),
        }),
        Frame::List(ListEntry {
            key: b("jobs"),
            from: 300,
            elements: vec![b("j1"), b("j2")],
            expires_at_ms: Some(LATER),
        }),
        Frame::SortedSet(SortedSetEntry {
            key: b("board"),
            members: vec![(b("alice"), score(1.5)), (b("bob"), score(-3.0))],
            expires_at_ms: Some(LATER),
        }),
    ]
}
