//! Golden encodings: what every build must keep reading. postcard writes enum variants by
//! position and struct fields in order, with no names or tags, so a variant inserted before
//! another, a field added in the middle or a type changed turns bytes an older build wrote
//! (a log entry, a stored value, a peer's frame) into something else. A test builds one sample
//! of each variant, and [`Golden`] checks it against a file kept in the repository: the sample
//! must encode to the bytes recorded there and those bytes must decode to the sample.
//!
//! A sample the file does not have yet fails the test, until the test is run once with
//! `TRIREME_GOLDEN=add`, which appends it. Nothing rewrites a recorded encoding: an entry
//! that no longer matches is a format change, to be made a new variant (appended last) or a
//! new version instead.
//!
//! The file: one entry per line, `name hex`; lines starting with `#` are comments.

use serde::Serialize;
use serde::de::DeserializeOwned;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{Debug, Write as _};
use std::path::{Path, PathBuf};

/// A golden file being checked against the samples of one test.
pub struct Golden {
    path: PathBuf,
    recorded: BTreeMap<String, Vec<u8>>,
    checked: BTreeSet<String>,
    new: Vec<(String, Vec<u8>)>,
    failures: Vec<String>,
    /// Whether samples not recorded yet are appended (`TRIREME_GOLDEN=add`).
    add: bool,
}

impl Golden {
    /// Reads the golden file at `path` (none yet: no entries).
    pub fn open(path: impl AsRef<Path>) -> Golden {
        let path = path.as_ref().to_path_buf();
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let mut recorded = BTreeMap::new();
        let mut failures = Vec::new();
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            match line
                .split_once(' ')
                .and_then(|(n, h)| Some((n, from_hex(h)?)))
            {
                Some((name, bytes)) => {
                    recorded.insert(name.to_string(), bytes);
                }
                None => failures.push(format!("line {}: not `name hex`", number + 1)),
            }
        }
        Golden {
            path,
            recorded,
            checked: BTreeSet::new(),
            new: Vec::new(),
            failures,
            add: std::env::var("TRIREME_GOLDEN").as_deref() == Ok("add"),
        }
    }

    /// Checks `value`'s postcard encoding under `name`.
    pub fn postcard<T>(&mut self, name: &str, value: &T)
    where
        T: Serialize + DeserializeOwned + PartialEq + Debug,
    {
        self.check(
            name,
            value,
            |v| postcard::to_stdvec(v).map_err(|e| e.to_string()),
            |bytes| postcard::from_bytes(bytes).map_err(|e| e.to_string()),
        );
    }

    /// Like [`Golden::postcard`] for a type without `PartialEq` (openraft's RPCs): the
    /// decoded value is compared by its `Debug` text.
    pub fn postcard_debug<T>(&mut self, name: &str, value: &T)
    where
        T: Serialize + DeserializeOwned + Debug,
    {
        self.check(
            name,
            &format!("{value:?}"),
            |_| postcard::to_stdvec(value).map_err(|e| e.to_string()),
            |bytes| {
                postcard::from_bytes::<T>(bytes)
                    .map(|decoded| format!("{decoded:?}"))
                    .map_err(|e| e.to_string())
            },
        );
    }

    /// Checks `value` under `name` with its own encoding and decoding.
    pub fn check<T: PartialEq + Debug>(
        &mut self,
        name: &str,
        value: &T,
        encode: impl Fn(&T) -> Result<Vec<u8>, String>,
        decode: impl Fn(&[u8]) -> Result<T, String>,
    ) {
        assert!(
            !name.contains(char::is_whitespace) && self.checked.insert(name.to_string()),
            "sample names are single words, each used once: {name:?}"
        );
        let encoded = match encode(value) {
            Ok(encoded) => encoded,
            Err(e) => {
                self.failures.push(format!("{name}: does not encode: {e}"));
                return;
            }
        };
        let Some(recorded) = self.recorded.get(name) else {
            self.new.push((name.to_string(), encoded));
            return;
        };
        match decode(recorded) {
            Ok(decoded) if decoded == *value => {}
            Ok(decoded) => self.failures.push(format!(
                "{name}: the recorded bytes now decode to {decoded:?}, not {value:?}"
            )),
            Err(e) => self
                .failures
                .push(format!("{name}: the recorded bytes no longer decode: {e}")),
        }
        if encoded != *recorded {
            self.failures.push(format!(
                "{name}: encodes to {} where {} was recorded",
                to_hex(&encoded),
                to_hex(recorded)
            ));
        }
    }

    /// Fails the test on any mismatch, on a recorded entry no sample checked, and on samples
    /// not recorded yet (appending them instead when `TRIREME_GOLDEN=add`).
    pub fn finish(mut self) {
        for name in self.recorded.keys() {
            if !self.checked.contains(name) {
                self.failures.push(format!(
                    "{name}: recorded but no sample checks it (keep the sample: old bytes of it may still be read)"
                ));
            }
        }
        if !self.new.is_empty() {
            if self.add {
                let mut text = std::fs::read_to_string(&self.path).unwrap_or_default();
                for (name, bytes) in &self.new {
                    let _ = writeln!(text, "{name} {}", to_hex(bytes));
                }
                if let Err(e) = std::fs::write(&self.path, text) {
                    self.failures
                        .push(format!("cannot write {}: {e}", self.path.display()));
                }
            } else {
                let names: Vec<_> = self.new.iter().map(|(n, _)| n.as_str()).collect();
                self.failures.push(format!(
                    "samples without a recorded encoding: {} (run the test once with TRIREME_GOLDEN=add to record them)",
                    names.join(", ")
                ));
            }
        }
        assert!(
            self.failures.is_empty(),
            "{}:\n{}",
            self.path.display(),
            self.failures.join("\n")
        );
    }
}

fn to_hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

fn from_hex(text: &str) -> Option<Vec<u8>> {
    let text = text.trim();
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `golden.finish()` fails with; it must fail.
    fn failure_of(golden: Golden) -> String {
        let failure = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| golden.finish()))
            .expect_err("fails");
        failure
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_default()
    }

    #[test]
    fn a_changed_encoding_a_lost_sample_and_a_new_one_fail() {
        let dir = std::env::temp_dir().join(format!("golden-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let path = dir.join("g.golden");
        std::fs::write(&path, "# comment\nseven 07\ngone 01\n").expect("written");
        let mut golden = Golden::open(&path);
        golden.add = false;
        golden.postcard("seven", &7u32);
        golden.postcard("eight", &8u32);
        let text = failure_of(golden);
        assert!(text.contains("gone: recorded but no sample"), "{text}");
        assert!(
            text.contains("without a recorded encoding: eight"),
            "{text}"
        );
        assert!(!text.contains("seven"), "{text}");

        let mut golden = Golden::open(&path);
        golden.add = false;
        golden.postcard("seven", &7u64);
        golden.postcard("gone", &300u32);
        let text = failure_of(golden);
        assert!(
            text.contains("gone: the recorded bytes now decode to 1"),
            "{text}"
        );
        assert!(
            text.contains("encodes to ac02 where 01 was recorded"),
            "{text}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
