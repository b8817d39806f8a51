//! What this crate keeps that another build must read, and what it sends that a node of the
//! next or the previous version must read during a rolling upgrade. Checked against
//! `golden/cluster.golden` (see [`trireme_types::golden`]).
//!
//! Two encodings are at stake. The metadata group's rows (`node/<name>`, `placement`, `acl`)
//! and the node's identity are JSON documents: their fields are found by name, so renaming a
//! field or a variant, or adding one without `#[serde(default)]`, makes what an older build
//! wrote unreadable. Forwarded requests and their replies, joins and membership operations
//! travel in postcard: by position, so a variant inserted before another or a field added in
//! the middle turns an older node's frame into something else. The `stored.*` samples are
//! checked as JSON, the others as postcard.
//!
//! Each enum's samples are named through an exhaustive `match`: a new variant does not
//! compile until it has a name, and so a sample.

use crate::acl::AclStore;
use crate::forward::{
    CountExpiring, CountRows, ForwardReply, ForwardRequest, Freshness, GetKeys, Read, ReadHash,
    ReadList, ReadSet, ReadSortedSet, ScanRows, SearchShard, ShardRequest, WireMode, WireOp,
    WireQuery, WireTarget, Write,
};
use crate::identity::Identity;
use crate::join::{JoinAnswer, JoinRequest};
use crate::membership::{MembershipOp, MembershipReply, Request as MembershipRequest};
use crate::meta::{ClusterMap, Move, MovePhase, NodeInfo, NodeRow, NodeState, PendingSplit};
use crate::whole_read::{OpenWhole, WholeQuery};
use crate::{AclPolicy, AclToken, PeerNode, PolicyLink};
use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use trireme_search::{Hit, SortKey, SortValue};
use trireme_types::golden::Golden;
use trireme_types::whole::{WholeItems, WholeOpened, WholePage, WholeRead, WholeRest};
use trireme_types::{
    Command, CommandResult, ErrorCode, HashAnswer, HashRead, ListRead, LockInfo, LogCommand,
    Record, Score, ScoreBound, SetAnswer, SetCombine, SetRead, SortedSetAnswer, SortedSetRead,
    TriremeError, ValueKind, ZRange,
};

/// Checks `value`'s JSON encoding (how the metadata rows and the identity are stored) under
/// `name`; the decoded value is compared by its `Debug` text, as
/// [`Golden::postcard_debug`] does.
fn json<T>(golden: &mut Golden, name: &str, value: &T)
where
    T: Serialize + DeserializeOwned + Debug,
{
    golden.check(
        name,
        &format!("{value:?}"),
        |_| serde_json::to_vec(value).map_err(|e| e.to_string()),
        |bytes| {
            serde_json::from_slice::<T>(bytes)
                .map(|decoded| format!("{decoded:?}"))
                .map_err(|e| e.to_string())
        },
    );
}

fn peer(name: &str, host: u8) -> PeerNode {
    PeerNode {
        name: name.into(),
        peer_addr: format!("10.1.0.{host}:7702"),
        http_addr: format!("10.1.0.{host}:7700"),
        resp_addr: format!("10.1.0.{host}:7701"),
    }
}

fn node_info() -> NodeInfo {
    NodeInfo {
        node: peer("n4", 4),
        rack: Some("r2".into()),
        zone: Some("eu-west-1b".into()),
        region: None,
    }
}

fn node_states() -> Vec<(&'static str, NodeState)> {
    [NodeState::Active, NodeState::Draining, NodeState::Removed]
        .into_iter()
        .map(|state| {
            let name = match state {
                NodeState::Active => "active",
                NodeState::Draining => "draining",
                NodeState::Removed => "removed",
            };
            (name, state)
        })
        .collect()
}

fn move_phases() -> Vec<(&'static str, MovePhase)> {
    [MovePhase::Learner, MovePhase::Voter, MovePhase::Cancel]
        .into_iter()
        .map(|phase| {
            let name = match phase {
                MovePhase::Learner => "learner",
                MovePhase::Voter => "voter",
                MovePhase::Cancel => "cancel",
            };
            (name, phase)
        })
        .collect()
}

