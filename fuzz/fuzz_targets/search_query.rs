//! Document search queries on arbitrary input: parsing must answer a query or a clear error,
//! and a query that parses must be matched against a document without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;
use trireme_cluster::SearchQuery;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(query) = SearchQuery::parse(&text) {
        let doc = serde_json::json!({
            "name": "Alice Liddell", "n": 42, "ok": true, "none": null,
            "address": {"city": "Oxford"}, "tags": ["a", {"b": "c d"}, 7],
        });
        let _ = query.matches(&doc);
    }
});
