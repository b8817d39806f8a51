//! Redis hashes in the state machine: the hash's record keeps its field count, each field is
//! a member row (see [`trireme_types::collection`]). The same reads serve a plain read of a
//! replica ([`Storage::hash_read`]) and a read inside a transaction, which must see the
//! transaction's earlier writes.

use super::rows::{RowSpan, count_stored_rows, stored_rows};
use super::{Pending, add_decimal, add_integer};
use crate::StorageError;
use crate::keys::owned_key;
use crate::tables::{Space, TablesSnapshot};
use bytes::Bytes;
use trireme_types::collection::{RowTable, decode_count, encode_count, member_key, member_prefix};
use trireme_types::{ErrorCode, HashAnswer, HashOp, HashRead, Record, ValueKind};

/// Where a read of a collection finds it: the store as it is, or a batch being applied.
pub(super) trait MemberSource {
    /// The live record at `key`.
    fn head(&mut self, key: &Bytes) -> Result<Option<Record>, StorageError>;
    /// One member row's value.
    fn member(&mut self, row: &Bytes) -> Result<Option<Bytes>, StorageError>;
    /// Member rows under `prefix` after `after` (exclusive), in order, at most `limit`: the
    /// members (without the prefix) and their values.
    fn members(
        &mut self,
        prefix: &Bytes,
        after: Option<&[u8]>,
        limit: u64,
    ) -> Result<Vec<(Bytes, Bytes)>, StorageError>;
    /// The rows in `span` with their values, past the first `skip`, at most `limit`.
    fn rows(
        &mut self,
        span: &RowSpan,
        skip: u64,
        limit: u64,
    ) -> Result<Vec<(Bytes, Bytes)>, StorageError>;
    /// How many rows lie in `span`.
    fn count(&mut self, span: &RowSpan) -> Result<u64, StorageError>;
}

/// The stored rows of `shard` under `prefix` after `after`, at most `limit`, as `snapshot`
/// holds them (see [`stored_rows`]).
fn stored_members(
    snapshot: &TablesSnapshot,
    shard: u32,
    prefix: &Bytes,
    after: Option<&[u8]>,
    limit: u64,
    values: bool,
) -> Result<Vec<(Bytes, Bytes)>, StorageError> {
    let span = RowSpan::after(prefix.clone(), after);
    stored_rows(snapshot, shard, &span, 0, limit, values)
}

/// One shard as one snapshot of the store holds it: a read of a collection sees its record
/// and its members as of one moment, never half of a write.
pub(super) struct Stored<'s> {
    pub(super) snapshot: &'s TablesSnapshot,
    pub(super) shard: u32,
    pub(super) now: u64,
}

impl Stored<'_> {
    fn get(&self, key: &[u8]) -> Result<Option<Record>, StorageError> {
        match self
            .snapshot
            .get(Space::Data, &owned_key(self.shard, key))?
        {
            Some(bytes) => Ok(Some(Record::decode(&bytes)?)),
            None => Ok(None),
        }
    }
}

impl MemberSource for Stored<'_> {
    fn head(&mut self, key: &Bytes) -> Result<Option<Record>, StorageError> {
        Ok(self.get(key)?.filter(|r| !r.is_expired(self.now)))
    }

    fn member(&mut self, row: &Bytes) -> Result<Option<Bytes>, StorageError> {
        Ok(self.get(row)?.map(|r| r.value))
    }

    fn members(
        &mut self,
        prefix: &Bytes,
        after: Option<&[u8]>,
        limit: u64,
    ) -> Result<Vec<(Bytes, Bytes)>, StorageError> {
        stored_members(self.snapshot, self.shard, prefix, after, limit, true)
    }

    fn rows(
        &mut self,
        span: &RowSpan,
        skip: u64,
        limit: u64,
    ) -> Result<Vec<(Bytes, Bytes)>, StorageError> {
        stored_rows(self.snapshot, self.shard, span, skip, limit, true)
    }

    fn count(&mut self, span: &RowSpan) -> Result<u64, StorageError> {
        count_stored_rows(self.snapshot, self.shard, span)
    }
}

