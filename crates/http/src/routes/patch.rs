//! Changing part of a document: JSON Patch (RFC 6902: `add`, `remove`, `replace`, `move`,
//! `copy`, `test`, paths as JSON Pointers, RFC 6901) and JSON Merge Patch (RFC 7396), applied
//! to a copy of the document; the caller writes the result back only if every operation held.

use serde_json::Value;

/// Applies the JSON Patch `ops` (a JSON array of operation objects) to `doc`, all or nothing;
/// the error names the operation (by position) and what went wrong. `max_bytes` bounds what
/// the operations may add up to (a `copy` of the whole document doubles it: thirty of them
/// would not fit in any memory), counted as the JSON text of every value added.
pub(crate) fn apply_json_patch(
    doc: &Value,
    ops: &Value,
    doc_bytes: usize,
    max_bytes: usize,
) -> Result<Value, String> {
    let Value::Array(ops) = ops else {
        return Err("a JSON Patch is an array of operations".into());
    };
    let mut out = doc.clone();
    let mut size = doc_bytes;
    for (i, op) in ops.iter().enumerate() {
        let added = apply_one(&mut out, op).map_err(|e| format!("operation {i}: {e}"))?;
        size = size.saturating_add(added);
        if size > max_bytes {
            return Err(format!(
                "operation {i}: the document would grow past {max_bytes} bytes"
            ));
        }
    }
    Ok(out)
}

/// The length of `value` as JSON text, counted without building it.
fn json_len(value: &Value) -> usize {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    let _ = serde_json::to_writer(&mut counter, value);
    counter.0
}

/// Applies a JSON Merge Patch: members set to `null` are removed, objects merge, anything else
/// replaces.
pub(crate) fn apply_merge_patch(doc: &Value, patch: &Value) -> Value {
    match patch {
        Value::Object(changes) => {
            let mut out = match doc {
                Value::Object(map) => map.clone(),
                _ => serde_json::Map::new(),
            };
            for (key, change) in changes {
                if change.is_null() {
                    out.remove(key);
                } else {
                    let merged = apply_merge_patch(out.get(key).unwrap_or(&Value::Null), change);
                    out.insert(key.clone(), merged);
                }
            }
            Value::Object(out)
        }
        other => other.clone(),
    }
}

fn field<'a>(op: &'a Value, name: &str) -> Result<&'a Value, String> {
    op.get(name)
        .ok_or_else(|| format!("missing {name:?} member"))
}

fn text<'a>(op: &'a Value, name: &str) -> Result<&'a str, String> {
    field(op, name)?
        .as_str()
        .ok_or_else(|| format!("{name:?} must be a string"))
}

/// Applies one operation; returns the bytes it added (0 for those that add nothing).
fn apply_one(doc: &mut Value, op: &Value) -> Result<usize, String> {
    let name = text(op, "op")?;
    let path = pointer(text(op, "path")?)?;
    match name {
        "add" => {
            let value = field(op, "value")?;
            add(doc, &path, value.clone()).map(|()| json_len(value))
        }
        "remove" => remove(doc, &path).map(|_| 0),
        "replace" => {
            let value = field(op, "value")?;
            remove(doc, &path)?;
            add(doc, &path, value.clone()).map(|()| json_len(value))
        }
        "move" => {
            let from = pointer(text(op, "from")?)?;
            if path.len() > from.len() && path[..from.len()] == from[..] {
                return Err("cannot move a value into itself".into());
            }
            let value = remove(doc, &from)?;
            add(doc, &path, value).map(|()| 0)
        }
        "copy" => {
            let from = pointer(text(op, "from")?)?;
            let value = get(doc, &from)?;
            let added = json_len(value);
            let value = value.clone();
            add(doc, &path, value).map(|()| added)
        }
        "test" => {
            if get(doc, &path)? == field(op, "value")? {
                Ok(0)
            } else {
                Err(format!(
                    "test failed: the value at {:?} differs",
                    text(op, "path")?
                ))
            }
        }
        other => Err(format!(
            "unknown op {other:?} (add, remove, replace, move, copy, test)"
        )),
    }
}

/// A JSON Pointer's reference tokens, `~1` and `~0` unescaped.
fn pointer(text: &str) -> Result<Vec<String>, String> {
    if text.is_empty() {
        return Ok(Vec::new());
    }
    let Some(rest) = text.strip_prefix('/') else {
        return Err(format!("path {text:?} must be empty or start with /"));
    };
    Ok(rest
        .split('/')
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect())
}

fn index_of(token: &str, len: usize, appending: bool) -> Result<usize, String> {
    if appending && token == "-" {
        return Ok(len);
    }
    let valid = !token.is_empty()
        && token.bytes().all(|b| b.is_ascii_digit())
        && (token == "0" || !token.starts_with('0'));
    let index: usize = token
        .parse()
        .ok()
        .filter(|_| valid)
        .ok_or_else(|| format!("{token:?} is not an array index"))?;
    let limit = if appending {
        len
    } else {
        len.saturating_sub(1)
    };
    if index > limit || (!appending && len == 0) {
        return Err(format!("index {index} is out of bounds"));
    }
    Ok(index)
}

fn get<'a>(doc: &'a Value, path: &[String]) -> Result<&'a Value, String> {
    let mut at = doc;
    for token in path {
        at = match at {
            Value::Object(map) => map
                .get(token)
                .ok_or_else(|| format!("no member {token:?}"))?,
            Value::Array(items) => &items[index_of(token, items.len(), false)?],
            _ => {
                return Err(format!(
                    "{token:?} goes past a value that is not a container"
                ));
            }
        };
    }
    Ok(at)
}