fn a_move() -> Move {
    Move {
        from: Some(3),
        to: 4,
        phase: MovePhase::Voter,
        started_ms: 1_700_000_100_000,
        learner: false,
    }
}

fn pending_split() -> PendingSplit {
    PendingSplit {
        at_slot: 12_000,
        child: 5,
        range: (8_192, 16_383),
        started_ms: 1_700_000_200_000,
    }
}

fn cluster_map() -> ClusterMap {
    ClusterMap {
        epoch: 17,
        replicas: vec![vec![1, 2, 3], vec![2, 3, 4]],
        members: [(1, peer("n1", 1)), (4, peer("n4", 4))]
            .into_iter()
            .collect(),
        generations: vec![0, 3],
        states: [(1, NodeState::Active), (3, NodeState::Draining)]
            .into_iter()
            .collect(),
        moves: [(1, a_move())].into_iter().collect(),
        slots: vec![(0, 8_191), (8_192, 16_383)],
        splits: [(1, pending_split())].into_iter().collect(),
        origins: [(4, (0, 4_096))].into_iter().collect(),
        cluster_version: 0,
        home_region: None,
        learners: Default::default(),
        survival: Default::default(),
    }
}

fn acl_policy() -> AclPolicy {
    AclPolicy {
        id: "5e1c5b9a-0c1f-4f7e-9b0e-3f6d2a4c8e11".into(),
        name: "read-kv".into(),
        description: "reads the kv store".into(),
        rules: "key_prefix \"\" { policy = \"read\" }".into(),
        datacenters: vec!["dc1".into()],
        create_index: 4,
        modify_index: 6,
    }
}

fn policy_link() -> PolicyLink {
    PolicyLink {
        id: "5e1c5b9a-0c1f-4f7e-9b0e-3f6d2a4c8e11".into(),
        name: "read-kv".into(),
    }
}

fn acl_token() -> AclToken {
    AclToken {
        accessor_id: "9d0f7a3e-2b6c-4d1a-8e5f-7c4b3a2d1e00".into(),
        secret_id: "c7a1e2d3-4b5c-4e6f-9a8b-0c1d2e3f4a5b".into(),
        description: "the reporting job".into(),
        policies: vec![policy_link()],
        local: true,
        create_time: "2024-03-01T12:00:00Z".into(),
        create_index: 5,
        modify_index: 7,
    }
}

fn acl_store() -> AclStore {
    let policy = acl_policy();
    let token = acl_token();
    AclStore {
        revision: 7,
        bootstrapped: true,
        policies: [(policy.id.clone(), policy)].into_iter().collect(),
        tokens: [(token.accessor_id.clone(), token)].into_iter().collect(),
    }
}

fn identity() -> Identity {
    Identity {
        cluster_name: "trireme-prod".into(),
        node_name: "n2".into(),
        shards: 16,
        created_ms: 1_699_999_999_000,
        initial_cluster: vec![
            ("n1".into(), "10.1.0.1:7702".into()),
            ("n2".into(), "10.1.0.2:7702".into()),
        ],
        removed: true,
    }
}

fn score(value: f64) -> Score {
    Score::new(value).expect("not NaN")
}

fn record() -> Record {
    Record {
        value: Bytes::from_static(b"hello"),
        flags: 9,
        create_index: 31,
        modify_index: 44,
        expires_at_ms: Some(1_700_000_300_000),
        lock: LockInfo {
            index: 2,
            session: Some(Bytes::from_static(b"s-1")),
            delay_until_ms: 1_700_000_000_500,
        },
        kind: ValueKind::String,
    }
}

fn freshness() -> Freshness {
    Freshness {
        known_leader: true,
        applied: 120,
        removed: 99,
        last_contact_ms: 15,
    }
}

fn wire_modes() -> Vec<(&'static str, WireMode)> {
    [WireMode::Consistent, WireMode::Default, WireMode::Stale]
        .into_iter()
        .map(|mode| {
            let name = match mode {
                WireMode::Consistent => "consistent",
                WireMode::Default => "default",
                WireMode::Stale => "stale",
            };
            (name, mode)
        })
        .collect()
}

