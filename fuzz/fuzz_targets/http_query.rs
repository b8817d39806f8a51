//! Consul API query strings on arbitrary input: parsing and reading every parameter the KV
//! routes use must answer a value or a clear error, never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use trireme_http::Query;

const FLAGS: [&str; 5] = ["raw", "recurse", "keys", "consistent", "stale"];
const NUMBERS: [&str; 4] = ["cas", "flags", "index", "wait"];

fuzz_target!(|data: &[u8]| {
    let raw = String::from_utf8_lossy(data);
    let query = Query::parse(Some(&raw));
    for name in FLAGS {
        let _ = query.flag(name);
    }
    for name in NUMBERS {
        let _ = query.u64(name);
    }
    let _ = query.str("separator");
});
