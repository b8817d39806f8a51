//! What travels on a peer link: postcard-encoded [`Frame`]s, each behind a 4-byte big-endian
//! length (tokio-util's length-delimited framing).
//!
//! The two frames of a link's handshake, `Hello` and its `Welcome`, carry the sender's
//! [`Version`] and node name after the frame, inside the same length-delimited body
//! ([`encode_handshake`]): a build from before versions decodes the frame and never looks
//! past it, and a handshake without anything after the frame comes from such a build
//! (protocol 0). So nodes of the first versioned build and of the one before it still link.
//! The name is what a peer's certificate must name, with `[peer_tls]`.

use crate::TypeConfig;
use bytes::{BufMut, BytesMut};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest,
    TransferLeaderResponse, VoteRequest, VoteResponse,
};
use openraft::type_config::alias::{SnapshotMetaOf, VoteOf};
use serde::{Deserialize, Serialize};
use trireme_types::version::Version;

/// The largest frame a node accepts. Snapshots travel in chunks well below it (`snapshot.rs`);
/// what comes near it is an AppendEntries carrying many large batched entries.
pub(crate) const MAX_FRAME: usize = 512 << 20;

/// One message on a link.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum Frame {
    /// The dialer's first frame: which cluster it belongs to, who it is, whom it meant to reach.
    Hello {
        /// The cluster name; a node of another cluster is refused.
        cluster: String,
        /// The dialer's node id.
        from: u64,
        /// The node id the dialer expects to find at this address.
        to: u64,
    },
    /// The acceptor took the link.
    Welcome,
    /// The acceptor refused the link, and why.
    Refused {
        /// Why.
        reason: String,
    },
    /// A request; the answer carries the same id.
    Request {
        /// Chosen by the sender, unique per link.
        id: u64,
        /// What is asked.
        request: Request,
    },
    /// The answer to the request with this id.
    Response {
        /// The request's id.
        id: u64,
        /// The answer.
        response: Response,
    },
    /// Instead of `Hello`, from a node that is not a member yet: it asks to join the cluster.
    /// Answered by `Joined` or `Refused`, then the connection closes.
    Join {
        /// The cluster the node means to join.
        cluster: String,
        /// The cluster layer's encoded request.
        payload: Vec<u8>,
    },
    /// The member took the join request; its encoded answer.
    Joined {
        /// The cluster layer's encoded answer.
        payload: Vec<u8>,
    },
    /// The sender no longer waits for the answer to its request `id`: stop serving it.
    /// Sent only for requests that merely wait (a blocking query's remote wait), so that a
    /// client that hung up frees the waiter on the other node at once.
    Cancel {
        /// The request's id.
        id: u64,
    },
}

/// Requests: Raft RPCs addressed to a group, and client requests forwarded to another node.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum Request {
    /// AppendEntries (also heartbeats).
    Append {
        /// The Raft group.
        group: u32,
        /// The RPC.
        rpc: AppendEntriesRequest<TypeConfig>,
    },
    /// RequestVote.
    Vote {
        /// The Raft group.
        group: u32,
        /// The RPC.
        rpc: VoteRequest<TypeConfig>,
    },
    /// Pre-vote: would the peer vote, without anyone raising its term.
    PreVote {
        /// The Raft group.
        group: u32,
        /// The RPC.
        rpc: VoteRequest<TypeConfig>,
    },
    /// One chunk of a snapshot, for a follower too far behind for the log (`snapshot.rs`).
    SnapshotChunk {
        /// The Raft group.
        group: u32,
        /// The leader's vote.
        vote: VoteOf<TypeConfig>,
        /// What the snapshot covers.
        meta: SnapshotMetaOf<TypeConfig>,
        /// Where this chunk starts in the snapshot file.
        offset: u64,
        /// The snapshot file's length.
        total: u64,
        /// The chunk's bytes.
        data: Vec<u8>,
    },
    /// The leader hands leadership to the receiver (which may take it once its log is flushed).
    TransferLeader {
        /// The Raft group.
        group: u32,
        /// The request.
        rpc: TransferLeaderRequest<TypeConfig>,
    },
    /// A client request the cluster layer forwards to the node that can serve it; the transport
    /// does not look inside.
    Forward {
        /// The cluster layer's encoded request.
        payload: Vec<u8>,
    },
    /// A membership operation the metadata leader asks of a shard's leader (add a learner,
    /// change voters); the transport does not look inside.
    Admin {
        /// The cluster layer's encoded request.
        payload: Vec<u8>,
    },
    /// AppendEntries with the leader's freshness stamp (see `freshness.rs`): sent only to
    /// peers of protocol [`trireme_types::version::since::STAMPED_APPENDS`] or later.
    AppendStamped {
        /// The Raft group.
        group: u32,
        /// The RPC.
        rpc: AppendEntriesRequest<TypeConfig>,
        /// The leader's clock, Unix ms, no later than any entry after the RPC's commit index
        /// was committed.
        leader_ms: u64,
    },
}

