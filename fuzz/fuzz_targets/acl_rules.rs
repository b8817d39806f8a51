//! ACL policy rules (Consul's HCL and JSON forms) on arbitrary input: parsing answers rules
//! or an error naming the construct, never a panic; rules that parse build an authorizer
//! that answers every question.
#![no_main]

use libfuzzer_sys::fuzz_target;
use trireme_types::acl::{Authorizer, DefaultPolicy, parse_rules};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let Ok(rules) = parse_rules(&text) else {
        return;
    };
    for default in [DefaultPolicy::Allow, DefaultPolicy::Deny] {
        let can = Authorizer::new(&[&rules, &rules], default);
        for name in [&b""[..], b"a", b"app/", b"app/secret", data] {
            let _ = can.key_read(name);
            let _ = can.key_list(name);
            let _ = can.key_write(name);
            let _ = can.key_write_prefix(name);
            let _ = can.key_list_prefix(name);
            let _ = can.event_read_prefix(name);
            let _ = can.event_write(name);
        }
        let _ = (can.operator_read(), can.operator_write(), can.acl_read(), can.acl_write());
        let _ = can.session_write(&text);
    }
});