/// A batch being applied, at `now`.
pub(super) struct InBatch<'p, 's> {
    pub(super) pending: &'p mut Pending<'s>,
    pub(super) now: u64,
}

impl MemberSource for InBatch<'_, '_> {
    fn head(&mut self, key: &Bytes) -> Result<Option<Record>, StorageError> {
        self.pending.live(key, self.now)
    }

    fn member(&mut self, row: &Bytes) -> Result<Option<Bytes>, StorageError> {
        Ok(self.pending.raw(row)?.map(|r| r.value))
    }

    fn members(
        &mut self,
        prefix: &Bytes,
        after: Option<&[u8]>,
        limit: u64,
    ) -> Result<Vec<(Bytes, Bytes)>, StorageError> {
        self.pending.members(prefix, after, limit)
    }

    fn rows(
        &mut self,
        span: &RowSpan,
        skip: u64,
        limit: u64,
    ) -> Result<Vec<(Bytes, Bytes)>, StorageError> {
        self.pending.rows_in(span, skip, limit, true)
    }

    fn count(&mut self, span: &RowSpan) -> Result<u64, StorageError> {
        self.pending.count_rows_in(span)
    }
}

/// Answers `read` of the hash at `key` from `source`.
fn read(
    source: &mut impl MemberSource,
    key: &Bytes,
    read: &HashRead,
) -> Result<Result<HashAnswer, ErrorCode>, StorageError> {
    let head = match source.head(key)? {
        Some(head) if head.kind != ValueKind::Hash => return Ok(Err(ErrorCode::WrongType)),
        head => head,
    };
    Ok(Ok(match read {
        HashRead::Len => HashAnswer::Count(head.map_or(0, |h| decode_count(&h.value))),
        HashRead::Get { fields } => {
            let mut values = Vec::with_capacity(fields.len());
            for field in fields {
                values.push(match &head {
                    Some(head) => source.member(&member_key(key, head.create_index, field))?,
                    None => None,
                });
            }
            HashAnswer::Values(values)
        }
        HashRead::Fields { after, limit } => HashAnswer::Pairs(match &head {
            Some(head) => source.members(
                &member_prefix(key, head.create_index),
                after.as_deref(),
                *limit,
            )?,
            None => Vec::new(),
        }),
    }))
}

impl crate::ShardView<'_> {
    /// Answers a read of the hash at `key` as this view holds it at `now`.
    pub fn hash_read(
        &self,
        key: &Bytes,
        hash_read: &HashRead,
        now: u64,
    ) -> Result<Result<HashAnswer, ErrorCode>, StorageError> {
        let mut stored = Stored {
            snapshot: self.snapshot(),
            shard: self.shard().0,
            now,
        };
        read(&mut stored, key, hash_read)
    }
}