/// One of each operation on the peer link, every read query among them.
fn wire_ops() -> Vec<WireOp> {
    let slots = Some((8_192, 16_383));
    vec![
        WireOp::Read(
            WireMode::Consistent,
            slots,
            WireQuery::Get(GetKeys(vec![
                Bytes::from_static(b"a"),
                Bytes::from_static(b"b"),
            ])),
        ),
        WireOp::Read(
            WireMode::Default,
            None,
            WireQuery::Scan(ScanRows {
                prefix: Bytes::from_static(b"app/"),
                after: Some(Bytes::from_static(b"app/k7")),
                limit: 250,
                from_after: true,
            }),
        ),
        WireOp::Read(WireMode::Stale, slots, WireQuery::Count(CountRows)),
        WireOp::Read(
            WireMode::Default,
            slots,
            WireQuery::Hash(ReadHash {
                key: Bytes::from_static(b"h"),
                read: HashRead::Fields {
                    after: Some(Bytes::from_static(b"f1")),
                    limit: 50,
                },
            }),
        ),
        WireOp::Read(
            WireMode::Consistent,
            slots,
            WireQuery::Set(ReadSet {
                key: Bytes::from_static(b"s"),
                read: SetRead::Combine {
                    combine: SetCombine::Difference,
                    others: vec![Bytes::from_static(b"{s}2")],
                },
            }),
        ),
        WireOp::Read(
            WireMode::Stale,
            slots,
            WireQuery::List(ReadList {
                key: Bytes::from_static(b"l"),
                read: ListRead::Positions {
                    element: Bytes::from_static(b"x"),
                    rank: -2,
                    count: 3,
                    max_len: 100,
                },
            }),
        ),
        WireOp::Read(
            WireMode::Default,
            slots,
            WireQuery::SortedSet(ReadSortedSet {
                key: Bytes::from_static(b"z"),
                read: SortedSetRead::Range {
                    range: ZRange::Score {
                        min: ScoreBound {
                            score: score(-1.5),
                            exclusive: true,
                        },
                        max: ScoreBound {
                            score: score(f64::INFINITY),
                            exclusive: false,
                        },
                    },
                    reverse: true,
                    offset: 2,
                    limit: 10,
                },
            }),
        ),
        WireOp::Read(
            WireMode::Consistent,
            None,
            WireQuery::CountExpiring(CountExpiring),
        ),
        WireOp::Write(LogCommand {
            now_ms: 1_700_000_000_777,
            command: Command::Delete {
                keys: vec![Bytes::from_static(b"gone")],
                cas: Some(12),
            },
        }),
        WireOp::Search(SearchShard {
            mode: WireMode::Stale,
            slots,
            collection: Bytes::from_static(b"users"),
            query: "name:ann AND age:>30".into(),
            want: 20,
            sort: vec![SortKey {
                path: vec!["address".into(), "city".into()],
                descending: true,
            }],
        }),
        WireOp::Publish {
            channel: Bytes::from_static(b"news"),
            message: Bytes::from_static(b"hi"),
        },
        WireOp::Wait {
            target: WireTarget::Key(Bytes::from_static(b"watched")),
            seen: 88,
            wait_ms: 30_000,
        },
        WireOp::Wait {
            target: WireTarget::Prefix(Bytes::from_static(b"app/")),
            seen: 89,
            wait_ms: 5_000,
        },
        WireOp::OpenWhole(
            WireMode::Default,
            slots,
            WholeQuery {
                key: Bytes::from_static(b"big"),
                read: WholeRead::SortedSet {
                    start: 0,
                    stop: -1,
                    reverse: true,
                },
            },
        ),
        WireOp::WholePage { read: 17 },
        WireOp::CloseWhole { read: 17 },
    ]
}

