//! Redis sets in the state machine: the set's record keeps its member count, each member is
//! a row with an empty value (see [`trireme_types::collection`]), as a hash's fields are.

use super::Pending;
use super::hash::{InBatch, MemberSource, Stored};
use crate::StorageError;
use bytes::Bytes;
use std::collections::BTreeSet;
use trireme_types::collection::{decode_count, encode_count, member_key, member_prefix};
use trireme_types::{ErrorCode, Record, SetAnswer, SetCombine, SetOp, SetRead, ValueKind};

/// The live set at `key`: `Err(WrongType)` for a key of another type.
fn head(
    source: &mut impl MemberSource,
    key: &Bytes,
) -> Result<Result<Option<Record>, ErrorCode>, StorageError> {
    Ok(match source.head(key)? {
        Some(head) if head.kind != ValueKind::Set => Err(ErrorCode::WrongType),
        head => Ok(head),
    })
}

/// Every member of the set at `key` (none if missing).
fn all_members(
    source: &mut impl MemberSource,
    key: &Bytes,
) -> Result<Result<BTreeSet<Bytes>, ErrorCode>, StorageError> {
    Ok(match head(source, key)? {
        Err(code) => Err(code),
        Ok(None) => Ok(BTreeSet::new()),
        Ok(Some(head)) => Ok(source
            .members(&member_prefix(key, head.create_index), None, u64::MAX)?
            .into_iter()
            .map(|(member, _)| member)
            .collect()),
    })
}

/// The combination of the sets at `first` and `others`, in member order.
fn combine(
    source: &mut impl MemberSource,
    combine: SetCombine,
    first: &Bytes,
    others: &[Bytes],
) -> Result<Result<Vec<Bytes>, ErrorCode>, StorageError> {
    let mut result = match all_members(source, first)? {
        Ok(members) => members,
        Err(code) => return Ok(Err(code)),
    };
    for other in others {
        let members = match all_members(source, other)? {
            Ok(members) => members,
            Err(code) => return Ok(Err(code)),
        };
        match combine {
            SetCombine::Intersection => result.retain(|m| members.contains(m)),
            SetCombine::Union => result.extend(members),
            SetCombine::Difference => result.retain(|m| !members.contains(m)),
        }
    }
    Ok(Ok(result.into_iter().collect()))
}

/// Answers `read` of the set at `key` from `source`.
fn read(
    source: &mut impl MemberSource,
    key: &Bytes,
    read: &SetRead,
) -> Result<Result<SetAnswer, ErrorCode>, StorageError> {
    if let SetRead::Combine {
        combine: how,
        others,
    } = read
    {
        return Ok(combine(source, *how, key, others)?.map(SetAnswer::Members));
    }
    let head = match head(source, key)? {
        Ok(head) => head,
        Err(code) => return Ok(Err(code)),
    };
    Ok(Ok(match read {
        SetRead::Len => SetAnswer::Count(head.map_or(0, |h| decode_count(&h.value))),
        SetRead::Contains { members } => {
            let mut flags = Vec::with_capacity(members.len());
            for member in members {
                flags.push(match &head {
                    Some(head) => source
                        .member(&member_key(key, head.create_index, member))?
                        .is_some(),
                    None => false,
                });
            }
            SetAnswer::Flags(flags)
        }
        SetRead::Members { after, limit } => SetAnswer::Members(match &head {
            Some(head) => source
                .members(
                    &member_prefix(key, head.create_index),
                    after.as_deref(),
                    *limit,
                )?
                .into_iter()
                .map(|(member, _)| member)
                .collect(),
            None => Vec::new(),
        }),
        SetRead::Combine { .. } => unreachable!("answered above"),
    }))
}

impl crate::ShardView<'_> {
    /// Answers a read of the set at `key` as this view holds it at `now`.
    pub fn set_read(
        &self,
        key: &Bytes,
        set_read: &SetRead,
        now: u64,
    ) -> Result<Result<SetAnswer, ErrorCode>, StorageError> {
        let mut stored = Stored {
            snapshot: self.snapshot(),
            shard: self.shard().0,
            now,
        };
        read(&mut stored, key, set_read)
    }
}

/// A pseudo-random sequence from a seed (SplitMix64), the same on every replica whatever
/// the version of any library: `SPOP` must remove the same members everywhere.
struct Draw(u64);

impl Draw {
    fn next_below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z % n.max(1) as u64) as usize
    }
}

