//! What this crate writes that another build must read: log entries and the markers stored
//! beside them (read back after an upgrade), and every peer frame (read by a node of the next
//! or the previous version during a rolling upgrade). Checked against `golden/raft.golden`
//! (see [`trireme_types::golden`]); openraft's own types are part of it, so a new openraft
//! that encodes them otherwise fails here too.
//!
//! Each enum's samples are named through an exhaustive `match`: a new variant does not
//! compile until it has a name, and so a sample.

use crate::peer::wire::{Frame, Request, Response};
use crate::{PeerNode, TypeConfig};
use openraft::EntryPayload;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest,
    VoteRequest, VoteResponse,
};
use openraft::type_config::alias::{
    EntryOf, LeaderIdOf, LogIdOf, SnapshotMetaOf, StoredMembershipOf, VoteOf,
};
use openraft::vote::RaftLeaderId;
use std::collections::{BTreeMap, BTreeSet};
use trireme_types::golden::Golden;
use trireme_types::{Command, LogCommand, PutCondition, TtlUpdate};

fn log_id(term: u64, node: u64, index: u64) -> LogIdOf<TypeConfig> {
    LogIdOf::<TypeConfig>::new(
        LeaderIdOf::<TypeConfig>::new(term, node).to_committed(),
        index,
    )
}

fn vote(term: u64, node: u64, committed: bool) -> VoteOf<TypeConfig> {
    if committed {
        VoteOf::<TypeConfig>::new_committed(term, node)
    } else {
        VoteOf::<TypeConfig>::new(term, node)
    }
}

fn membership() -> openraft::Membership<u64, PeerNode> {
    let nodes: BTreeMap<u64, PeerNode> = [1u64, 2, 3]
        .into_iter()
        .map(|id| {
            (
                id,
                PeerNode {
                    name: format!("n{id}"),
                    peer_addr: format!("127.0.0.{id}:7702"),
                    http_addr: format!("127.0.0.{id}:7700"),
                    resp_addr: format!("127.0.0.{id}:7701"),
                },
            )
        })
        .collect();
    let voters: BTreeSet<u64> = [1, 2].into_iter().collect();
    openraft::Membership::new(vec![voters], nodes).expect("voters are nodes")
}

fn command() -> LogCommand {
    LogCommand {
        now_ms: 1_700_000_000_123,
        command: Command::Put {
            key: "k".into(),
            value: "v".into(),
            flags: Some(42),
            condition: PutCondition::IfModifyIndex(7),
            ttl: TtlUpdate::At(1_700_000_060_000),
            return_previous: true,
        },
    }
}

fn entries() -> Vec<EntryOf<TypeConfig>> {
    vec![
        EntryOf::<TypeConfig> {
            log_id: log_id(2, 1, 10),
            payload: EntryPayload::Blank,
        },
        EntryOf::<TypeConfig> {
            log_id: log_id(2, 1, 11),
            payload: EntryPayload::Normal(command()),
        },
        EntryOf::<TypeConfig> {
            log_id: log_id(3, 2, 12),
            payload: EntryPayload::Membership(membership()),
        },
    ]
}

fn entry_name(entry: &EntryOf<TypeConfig>) -> &'static str {
    match entry.payload {
        EntryPayload::Blank => "entry.blank",
        EntryPayload::Normal(_) => "entry.normal",
        EntryPayload::Membership(_) => "entry.membership",
    }
}

fn snapshot_meta() -> SnapshotMetaOf<TypeConfig> {
    SnapshotMetaOf::<TypeConfig> {
        last_log_id: Some(log_id(3, 2, 40)),
        last_membership: StoredMembershipOf::<TypeConfig>::new(
            Some(log_id(3, 2, 12)),
            membership(),
        ),
    }
}

fn requests() -> Vec<Request> {
    vec![
        Request::Append {
            group: 5,
            rpc: AppendEntriesRequest {
                vote: vote(3, 2, true),
                prev_log_id: Some(log_id(2, 1, 9)),
                entries: entries(),
                leader_commit: Some(log_id(2, 1, 9)),
            },
        },
        Request::Vote {
            group: 5,
            rpc: VoteRequest::new(vote(4, 3, false), Some(log_id(3, 2, 12))),
        },
        Request::PreVote {
            group: 0,
            rpc: VoteRequest::new(vote(4, 3, false), None),
        },
        Request::SnapshotChunk {
            group: 5,
            vote: vote(3, 2, true),
            meta: snapshot_meta(),
            offset: 4096,
            total: 10_000,
            data: vec![1, 2, 3],
        },
        Request::TransferLeader {
            group: 5,
            rpc: TransferLeaderRequest::new(vote(3, 2, true), 3, Some(log_id(3, 2, 12))),
        },
        Request::Forward {
            payload: vec![9, 8, 7],
        },
        Request::Admin {
            payload: vec![6, 5],
        },
        Request::AppendStamped {
            group: 5,
            rpc: AppendEntriesRequest {
                vote: vote(3, 2, true),
                prev_log_id: Some(log_id(3, 2, 12)),
                entries: Vec::new(),
                leader_commit: Some(log_id(3, 2, 12)),
            },
            leader_ms: 1_764_000_000_000,
        },
    ]
}