fn op_name(op: &WireOp) -> &'static str {
    match op {
        WireOp::Read(_, _, query) => match query {
            WireQuery::Get(_) => "read_get",
            WireQuery::Scan(_) => "read_scan",
            WireQuery::Count(_) => "read_count",
            WireQuery::Hash(_) => "read_hash",
            WireQuery::Set(_) => "read_set",
            WireQuery::List(_) => "read_list",
            WireQuery::SortedSet(_) => "read_sorted_set",
            WireQuery::CountExpiring(_) => "read_count_expiring",
        },
        WireOp::Write(_) => "write",
        WireOp::Search(_) => "search",
        WireOp::Publish { .. } => "publish",
        WireOp::Wait {
            target: WireTarget::Key(_),
            ..
        } => "wait_key",
        WireOp::Wait {
            target: WireTarget::Prefix(_),
            ..
        } => "wait_prefix",
        WireOp::OpenWhole(..) => "open_whole",
        WireOp::WholePage { .. } => "whole_page",
        WireOp::CloseWhole { .. } => "close_whole",
    }
}

/// Checks a served reply to `op`, in the answer type its sender decodes.
fn check_served(golden: &mut Golden, op: &WireOp) {
    let name = format!("forward.served.{}", op_name(op));
    let name = name.as_str();
    match op {
        WireOp::Read(_, _, query) => match query {
            WireQuery::Get(_) => {
                let answer: <Read<GetKeys> as ShardRequest>::Answer =
                    (vec![Some(record()), None], freshness());
                golden.postcard_debug(name, &ForwardReply::Served(answer));
            }
            WireQuery::Scan(_) => {
                let answer: <Read<ScanRows> as ShardRequest>::Answer =
                    (vec![(Bytes::from_static(b"app/k8"), record())], freshness());
                golden.postcard_debug(name, &ForwardReply::Served(answer));
            }
            WireQuery::Count(_) => {
                let answer: <Read<CountRows> as ShardRequest>::Answer = (4_321, freshness());
                golden.postcard_debug(name, &ForwardReply::Served(answer));
            }
            WireQuery::Hash(_) => {
                let answer: <Read<ReadHash> as ShardRequest>::Answer = (
                    Ok(HashAnswer::Pairs(vec![(
                        Bytes::from_static(b"f2"),
                        Bytes::from_static(b"v2"),
                    )])),
                    freshness(),
                );
                golden.postcard_debug(name, &ForwardReply::Served(answer));
            }
            WireQuery::Set(_) => {
                let answer: <Read<ReadSet> as ShardRequest>::Answer = (
                    Ok(SetAnswer::Members(vec![Bytes::from_static(b"m")])),
                    freshness(),
                );
                golden.postcard_debug(name, &ForwardReply::Served(answer));
            }
            WireQuery::List(_) => {
                let answer: <Read<ReadList> as ShardRequest>::Answer =
                    (Err(ErrorCode::WrongType), freshness());
                golden.postcard_debug(name, &ForwardReply::Served(answer));
            }
            WireQuery::SortedSet(_) => {
                let answer: <Read<ReadSortedSet> as ShardRequest>::Answer = (
                    Ok(SortedSetAnswer::Pairs(vec![(
                        Bytes::from_static(b"m"),
                        score(2.25),
                    )])),
                    freshness(),
                );
                golden.postcard_debug(name, &ForwardReply::Served(answer));
            }
            WireQuery::CountExpiring(_) => {
                let answer: <Read<CountExpiring> as ShardRequest>::Answer =
                    ((12, 600_000), freshness());
                golden.postcard_debug(name, &ForwardReply::Served(answer));
            }
        },
        WireOp::Write(_) => {
            let answer: <Write as ShardRequest>::Answer = CommandResult::Put {
                written: true,
                previous: Some(record()),
                index: 45,
            };
            golden.postcard_debug(name, &ForwardReply::Served(answer));
        }
        WireOp::Search(_) => {
            let answer: <SearchShard as ShardRequest>::Answer = (
                37,
                vec![Hit {
                    key: Bytes::from_static(b"users/u1"),
                    score: 3.5,
                    sort: vec![
                        SortValue::Text("Lyon".into()),
                        SortValue::Number(31.5),
                        SortValue::Bool(true),
                        SortValue::Missing,
                    ],
                }],
                freshness(),
            );
            golden.postcard_debug(name, &ForwardReply::Served(answer));
        }
        // `Node::forward_publish` reads how many subscribers got it.
        WireOp::Publish { .. } => golden.postcard_debug(name, &ForwardReply::Served(3u64)),
        // `Node::forward_wait_op::<()>`: the wait ended.
        WireOp::Wait { .. } => golden.postcard_debug(name, &ForwardReply::Served(())),
        WireOp::OpenWhole(..) => {
            let answer: <OpenWhole as ShardRequest>::Answer = (
                Ok(WholeOpened {
                    total: 3,
                    first: WholeItems::Scored(vec![(
                        Bytes::from_static(b"top"),
                        trireme_types::Score::new(9.5).expect("a score"),
                    )]),
                    rest: Some(WholeRest {
                        node: 0x0123_4567_89ab_cdef,
                        read: 17,
                    }),
                }),
                46,
            );
            golden.postcard_debug(name, &ForwardReply::Served(answer));
        }
        WireOp::WholePage { .. } => {
            let answer = WholePage {
                items: WholeItems::Pairs(vec![(
                    Bytes::from_static(b"f"),
                    Bytes::from_static(b"v"),
                )]),
                last: true,
            };
            golden.postcard_debug(name, &ForwardReply::Served(answer));
        }
        WireOp::CloseWhole { .. } => golden.postcard_debug(name, &ForwardReply::Served(())),
    }
}