impl Pending<'_> {
    /// Writes the record of the set (or, of `kind`, the collection) at `key` for `count`
    /// members (removes it at 0), keeping what `before` had (its creation, its expiry).
    pub(super) fn set_head(
        &mut self,
        key: &Bytes,
        before: Option<&Record>,
        count: u64,
        index: u64,
        kind: ValueKind,
    ) -> Result<(), StorageError> {
        if count == 0 {
            if before.is_some() {
                self.set(key.clone(), None)?;
            }
            return Ok(());
        }
        let record = Record {
            value: encode_count(count),
            flags: 0,
            create_index: before.map_or(index, |h| h.create_index),
            modify_index: index,
            expires_at_ms: before.and_then(|h| h.expires_at_ms),
            lock: Default::default(),
            kind,
        };
        self.set(key.clone(), Some(record))
    }

    /// Adds `members` to the set at `key` whose live record is `before`; how many were new,
    /// or `ValueTooLarge` past `max` members (nothing added then).
    fn add_members(
        &mut self,
        key: &Bytes,
        before: Option<&Record>,
        members: &[Bytes],
        max: u64,
        index: u64,
    ) -> Result<Result<u64, ErrorCode>, StorageError> {
        let count = before.map_or(0, |h| decode_count(&h.value));
        let version = before.map_or(index, |h| h.create_index);
        let mut new = BTreeSet::new();
        for member in members {
            let row = member_key(key, version, member);
            if before.is_none() || self.member_number(&row, ValueKind::Set)?.is_none() {
                new.insert(member);
            }
        }
        let added = new.len() as u64;
        if added == 0 {
            return Ok(Ok(0));
        }
        if count.saturating_add(added) > max {
            return Ok(Err(ErrorCode::ValueTooLarge));
        }
        if before.is_none() && self.raw(key)?.is_some() {
            // Whatever an expired key of this name left goes first.
            self.set(key.clone(), None)?;
        }
        for member in new {
            self.set(
                member_key(key, version, member),
                Some(Record::string(Bytes::new(), index)),
            )?;
        }
        self.set_head(key, before, count + added, index, ValueKind::Set)?;
        Ok(Ok(added))
    }

    /// Removes `members` from the set at `key` whose live record is `before`; how many went.
    fn remove_members(
        &mut self,
        key: &Bytes,
        before: Option<&Record>,
        members: &[Bytes],
        index: u64,
    ) -> Result<u64, StorageError> {
        let Some(head) = before else { return Ok(0) };
        let count = decode_count(&head.value);
        let mut removed = 0u64;
        for member in members {
            let row = member_key(key, head.create_index, member);
            if self.member_number(&row, ValueKind::Set)?.is_some() {
                self.set(row, None)?;
                removed += 1;
            }
        }
        if removed > 0 {
            self.set_head(
                key,
                before,
                count.saturating_sub(removed),
                index,
                ValueKind::Set,
            )?;
        }
        Ok(removed)
    }

    /// Applies a set command to `key` at `index`.
    pub(super) fn set_members(
        &mut self,
        key: &Bytes,
        op: &SetOp,
        index: u64,
        now: u64,
    ) -> Result<Result<SetAnswer, ErrorCode>, StorageError> {
        if let SetOp::Read(set_read) = op {
            return read(&mut InBatch { pending: self, now }, key, set_read);
        }
        let before = match head(&mut InBatch { pending: self, now }, key)? {
            Ok(before) => before,
            // A store replaces its destination whatever it holds, as in Redis.
            Err(_) if matches!(op, SetOp::Store { .. }) => None,
            Err(code) => return Ok(Err(code)),
        };
        Ok(Ok(match op {
            SetOp::Read(_) => unreachable!("answered above"),
            SetOp::Add {
                members,
                max_members,
            } => match self.add_members(key, before.as_ref(), members, *max_members, index)? {
                Ok(added) => SetAnswer::Count(added),
                Err(code) => return Ok(Err(code)),
            },
            SetOp::Remove { members } => {
                SetAnswer::Count(self.remove_members(key, before.as_ref(), members, index)?)
            }
            SetOp::Pop { count, seed } => {
                let Some(head) = &before else {
                    return Ok(Ok(SetAnswer::Members(Vec::new())));
                };
                let mut all: Vec<Bytes> = self
                    .member_rows(
                        &member_prefix(key, head.create_index),
                        None,
                        u64::MAX,
                        false,
                    )?
                    .into_iter()
                    .map(|(m, _)| m)
                    .collect();
                let take = usize::try_from(*count).unwrap_or(usize::MAX).min(all.len());
                // All of them go in member order, as Redis answers then; fewer are drawn.
                if take < all.len() {
                    let mut draw = Draw(*seed);
                    for i in 0..take {
                        let j = i + draw.next_below(all.len() - i);
                        all.swap(i, j);
                    }
                    all.truncate(take);
                }
                self.remove_members(key, before.as_ref(), &all, index)?;
                SetAnswer::Members(all)
            }
            SetOp::Move {
                to,
                member,
                max_members,
            } => {
                let target = match head(&mut InBatch { pending: self, now }, to)? {
                    Ok(target) => target,
                    Err(code) => return Ok(Err(code)),
                };
                let here = match &before {
                    Some(head) => self
                        .member_number(&member_key(key, head.create_index, member), ValueKind::Set)?
                        .is_some(),
                    None => false,
                };
                if !here {
                    return Ok(Ok(SetAnswer::Count(0)));
                }
                if to == key {
                    return Ok(Ok(SetAnswer::Count(1)));
                }
                let member = std::slice::from_ref(member);
                if let Err(code) =
                    self.add_members(to, target.as_ref(), member, *max_members, index)?
                {
                    return Ok(Err(code));
                }
                self.remove_members(key, before.as_ref(), member, index)?;
                SetAnswer::Count(1)
            }
            SetOp::Store {
                combine: how,
                sources,
                max_members,
            } => {
                let Some((first, others)) = sources.split_first() else {
                    return Ok(Ok(SetAnswer::Count(0)));
                };
                let members =
                    match combine(&mut InBatch { pending: self, now }, *how, first, others)? {
                        Ok(members) => members,
                        Err(code) => return Ok(Err(code)),
                    };
                if members.len() as u64 > *max_members {
                    return Ok(Err(ErrorCode::ValueTooLarge));
                }
                // The destination is replaced whatever it held, as in Redis.
                if self.raw(key)?.is_some() {
                    self.set(key.clone(), None)?;
                }
                let stored = members.len() as u64;
                self.add_members(key, None, &members, u64::MAX, index)?
                    .map_err(|_| StorageError::Corrupt("a store past no limit".into()))?;
                SetAnswer::Count(stored)
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use crate::{Storage, StorageOptions};
    use bytes::Bytes;
    use trireme_types::{
        Command, CommandResult, ErrorCode, SetAnswer, SetCombine, SetOp, SetRead, ShardId,
    };

    fn op(key: &str, op: SetOp) -> Command {
        Command::SetMembers { key: b(key), op }
    }

    fn sadd(key: &str, members: &[&str]) -> Command {
        op(
            key,
            SetOp::Add {
                members: bs(members),
                max_members: 4,
            },
        )
    }

    fn answer(result: &CommandResult) -> Result<SetAnswer, ErrorCode> {
        match result {
            CommandResult::SetMembers(answer) => answer.clone(),
            other => panic!("not a set answer: {other:?}"),
        }
    }

    fn members(storage: &Storage, key: &str) -> Vec<Bytes> {
        let read = SetRead::Members {
            after: None,
            limit: u64::MAX,
        };
        match storage
            .shard_view(ShardId(0))
            .set_read(&b(key), &read, 1)
            .unwrap()
        {
            Ok(SetAnswer::Members(m)) => m,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn members_are_counted_combined_moved_and_popped_alike_on_every_replica() {
        let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
        let mut popped = Vec::new();
        for dir in &dirs {
            let storage = Storage::open(dir.path(), &StorageOptions::default()).unwrap();
            let results = run(
                &storage,
                1,
                vec![
                    sadd("a", &["1", "2", "3", "2"]),
                    sadd("a", &["4", "5"]),
                    sadd("b", &["3", "4", "9"]),
                    op(
                        "a",
                        SetOp::Remove {
                            members: bs(&["9", "1"]),
                        },
                    ),
                    op(
                        "c",
                        SetOp::Store {
                            combine: SetCombine::Intersection,
                            sources: bs(&["a", "b"]),
                            max_members: 10,
                        },
                    ),
                    op(
                        "b",
                        SetOp::Move {
                            to: b("a"),
                            member: b("9"),
                            max_members: 10,
                        },
                    ),
                    op("b", SetOp::Pop { count: 5, seed: 42 }),
                    Command::Incr {
                        key: b("a"),
                        delta: 1,
                    },
                    op(
                        "a",
                        SetOp::Read(SetRead::Combine {
                            combine: SetCombine::Difference,
                            others: bs(&["c"]),
                        }),
                    ),
                    sadd("p", &["1", "2", "3", "4"]),
                    op("p", SetOp::Pop { count: 2, seed: 7 }),
                ],
            );
            let Ok(SetAnswer::Members(drawn)) = answer(&results[10]) else {
                panic!("{results:?}")
            };
            assert_eq!(drawn.len(), 2);
            assert_eq!(members(&storage, "p").len(), 2);
            popped.push(drawn);
            assert_eq!(answer(&results[0]), Ok(SetAnswer::Count(3)));
            // A fourth member fits, a fifth passes the limit: nothing of the command is kept.
            assert_eq!(answer(&results[1]), Err(ErrorCode::ValueTooLarge));
            assert_eq!(answer(&results[2]), Ok(SetAnswer::Count(3)));
            assert_eq!(answer(&results[3]), Ok(SetAnswer::Count(1)));
            assert_eq!(answer(&results[4]), Ok(SetAnswer::Count(1)));
            assert_eq!(answer(&results[5]), Ok(SetAnswer::Count(1)));
            assert_eq!(results[7], CommandResult::Incr(Err(ErrorCode::WrongType)));
            assert_eq!(answer(&results[8]), Ok(SetAnswer::Members(bs(&["2", "9"]))));
            assert_eq!(members(&storage, "a"), bs(&["2", "3", "9"]));
            assert_eq!(members(&storage, "c"), bs(&["3"]));
            // Popping everything deletes the set.
            let Ok(SetAnswer::Members(p)) = answer(&results[6]) else {
                panic!()
            };
            assert_eq!(p.len(), 2);
            assert_eq!(storage.get(ShardId(0), b"b", 1).unwrap(), None);
            popped.push(p);
            assert_eq!(storage.count_keys(ShardId(0)), 2 + 3 + 1 + 3);
        }
        assert_eq!(
            popped[0..2],
            popped[2..4],
            "the same draws on every replica"
        );
    }
}