/// Answers, one kind per request kind, or why the request could not be served.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum Response {
    /// Answer to [`Request::Append`].
    Append(AppendEntriesResponse<TypeConfig>),
    /// Answer to [`Request::Vote`] and [`Request::PreVote`].
    Vote(VoteResponse<TypeConfig>),
    /// Answer to the last [`Request::SnapshotChunk`]: the snapshot was installed.
    Snapshot(SnapshotResponse<TypeConfig>),
    /// Answer to any other [`Request::SnapshotChunk`]: received, send the next.
    ChunkReceived,
    /// Answer to [`Request::TransferLeader`].
    TransferLeader(TransferLeaderResponse<TypeConfig>),
    /// Answer to [`Request::Forward`] and [`Request::Admin`].
    Forward(Vec<u8>),
    /// The request reached the node but could not be served (no such group here yet, the group
    /// stopped, the node is starting).
    Failed(String),
}

/// A response type a request kind expects back; anything else on the wire is a protocol error.
pub(crate) trait Answer: Sized {
    /// `response` as this type, or back unchanged when it is another kind.
    fn from_response(response: Response) -> Result<Self, Response>;
}

macro_rules! answer {
    ($variant:ident => $ty:ty) => {
        impl Answer for $ty {
            fn from_response(response: Response) -> Result<Self, Response> {
                match response {
                    Response::$variant(answer) => Ok(answer),
                    other => Err(other),
                }
            }
        }
    };
}

answer!(Append => AppendEntriesResponse<TypeConfig>);
answer!(Vote => VoteResponse<TypeConfig>);
answer!(TransferLeader => TransferLeaderResponse<TypeConfig>);

/// Appends `frame` to `out` with its length prefix.
pub(crate) fn encode(frame: &Frame, out: &mut BytesMut) -> Result<(), postcard::Error> {
    let start = out.len();
    out.put_u32(0);
    let mut writer = out.writer();
    postcard::to_io(frame, &mut writer)?;
    let out = writer.into_inner();
    let len = out.len() - start - 4;
    out[start..start + 4].copy_from_slice(&(len as u32).to_be_bytes());
    Ok(())
}

/// Decodes one frame body (without its length prefix).
pub(crate) fn decode(body: &[u8]) -> Result<Frame, postcard::Error> {
    postcard::from_bytes(body)
}

/// What a node says of itself after its handshake frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Announced {
    pub(crate) version: Version,
    /// Its `--node-id`; `None` from a build from before versions.
    pub(crate) name: Option<String>,
}