impl Pending<'_> {
    /// Member rows under `prefix` as this batch sees them: the stored ones with this batch's
    /// changes laid over; without `values`, members only.
    pub(super) fn member_rows(
        &mut self,
        prefix: &Bytes,
        after: Option<&[u8]>,
        limit: u64,
        values: bool,
    ) -> Result<Vec<(Bytes, Bytes)>, StorageError> {
        self.rows_in(&RowSpan::after(prefix.clone(), after), 0, limit, values)
    }

    /// Member rows under `prefix` with their values, as this batch sees them.
    pub(super) fn members(
        &mut self,
        prefix: &Bytes,
        after: Option<&[u8]>,
        limit: u64,
    ) -> Result<Vec<(Bytes, Bytes)>, StorageError> {
        self.member_rows(prefix, after, limit, true)
    }

    /// Undoes what this batch wrote under version `version` of the collection at `key`
    /// (its record is going or being replaced): O(the batch's own rows), never a walk over
    /// the stored ones, which are dead with their version and purged in the background.
    pub(super) fn drop_changed_rows(
        &mut self,
        key: &Bytes,
        version: u64,
    ) -> Result<(), StorageError> {
        for table in [RowTable::Members, RowTable::Scores] {
            let prefix = table.prefix(key, version);
            let written: Vec<Bytes> = self
                .changed_members
                .range::<Bytes, _>((
                    std::ops::Bound::Included(prefix.clone()),
                    std::ops::Bound::Unbounded,
                ))
                .take_while(|row| row.starts_with(&prefix[..]))
                .filter(|row| matches!(self.changes.get(*row), Some(Some(_))))
                .cloned()
                .collect();
            for row in written {
                self.set(row, None)?;
            }
        }
        Ok(())
    }

    /// Applies a hash command to `key` at `index`.
    pub(super) fn hash(
        &mut self,
        key: &Bytes,
        op: &HashOp,
        index: u64,
        now: u64,
    ) -> Result<Result<HashAnswer, ErrorCode>, StorageError> {
        if let HashOp::Read(hash_read) = op {
            return read(&mut InBatch { pending: self, now }, key, hash_read);
        }
        let head = self.live(key, now)?;
        if head.as_ref().is_some_and(|h| h.kind != ValueKind::Hash) {
            return Ok(Err(ErrorCode::WrongType));
        }
        let mut count = head.as_ref().map_or(0, |h| decode_count(&h.value));
        let mut hash = HashEdit {
            key,
            exists: head.is_some(),
            version: head.as_ref().map_or(index, |h| h.create_index),
            index,
            wrote: false,
        };
        let answer = match op {
            HashOp::Read(_) => unreachable!("answered above"),
            HashOp::Set {
                pairs,
                only_new,
                max_fields,
            } => {
                // Checked before anything is written: a command past the limit changes
                // nothing.
                let mut new_fields = std::collections::HashSet::new();
                for (field, _) in pairs {
                    if hash.created(self, field)?.is_none() {
                        new_fields.insert(field);
                    }
                }
                let added = new_fields.len() as u64;
                if count.saturating_add(added) > *max_fields {
                    return Ok(Err(ErrorCode::ValueTooLarge));
                }
                count += added;
                for (field, value) in pairs {
                    let created = hash.created(self, field)?;
                    if created.is_some() && *only_new && !new_fields.contains(field) {
                        continue;
                    }
                    hash.write(self, field, value.clone(), created)?;
                }
                HashAnswer::Count(added)
            }
            HashOp::Delete { fields } => {
                let mut removed = 0u64;
                for field in fields {
                    if hash.created(self, field)?.is_some() {
                        self.set(member_key(key, hash.version, field), None)?;
                        hash.wrote = true;
                        removed += 1;
                    }
                }
                count -= removed.min(count);
                HashAnswer::Count(removed)
            }
            HashOp::IncrBy {
                field,
                delta,
                max_fields,
            } => {
                let old = hash.field(self, field)?;
                let next = match add_integer(old.as_ref().map(|r| &r.value[..]), *delta) {
                    Ok(next) => next,
                    Err(code) => return Ok(Err(code)),
                };
                if old.is_none()
                    && let Err(code) = one_more(&mut count, *max_fields)
                {
                    return Ok(Err(code));
                }
                let created = old.map(|r| r.create_index);
                hash.write(self, field, Bytes::from(next.to_string()), created)?;
                HashAnswer::Int(next)
            }
            HashOp::IncrByFloat {
                field,
                increment,
                max_fields,
            } => {
                let old = hash.field(self, field)?;
                let printed = match add_decimal(old.as_ref().map(|r| &r.value[..]), increment) {
                    Ok(printed) => printed,
                    Err(code) => return Ok(Err(code)),
                };
                if old.is_none()
                    && let Err(code) = one_more(&mut count, *max_fields)
                {
                    return Ok(Err(code));
                }
                hash.write(self, field, printed.clone(), old.map(|r| r.create_index))?;
                HashAnswer::Float(printed)
            }
        };
        // A command that changed nothing (`HSETNX` on a field that is there, `HDEL` of
        // missing fields) leaves the key untouched, so a `WATCH` on it holds, as in Redis.
        if !hash.wrote {
            return Ok(Ok(answer));
        }
        if count == 0 {
            // Redis deletes a hash with its last field.
            if head.is_some() {
                self.set(key.clone(), None)?;
            }
            return Ok(Ok(answer));
        }
        let record = Record {
            value: encode_count(count),
            flags: 0,
            create_index: head.as_ref().map_or(index, |h| h.create_index),
            modify_index: index,
            expires_at_ms: head.as_ref().and_then(|h| h.expires_at_ms),
            lock: Default::default(),
            kind: ValueKind::Hash,
        };
        self.set(key.clone(), Some(record))?;
        Ok(Ok(answer))
    }
}

