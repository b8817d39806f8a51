//! The peer-link decoder on arbitrary bytes: whatever another node (or anyone reaching the peer
//! port) sends, decoding must fail cleanly, never panic or allocate without bound.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = trireme_raft::decode_peer_frame(data);
});