fn request_name(request: &Request) -> &'static str {
    match request {
        Request::Append { .. } => "request.append",
        Request::Vote { .. } => "request.vote",
        Request::PreVote { .. } => "request.pre_vote",
        Request::SnapshotChunk { .. } => "request.snapshot_chunk",
        Request::TransferLeader { .. } => "request.transfer_leader",
        Request::Forward { .. } => "request.forward",
        Request::Admin { .. } => "request.admin",
        Request::AppendStamped { .. } => "request.append_stamped",
    }
}

fn responses() -> Vec<(&'static str, Response)> {
    let answers = vec![
        Response::Append(AppendEntriesResponse::Success),
        Response::Append(AppendEntriesResponse::PartialSuccess(Some(log_id(
            2, 1, 11,
        )))),
        Response::Append(AppendEntriesResponse::Conflict),
        Response::Append(AppendEntriesResponse::HigherVote(vote(5, 3, false))),
        Response::Vote(VoteResponse::new(
            vote(4, 3, false),
            Some(log_id(3, 2, 12)),
            true,
        )),
        Response::Snapshot(SnapshotResponse::new(vote(3, 2, true))),
        Response::ChunkReceived,
        Response::TransferLeader(Ok(())),
        Response::Forward(vec![1, 2]),
        Response::Failed("no such group".into()),
    ];
    answers
        .into_iter()
        .map(|response| {
            let name = match &response {
                Response::Append(AppendEntriesResponse::Success) => "response.append_success",
                Response::Append(AppendEntriesResponse::PartialSuccess(_)) => {
                    "response.append_partial"
                }
                Response::Append(AppendEntriesResponse::Conflict) => "response.append_conflict",
                Response::Append(AppendEntriesResponse::HigherVote(_)) => {
                    "response.append_higher_vote"
                }
                Response::Vote(_) => "response.vote",
                Response::Snapshot(_) => "response.snapshot",
                Response::ChunkReceived => "response.chunk_received",
                Response::TransferLeader(_) => "response.transfer_leader",
                Response::Forward(_) => "response.forward",
                Response::Failed(_) => "response.failed",
            };
            (name, response)
        })
        .collect()
}

fn frames() -> Vec<Frame> {
    vec![
        Frame::Hello {
            cluster: "trireme".into(),
            from: 11,
            to: 12,
        },
        Frame::Welcome,
        Frame::Refused {
            reason: "another cluster".into(),
        },
        Frame::Request {
            id: 3,
            request: Request::Forward { payload: vec![1] },
        },
        Frame::Response {
            id: 3,
            response: Response::ChunkReceived,
        },
        Frame::Join {
            cluster: "trireme".into(),
            payload: vec![4, 5],
        },
        Frame::Joined { payload: vec![6] },
        Frame::Cancel { id: 3 },
    ]
}

fn frame_name(frame: &Frame) -> &'static str {
    match frame {
        Frame::Hello { .. } => "frame.hello",
        Frame::Welcome => "frame.welcome",
        Frame::Refused { .. } => "frame.refused",
        Frame::Request { .. } => "frame.request",
        Frame::Response { .. } => "frame.response",
        Frame::Join { .. } => "frame.join",
        Frame::Joined { .. } => "frame.joined",
        Frame::Cancel { .. } => "frame.cancel",
    }
}

#[test]
fn logs_markers_and_peer_frames_keep_their_encoding() {
    let mut golden = Golden::open(concat!(env!("CARGO_MANIFEST_DIR"), "/golden/raft.golden"));
    for entry in entries() {
        golden.postcard_debug(entry_name(&entry), &entry);
    }
    golden.postcard_debug("marker.applied", &Some(log_id(3, 2, 40)));
    golden.postcard_debug(
        "marker.membership",
        &StoredMembershipOf::<TypeConfig>::new(Some(log_id(3, 2, 12)), membership()),
    );
    golden.postcard_debug("marker.vote", &vote(3, 2, true));
    golden.postcard_debug("marker.snapshot_meta", &snapshot_meta());
    for request in requests() {
        golden.postcard_debug(request_name(&request), &request);
    }
    for (name, response) in responses() {
        golden.postcard_debug(name, &response);
    }
    for frame in frames() {
        golden.postcard_debug(frame_name(&frame), &frame);
    }
    // A handshake body: the frame, then the sender's version and name (see `wire.rs`).
    let hello = frames().swap_remove(0);
    let version = trireme_types::version::Version {
        protocol: 1,
        build: "0.1.0".into(),
    };
    golden.check(
        "handshake.hello",
        &format!("{hello:?} {version:?} n1"),
        |_| {
            let mut out = bytes::BytesMut::new();
            crate::peer::wire::encode_handshake(&hello, &version, "n1", &mut out)
                .map_err(|e| e.to_string())?;
            Ok(out[4..].to_vec())
        },
        |body| {
            let (frame, announced) =
                crate::peer::wire::decode_handshake(body).map_err(|e| e.to_string())?;
            let name = announced.name.unwrap_or_default();
            Ok(format!("{frame:?} {:?} {name}", announced.version))
        },
    );
    golden.finish();
}