fn parent<'a>(doc: &'a mut Value, path: &[String]) -> Result<&'a mut Value, String> {
    let mut at = doc;
    for token in path {
        at = match at {
            Value::Object(map) => map
                .get_mut(token)
                .ok_or_else(|| format!("no member {token:?}"))?,
            Value::Array(items) => {
                let i = index_of(token, items.len(), false)?;
                &mut items[i]
            }
            _ => {
                return Err(format!(
                    "{token:?} goes past a value that is not a container"
                ));
            }
        };
    }
    Ok(at)
}

fn add(doc: &mut Value, path: &[String], value: Value) -> Result<(), String> {
    let Some((last, up)) = path.split_last() else {
        *doc = value;
        return Ok(());
    };
    match parent(doc, up)? {
        Value::Object(map) => {
            map.insert(last.clone(), value);
            Ok(())
        }
        Value::Array(items) => {
            let i = index_of(last, items.len(), true)?;
            items.insert(i, value);
            Ok(())
        }
        _ => Err("the parent of the path is not an object or array".into()),
    }
}

fn remove(doc: &mut Value, path: &[String]) -> Result<Value, String> {
    let Some((last, up)) = path.split_last() else {
        return Err("cannot remove the whole document".into());
    };
    match parent(doc, up)? {
        Value::Object(map) => map
            .remove(last)
            .ok_or_else(|| format!("no member {last:?}")),
        Value::Array(items) => {
            let i = index_of(last, items.len(), false)?;
            Ok(items.remove(i))
        }
        _ => Err("the parent of the path is not an object or array".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn patched(doc: Value, ops: Value) -> Result<Value, String> {
        apply_json_patch(&doc, &ops, 0, 1 << 20)
    }

    #[test]
    fn copies_cannot_grow_a_document_without_bound() {
        let doc = json!({"a": "x".repeat(1000)});
        let doubling: Vec<Value> = (0..30)
            .map(|i| json!({"op": "copy", "from": "", "path": format!("/c{i}")}))
            .collect();
        let e = apply_json_patch(&doc, &Value::Array(doubling), 1010, 64 * 1024).unwrap_err();
        assert!(e.contains("would grow past 65536 bytes"), "{e}");
    }

    #[test]
    fn json_patch_operations() {
        let doc = json!({"a": 1, "list": [1, 2], "o": {"x": "y"}, "a/b": 0, "t~": 1});
        let out = patched(
            doc.clone(),
            json!([
                {"op": "add", "path": "/b", "value": 2},
                {"op": "replace", "path": "/a", "value": 10},
                {"op": "add", "path": "/list/-", "value": 3},
                {"op": "add", "path": "/list/0", "value": 0},
                {"op": "remove", "path": "/list/1"},
                {"op": "move", "from": "/o/x", "path": "/moved"},
                {"op": "copy", "from": "/a", "path": "/o/a"},
                {"op": "remove", "path": "/a~1b"},
                {"op": "replace", "path": "/t~0", "value": 2},
                {"op": "test", "path": "/moved", "value": "y"},
            ]),
        )
        .unwrap();
        assert_eq!(
            out,
            json!({"a": 10, "b": 2, "list": [0, 2, 3], "o": {"a": 10}, "moved": "y", "t~": 2})
        );
    }

    #[test]
    fn a_failing_operation_leaves_nothing_applied_and_says_which() {
        let doc = json!({"a": 1});
        for (ops, problem) in [
            (
                json!([{"op": "add", "path": "/b", "value": 1}, {"op": "test", "path": "/a", "value": 2}]),
                "operation 1: test failed",
            ),
            (json!([{"op": "remove", "path": "/zz"}]), "no member"),
            (
                json!([{"op": "replace", "path": "/zz", "value": 1}]),
                "no member",
            ),
            (
                json!([{"op": "add", "path": "/a/b", "value": 1}]),
                "not an object",
            ),
            (
                json!([{"op": "add", "path": "a", "value": 1}]),
                "start with /",
            ),
            (json!([{"op": "frob", "path": "/a"}]), "unknown op"),
            (json!([{"op": "add", "path": "/a"}]), "missing \"value\""),
            (json!([{"op": "remove", "path": ""}]), "whole document"),
            (json!({"op": "add"}), "array of operations"),
        ] {
            let e = patched(doc.clone(), ops).unwrap_err();
            assert!(e.contains(problem), "{e}");
        }
        let list = json!({"l": [1]});
        for path in ["/l/01", "/l/5", "/l/-1", "/l/x"] {
            assert!(patched(list.clone(), json!([{"op": "remove", "path": path}])).is_err());
        }
        assert!(
            patched(
                json!({"a": {"b": 1}}),
                json!([{"op": "move", "from": "/a", "path": "/a/c"}])
            )
            .unwrap_err()
            .contains("into itself")
        );
    }

    #[test]
    fn merge_patch_removes_nulls_and_merges_objects() {
        let doc = json!({"a": 1, "o": {"x": 1, "y": 2}, "keep": true});
        let out = apply_merge_patch(
            &doc,
            &json!({"a": null, "o": {"y": null, "z": 3}, "n": [1]}),
        );
        assert_eq!(out, json!({"o": {"x": 1, "z": 3}, "keep": true, "n": [1]}));
    }
}
