//! Decoders of stored and client-supplied values on arbitrary bytes: a stored record and a
//! Redis integer. Neither may panic; a record that decodes must encode back to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use trireme_types::Record;

fuzz_target!(|data: &[u8]| {
    if let Ok(record) = Record::decode(data) {
        // The expiry field 0 means "none", so only canonical encodings round-trip exactly.
        let encoded = record.encode();
        assert_eq!(Record::decode(&encoded), Ok(record));
    }
    if let Some(n) = trireme_types::int::parse_i64(data) {
        assert_eq!(n.to_string().as_bytes(), data, "accepted a non-canonical integer");
    }
    let _ = Record::peek_expiry(data);
});