/// The replies that encode alike whatever the answer type (one of them stands for them all).
fn refusals() -> Vec<ForwardReply<()>> {
    vec![
        ForwardReply::Served(()),
        ForwardReply::NotLeader(Some(0x0123_4567_89ab_cdef)),
        ForwardReply::Failed(TriremeError::new(
            ErrorCode::Unavailable,
            "this node is stopping",
        )),
    ]
}

fn refusal_name(reply: &ForwardReply<()>) -> Option<&'static str> {
    match reply {
        // Checked per answer type by `check_served`.
        ForwardReply::Served(_) => None,
        ForwardReply::NotLeader(_) => Some("forward.reply.not_leader"),
        ForwardReply::Failed(_) => Some("forward.reply.failed"),
    }
}

fn join_answer() -> JoinAnswer {
    JoinAnswer {
        shards: 16,
        created_ms: 1_699_999_999_000,
        peers: vec![(11, "10.1.0.1:7702".into()), (12, "10.1.0.2:7702".into())],
        meta_voters: vec![11, 12],
        exists: true,
        state: Some(NodeState::Draining),
    }
}

fn membership_ops() -> Vec<MembershipOp> {
    vec![
        MembershipOp::AddLearner {
            node: 14,
            member: peer("n4", 4),
        },
        MembershipOp::Progress { node: 14 },
        MembershipOp::SetVoters {
            voters: [12, 13, 14].into_iter().collect(),
        },
        MembershipOp::RemoveLearner { node: 15 },
        MembershipOp::Split {
            at_slot: 12_000,
            child: 5,
            range: (8_192, 16_383),
        },
        MembershipOp::Usage,
        MembershipOp::SplitPoint { range: (0, 8_191) },
    ]
}

fn membership_op_name(op: &MembershipOp) -> &'static str {
    match op {
        MembershipOp::AddLearner { .. } => "membership.request.add_learner",
        MembershipOp::Progress { .. } => "membership.request.progress",
        MembershipOp::SetVoters { .. } => "membership.request.set_voters",
        MembershipOp::RemoveLearner { .. } => "membership.request.remove_learner",
        MembershipOp::Split { .. } => "membership.request.split",
        MembershipOp::Usage => "membership.request.usage",
        MembershipOp::SplitPoint { .. } => "membership.request.split_point",
    }
}

fn membership_replies() -> Vec<MembershipReply> {
    vec![
        MembershipReply::Done,
        MembershipReply::Progress {
            last_index: 900,
            matched: Some(870),
        },
        MembershipReply::NotLeader(Some(13)),
        MembershipReply::Retry("handing leadership over".into()),
        MembershipReply::Refused("the shard no longer owns those slots".into()),
        MembershipReply::Usage {
            bytes: 64 << 20,
            applied: 905,
        },
        MembershipReply::Failed("no such group".into()),
        MembershipReply::SplitPoint(Some(3_000)),
    ]
}

