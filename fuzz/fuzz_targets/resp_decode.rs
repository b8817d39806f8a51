//! The RESP request decoder on arbitrary bytes: it must never panic, never return more
//! arguments than its limit, and decode the same requests whether the bytes arrive at once
//! or in chunks (the first input byte picks the chunk size).
#![no_main]

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use tokio_util::codec::Decoder;
use trireme_resp::{CodecLimits, RespCodec};

fn limits() -> CodecLimits {
    CodecLimits::default()
        .with_max_args(64)
        .with_max_bulk_bytes(4096)
        .with_max_inline_bytes(4096)
}

/// Every request decoded from `input` fed in `step`-sized pieces, and whether it ended in an
/// error.
fn decode_all(input: &[u8], step: usize) -> (Vec<Vec<Bytes>>, bool) {
    let mut codec = RespCodec::new(limits());
    let mut buf = BytesMut::new();
    let mut requests = Vec::new();
    for chunk in input.chunks(step) {
        buf.extend_from_slice(chunk);
        loop {
            match codec.decode(&mut buf) {
                Ok(Some(args)) => {
                    assert!(args.len() <= 64, "{} arguments passed a limit of 64", args.len());
                    assert!(args.iter().all(|a| a.len() <= 4096), "an argument passed the bulk limit");
                    requests.push(args);
                }
                Ok(None) => break,
                Err(_) => return (requests, true),
            }
        }
    }
    (requests, false)
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, input)) = data.split_first() else {
        return;
    };
    let step = usize::from(first % 32) + 1;
    let whole = decode_all(input, input.len().max(1));
    let chunked = decode_all(input, step);
    assert_eq!(whole, chunked, "chunking changed what was decoded (step {step})");
});