/// Counts a new field into `count`, or refuses it past `max`.
fn one_more(count: &mut u64, max: u64) -> Result<(), ErrorCode> {
    if *count >= max {
        return Err(ErrorCode::ValueTooLarge);
    }
    *count += 1;
    Ok(())
}

/// The hash one command changes.
struct HashEdit<'k> {
    key: &'k Bytes,
    /// Whether the hash existed (live) before the command.
    exists: bool,
    /// The hash's version: its record's `CreateIndex`, or this entry's index for a new one.
    version: u64,
    index: u64,
    /// Whether the command changed a field.
    wrote: bool,
}

impl HashEdit<'_> {
    /// A field's row as the batch sees it; none in a hash that did not exist (rows of an
    /// expired one may still be stored: they are purged when its record goes).
    fn field(
        &self,
        pending: &mut Pending<'_>,
        field: &[u8],
    ) -> Result<Option<Record>, StorageError> {
        if !self.exists {
            return Ok(None);
        }
        pending.raw(&member_key(self.key, self.version, field))
    }

    /// The `CreateIndex` of a field's row as the batch sees it, `None` if the hash has no such
    /// field: without reading the row when the member index can say.
    fn created(
        &self,
        pending: &mut Pending<'_>,
        field: &[u8],
    ) -> Result<Option<u64>, StorageError> {
        if !self.exists {
            return Ok(None);
        }
        pending.member_number(&member_key(self.key, self.version, field), ValueKind::Hash)
    }

    /// Writes a field; `created` is the `CreateIndex` of the row it replaces.
    fn write(
        &mut self,
        pending: &mut Pending<'_>,
        field: &[u8],
        value: Bytes,
        created: Option<u64>,
    ) -> Result<(), StorageError> {
        if !self.exists {
            // The first write of a new hash: whatever an expired one left goes first.
            if pending.raw(self.key)?.is_some() {
                pending.set(self.key.clone(), None)?;
            }
            self.exists = true;
        }
        self.wrote = true;
        let mut record = Record::string(value, self.index);
        if let Some(created) = created {
            record.create_index = created;
        }
        pending.set(member_key(self.key, self.version, field), Some(record))
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use crate::{Storage, StorageOptions};
    use trireme_types::collection::member_key;
    use trireme_types::{
        Command, CommandResult, ErrorCode, HashAnswer, HashOp, HashRead, KeyCheck, PutCondition,
        ShardId, TtlUpdate,
    };

    fn hset(key: &str, pairs: &[(&str, &str)]) -> Command {
        Command::Hash {
            key: b(key),
            op: HashOp::Set {
                pairs: pairs.iter().map(|(f, v)| (b(f), b(v))).collect(),
                only_new: false,
                max_fields: 3,
            },
        }
    }

    fn read(key: &str, read: HashRead) -> Command {
        Command::Hash {
            key: b(key),
            op: HashOp::Read(read),
        }
    }

    fn all() -> HashRead {
        HashRead::Fields {
            after: None,
            limit: u64::MAX,
        }
    }

    fn answer(result: &CommandResult) -> Result<HashAnswer, ErrorCode> {
        match result {
            CommandResult::Hash(answer) => answer.clone(),
            other => panic!("not a hash answer: {other:?}"),
        }
    }

    fn pairs(storage: &Storage, key: &str) -> Vec<(String, String)> {
        match storage
            .shard_view(ShardId(0))
            .hash_read(&b(key), &all(), 1)
            .unwrap()
        {
            Ok(HashAnswer::Pairs(pairs)) => pairs
                .into_iter()
                .map(|(f, v)| {
                    (
                        String::from_utf8_lossy(&f).into_owned(),
                        String::from_utf8_lossy(&v).into_owned(),
                    )
                })
                .collect(),
            other => panic!("{other:?}"),
        }
    }

    fn stored_rows(storage: &Storage) -> usize {
        storage.count_keys(ShardId(0))
    }

    #[test]
    fn fields_are_rows_counted_in_the_head_and_go_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(dir.path(), &StorageOptions::default()).unwrap();
        let results = run_at(
            &storage,
            1,
            1,
            vec![
                hset("h", &[("b", "2"), ("a", "1"), ("a", "one")]),
                hset("h", &[("c", "3"), ("d", "4")]),
                Command::Hash {
                    key: b("h"),
                    op: HashOp::Delete {
                        fields: vec![b("b"), b("zz")],
                    },
                },
                Command::Hash {
                    key: b("h"),
                    op: HashOp::IncrBy {
                        field: b("n"),
                        delta: -5,
                        max_fields: 10,
                    },
                },
                Command::Incr {
                    key: b("h"),
                    delta: 1,
                },
                Command::Hash {
                    key: b("h"),
                    op: HashOp::IncrBy {
                        field: b("a"),
                        delta: 1,
                        max_fields: 10,
                    },
                },
            ],
        );
        assert_eq!(answer(&results[0]), Ok(HashAnswer::Count(2)));
        // A third field fits, a fourth passes the limit: nothing of the command is kept.
        assert_eq!(answer(&results[1]), Err(ErrorCode::ValueTooLarge));
        assert_eq!(answer(&results[2]), Ok(HashAnswer::Count(1)));
        assert_eq!(answer(&results[3]), Ok(HashAnswer::Int(-5)));
        assert_eq!(results[4], CommandResult::Incr(Err(ErrorCode::WrongType)));
        assert_eq!(answer(&results[5]), Err(ErrorCode::NotInteger));
        assert_eq!(
            pairs(&storage, "h"),
            vec![("a".into(), "one".into()), ("n".into(), "-5".into())]
        );
        let head = storage.get(ShardId(0), b"h", 1).unwrap().unwrap();
        assert_eq!(
            storage
                .shard_view(ShardId(0))
                .hash_read(&b("h"), &HashRead::Len, 1)
                .unwrap(),
            Ok(HashAnswer::Count(2))
        );
        assert_eq!(head.create_index, 1);
        assert_eq!(head.modify_index, 4);
        assert_eq!(stored_rows(&storage), 3);

        // SET replaces the hash, fields and all.
        run_at(
            &storage,
            10,
            1,
            vec![Command::Put {
                key: b("h"),
                value: b("s"),
                flags: None,
                condition: PutCondition::Always,
                ttl: TtlUpdate::Clear,
                return_previous: false,
            }],
        );
        // The fields are dead with the hash, and purged in the background.
        assert!(storage.wait_for_purges(std::time::Duration::from_secs(10)));
        assert_eq!(stored_rows(&storage), 1);
        assert_eq!(
            storage
                .shard_view(ShardId(0))
                .hash_read(&b("h"), &all(), 1)
                .unwrap(),
            Err(ErrorCode::WrongType)
        );

        // Deleting the last field deletes the hash.
        run_at(
            &storage,
            20,
            1,
            vec![
                hset("g", &[("f", "v")]),
                Command::Hash {
                    key: b("g"),
                    op: HashOp::Delete {
                        fields: vec![b("f")],
                    },
                },
            ],
        );
        assert_eq!(storage.get(ShardId(0), b"g", 1).unwrap(), None);
        assert_eq!(stored_rows(&storage), 1);
    }

    #[test]
    fn an_expired_hash_leaves_no_field_to_a_new_one_and_reaping_takes_its_rows() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(dir.path(), &StorageOptions::default()).unwrap();
        run_at(
            &storage,
            1,
            1,
            vec![
                hset("h", &[("old", "1")]),
                Command::SetTtl {
                    key: b("h"),
                    ttl: TtlUpdate::At(100),
                },
                hset("e", &[("x", "1")]),
                Command::SetTtl {
                    key: b("e"),
                    ttl: TtlUpdate::At(100),
                },
            ],
        );
        // At 200 both expired; `h` is written anew, `e` reaped.
        run_at(
            &storage,
            10,
            200,
            vec![
                hset("h", &[("new", "2")]),
                Command::Reap { keys: vec![b("e")] },
            ],
        );
        assert_eq!(pairs(&storage, "h"), vec![("new".into(), "2".into())]);
        // The old versions' rows go in the background: the new hash's record and field stay.
        assert!(storage.wait_for_purges(std::time::Duration::from_secs(10)));
        assert_eq!(stored_rows(&storage), 2);
        // The new hash has no expiry of the old one's.
        let head = storage.get(ShardId(0), b"h", 200).unwrap().unwrap();
        assert_eq!(head.expires_at_ms, None);
    }

    #[test]
    fn a_transaction_reads_its_own_writes_and_an_undone_one_leaves_the_hash_whole() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(dir.path(), &StorageOptions::default()).unwrap();
        run_at(&storage, 1, 1, vec![hset("h", &[("a", "1"), ("b", "2")])]);
        let results = run_at(
            &storage,
            2,
            1,
            vec![
                Command::Transaction {
                    watches: vec![],
                    commands: vec![
                        Command::Delete {
                            keys: vec![b("h")],
                            cas: None,
                        },
                        hset("h", &[("c", "3")]),
                        read("h", all()),
                    ],
                },
                Command::Transaction {
                    watches: vec![],
                    commands: vec![
                        hset("h", &[("d", "4")]),
                        Command::Check {
                            key: b("missing"),
                            check: KeyCheck::Exists,
                        },
                    ],
                },
            ],
        );
        let CommandResult::Transaction(Ok(answers)) = &results[0] else {
            panic!("{results:?}")
        };
        assert_eq!(
            answer(&answers[2]),
            Ok(HashAnswer::Pairs(vec![(b("c"), b("3"))]))
        );
        assert!(matches!(results[1], CommandResult::Transaction(Err(1))));
        assert_eq!(pairs(&storage, "h"), vec![("c".into(), "3".into())]);
        assert!(storage.wait_for_purges(std::time::Duration::from_secs(10)));
        assert_eq!(stored_rows(&storage), 2);
    }

    #[test]
    fn a_split_takes_a_hash_with_all_its_fields() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(dir.path(), &StorageOptions::default()).unwrap();
        let keys: Vec<String> = (0..40).map(|i| format!("h{i}")).collect();
        let writes = keys
            .iter()
            .map(|k| hset(k, &[("f1", "1"), ("f2", "2")]))
            .collect();
        run_at(&storage, 1, 1, writes);
        split_in_half(&storage);
        for key in &keys {
            let upper = trireme_types::key_slot(key.as_bytes()) >= 8192;
            let (here, there) = if upper { (1, 0) } else { (0, 1) };
            let fields = |shard| {
                storage
                    .shard_view(ShardId(shard))
                    .hash_read(&b(key), &HashRead::Len, 1)
                    .unwrap()
            };
            assert_eq!(fields(here), Ok(HashAnswer::Count(2)), "{key}");
            assert_eq!(fields(there), Ok(HashAnswer::Count(0)), "{key}");
            let version = storage
                .get_raw(ShardId(here), key.as_bytes())
                .unwrap()
                .expect("the hash")
                .create_index;
            let row = member_key(key.as_bytes(), version, b"f2");
            assert!(storage.get_raw(ShardId(here), &row).unwrap().is_some());
            assert!(storage.get_raw(ShardId(there), &row).unwrap().is_none());
        }
    }
}
