//! Document search queries on arbitrary input: parsing must answer a query or a clear error,
//! and a query that parses must be matched against a document without panicking, the same
//! whether the document is given parsed or as JSON text. The same text read as a `sort=`
//! parameter answers a sort or a clear error, never more fields than allowed.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(keys) = trireme_search::parse_sort(&text) {
        assert!(!keys.is_empty() && keys.len() <= trireme_search::MAX_SORT_FIELDS);
        assert!(keys.iter().all(|k| k.path.iter().all(|part| !part.is_empty())));
    }
    if let Ok(query) = trireme_search::parse(&text) {
        let doc = serde_json::json!({
            "name": "Alice Liddell", "n": 42, "x": 1.5, "ok": true, "none": null,
            "at": "2024-05-01T10:00:00+02:00", "empty": [], "nothing": {},
            "address": {"city": "Oxford"}, "tags": ["a", {"b": "c d"}, 7, [false]],
        });
        let text = serde_json::to_vec(&doc).expect("a document");
        assert_eq!(
            trireme_search::matches(&query, &doc),
            trireme_search::matches_json(&query, &text)
        );
    }
});