fn membership_reply_name(reply: &MembershipReply) -> &'static str {
    match reply {
        MembershipReply::Done => "membership.reply.done",
        MembershipReply::Progress { .. } => "membership.reply.progress",
        MembershipReply::NotLeader(_) => "membership.reply.not_leader",
        MembershipReply::Retry(_) => "membership.reply.retry",
        MembershipReply::Refused(_) => "membership.reply.refused",
        MembershipReply::Usage { .. } => "membership.reply.usage",
        MembershipReply::Failed(_) => "membership.reply.failed",
        MembershipReply::SplitPoint(_) => "membership.reply.split_point",
    }
}

#[test]
fn metadata_and_forwarded_requests_keep_their_encoding() {
    let mut golden = Golden::open(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/golden/cluster.golden"
    ));

    // Stored, as JSON: the metadata group's rows and the identity.
    json(&mut golden, "stored.node_info", &node_info());
    json(
        &mut golden,
        "stored.node_row",
        &NodeRow {
            info: node_info(),
            region: None,
            version: Some(trireme_types::version::Version {
                protocol: 2,
                build: "0.1.0".into(),
            }),
        },
    );
    json(
        &mut golden,
        "stored.node_row.region",
        &NodeRow {
            info: node_info(),
            region: Some("eu-west-1".into()),
            version: Some(trireme_types::version::Version {
                protocol: 5,
                build: "0.1.0".into(),
            }),
        },
    );
    for (name, state) in node_states() {
        json(&mut golden, &format!("stored.node_state.{name}"), &state);
    }
    for (name, phase) in move_phases() {
        json(&mut golden, &format!("stored.move_phase.{name}"), &phase);
    }
    json(&mut golden, "stored.move", &a_move());
    json(&mut golden, "stored.pending_split", &pending_split());
    json(&mut golden, "stored.cluster_map", &cluster_map());
    json(
        &mut golden,
        "stored.cluster_map.versioned",
        &ClusterMap {
            cluster_version: 2,
            ..cluster_map()
        },
    );
    json(
        &mut golden,
        "stored.cluster_map.regions",
        &ClusterMap {
            cluster_version: 5,
            home_region: Some("eu-west-1".into()),
            learners: [(0, vec![4]), (1, vec![1])].into_iter().collect(),
            ..cluster_map()
        },
    );
    json(
        &mut golden,
        "stored.cluster_map.survival_region",
        &ClusterMap {
            cluster_version: 5,
            home_region: Some("eu-west-1".into()),
            survival: crate::meta::Survival::Region,
            ..cluster_map()
        },
    );
    json(
        &mut golden,
        "stored.move.learner",
        &Move {
            from: None,
            learner: true,
            ..a_move()
        },
    );
    json(&mut golden, "stored.acl_policy", &acl_policy());
    json(&mut golden, "stored.policy_link", &policy_link());
    json(&mut golden, "stored.acl_token", &acl_token());
    json(&mut golden, "stored.acl_store", &acl_store());
    json(&mut golden, "stored.identity", &identity());

    // Sent, in postcard: forwarded shard requests and their replies.
    for (name, mode) in wire_modes() {
        golden.postcard_debug(&format!("forward.mode.{name}"), &mode);
    }
    for op in wire_ops() {
        check_served(&mut golden, &op);
        let name = format!("forward.request.{}", op_name(&op));
        golden.postcard_debug(&name, &ForwardRequest { shard: 7, op });
    }
    for reply in refusals() {
        if let Some(name) = refusal_name(&reply) {
            golden.postcard_debug(name, &reply);
        }
    }

    // Joins.
    golden.postcard_debug(
        "join.request",
        &JoinRequest {
            info: node_info(),
            probe: true,
        },
    );
    golden.postcard_debug("join.answer", &join_answer());
    for (name, state) in node_states() {
        golden.postcard(&format!("join.node_state.{name}"), &state);
    }

    // Membership operations on a shard's leader.
    for op in membership_ops() {
        let name = membership_op_name(&op);
        golden.postcard_debug(name, &MembershipRequest { shard: 3, op });
    }
    for reply in membership_replies() {
        golden.postcard(membership_reply_name(&reply), &reply);
    }

    golden.finish();
}