/// Appends a handshake `frame` followed by `version` and `name` to `out`, under one length
/// prefix. (Small values once per link: built in a vector first.)
pub(crate) fn encode_handshake(
    frame: &Frame,
    version: &Version,
    name: &str,
    out: &mut BytesMut,
) -> Result<(), postcard::Error> {
    let mut body = postcard::to_stdvec(frame)?;
    body.extend_from_slice(&postcard::to_stdvec(version)?);
    body.extend_from_slice(&postcard::to_stdvec(name)?);
    out.put_u32(body.len() as u32);
    out.put_slice(&body);
    Ok(())
}

/// Decodes a handshake body: the frame, and what its sender announced after it (a build
/// from before versions sends nothing: [`Version::unversioned`], no name).
pub(crate) fn decode_handshake(body: &[u8]) -> Result<(Frame, Announced), postcard::Error> {
    let (frame, rest) = postcard::take_from_bytes(body)?;
    if rest.is_empty() {
        let announced = Announced {
            version: Version::unversioned(),
            name: None,
        };
        return Ok((frame, announced));
    }
    let (version, rest) = postcard::take_from_bytes(rest)?;
    // What a later build may add after the name is not this build's to read.
    let name = match rest {
        [] => None,
        rest => Some(postcard::take_from_bytes::<String>(rest)?.0),
    };
    Ok((frame, Announced { version, name }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_with_their_length_prefix() {
        let mut buf = BytesMut::new();
        let frame = Frame::Request {
            id: 7,
            request: Request::Forward {
                payload: b"hello".to_vec(),
            },
        };
        encode(&frame, &mut buf).unwrap();
        let len = u32::from_be_bytes(buf[..4].try_into().unwrap()) as usize;
        assert_eq!(len, buf.len() - 4);
        match decode(&buf[4..]).unwrap() {
            Frame::Request {
                id: 7,
                request: Request::Forward { payload },
            } => assert_eq!(payload, b"hello"),
            other => panic!("decoded {other:?}"),
        }
    }

    #[test]
    fn a_handshake_carries_the_version_and_an_older_build_reads_only_the_frame() {
        let hello = Frame::Hello {
            cluster: "c".into(),
            from: 1,
            to: 2,
        };
        let version = Version {
            protocol: 7,
            build: "9.9.9".into(),
        };
        let mut buf = BytesMut::new();
        encode_handshake(&hello, &version, "n1", &mut buf).unwrap();
        let len = u32::from_be_bytes(buf[..4].try_into().unwrap()) as usize;
        assert_eq!(len, buf.len() - 4);
        let (frame, got) = decode_handshake(&buf[4..]).unwrap();
        assert!(matches!(frame, Frame::Hello { from: 1, to: 2, .. }));
        assert_eq!(got.version, version);
        assert_eq!(got.name.as_deref(), Some("n1"));
        // What a build before versions does with it: `decode` ignores what follows.
        assert!(matches!(
            decode(&buf[4..]).unwrap(),
            Frame::Hello { from: 1, .. }
        ));
        // And what such a build sends: the frame alone.
        let mut old = BytesMut::new();
        encode(&Frame::Welcome, &mut old).unwrap();
        let (frame, got) = decode_handshake(&old[4..]).unwrap();
        assert!(matches!(frame, Frame::Welcome));
        assert_eq!(got.version, Version::unversioned());
        assert_eq!(got.name, None);
        // A version without a name after it (what an earlier build of this protocol sent).
        let mut unnamed = BytesMut::new();
        encode(&Frame::Welcome, &mut unnamed).unwrap();
        unnamed.extend_from_slice(&postcard::to_stdvec(&version).unwrap());
        let (_, got) = decode_handshake(&unnamed[4..]).unwrap();
        assert_eq!((got.version, got.name), (version.clone(), None));
        // Bad bytes where the version belongs are an error, not protocol 0.
        assert!(decode_handshake(&[old[4], 0xff]).is_err());
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for body in [&b""[..], b"\xff\xff\xff\xff\xff", b"\x03\x01", b"\x09"] {
            assert!(decode(body).is_err(), "{body:?} decoded");
        }
    }
}
