//! Redis lists in the state machine: the list's record keeps its length and the position of
//! its first element; each element is a row named by its position, so pushes and pops at
//! either end, `LINDEX` and `LSET` touch one row, and `LRANGE` reads one range. Commands that
//! change the middle (`LREM`, `LINSERT`) rewrite the list, O(length) as in Redis.

use super::Pending;
use super::hash::{InBatch, MemberSource, Stored};
use crate::StorageError;
use bytes::Bytes;
use trireme_types::collection::{
    decode_list, encode_list, list_position, list_range, member_key, member_prefix,
};
use trireme_types::{End, ErrorCode, ListAnswer, ListOp, ListRead, Record, ValueKind};

/// A list as its record describes it.
#[derive(Debug, Clone)]
struct Head {
    record: Record,
    len: u64,
    first: i64,
}

/// The live list at `key` (`None` if missing): `Err(WrongType)` for a key of another type.
fn head(
    source: &mut impl MemberSource,
    key: &Bytes,
) -> Result<Result<Option<Head>, ErrorCode>, StorageError> {
    Ok(match source.head(key)? {
        Some(record) if record.kind != ValueKind::List => Err(ErrorCode::WrongType),
        Some(record) => {
            let (len, first) = decode_list(&record.value);
            Ok(Some(Head { record, len, first }))
        }
        None => Ok(None),
    })
}

/// The row of the element at `position` of version `version` of the list at `key`.
fn row(key: &[u8], version: u64, position: i64) -> Bytes {
    member_key(key, version, &list_position(position))
}

impl Head {
    /// The row of this list's element at `position`.
    fn row(&self, key: &[u8], position: i64) -> Bytes {
        row(key, self.record.create_index, position)
    }
}

/// Index `index` (negative from the tail) of a list of `len`, if it is in it.
fn index_in(index: i64, len: u64) -> Option<u64> {
    let len = i64::try_from(len).ok()?;
    let i = if index < 0 { index + len } else { index };
    (0..len).contains(&i).then_some(i as u64)
}

/// The elements with indexes `from..=to` of the list `head` at `key`.
fn elements(
    source: &mut impl MemberSource,
    key: &Bytes,
    head: &Head,
    from: u64,
    to: u64,
) -> Result<Vec<Bytes>, StorageError> {
    let start = head.first + from as i64;
    let after = list_position(start.saturating_sub(1));
    let prefix = member_prefix(key, head.record.create_index);
    let rows = source.members(&prefix, Some(&after[..]), to - from + 1)?;
    Ok(rows.into_iter().map(|(_, value)| value).collect())
}

/// Answers `read` of the list at `key` from `source`.
fn read(
    source: &mut impl MemberSource,
    key: &Bytes,
    read: &ListRead,
) -> Result<Result<ListAnswer, ErrorCode>, StorageError> {
    let head = match head(source, key)? {
        Ok(Some(head)) => head,
        Ok(None) => {
            return Ok(Ok(match read {
                ListRead::Len => ListAnswer::Count(0),
                ListRead::Positions { .. } => ListAnswer::Positions(Vec::new()),
                _ => ListAnswer::Elements(Vec::new()),
            }));
        }
        Err(code) => return Ok(Err(code)),
    };
    Ok(Ok(match read {
        ListRead::Len => ListAnswer::Count(head.len),
        ListRead::Range { start, stop } => match list_range(*start, *stop, head.len) {
            Some((from, to)) => ListAnswer::Elements(elements(source, key, &head, from, to)?),
            None => ListAnswer::Elements(Vec::new()),
        },
        ListRead::Index(index) => match index_in(*index, head.len) {
            Some(i) => ListAnswer::Elements(
                source
                    .member(&head.row(key, head.first + i as i64))?
                    .into_iter()
                    .collect(),
            ),
            None => ListAnswer::Elements(Vec::new()),
        },
        ListRead::Positions {
            element,
            rank,
            count,
            max_len,
        } => {
            let all = elements(source, key, &head, 0, head.len - 1)?;
            let n = all.len();
            let look = if *max_len == 0 {
                n
            } else {
                (*max_len as usize).min(n)
            };
            let order: Box<dyn Iterator<Item = usize>> = if *rank < 0 {
                Box::new((n - look..n).rev())
            } else {
                Box::new(0..look)
            };
            let skip = rank.unsigned_abs().saturating_sub(1) as usize;
            let take = if *count == 0 {
                usize::MAX
            } else {
                *count as usize
            };
            ListAnswer::Positions(
                order
                    .filter(|&i| all[i] == *element)
                    .skip(skip)
                    .take(take)
                    .map(|i| i as u64)
                    .collect(),
            )
        }
    }))
}

impl crate::ShardView<'_> {
    /// Answers a read of the list at `key` as this view holds it at `now`.
    pub fn list_read(
        &self,
        key: &Bytes,
        list_read: &ListRead,
        now: u64,
    ) -> Result<Result<ListAnswer, ErrorCode>, StorageError> {
        let mut stored = Stored {
            snapshot: self.snapshot(),
            shard: self.shard().0,
            now,
        };
        read(&mut stored, key, list_read)
    }
}

impl Pending<'_> {
    fn list_head(
        &mut self,
        key: &Bytes,
        now: u64,
    ) -> Result<Result<Option<Head>, ErrorCode>, StorageError> {
        head(&mut InBatch { pending: self, now }, key)
    }

    /// Writes the record of the list at `key` for `len` elements from `first` (removes it at
    /// 0), keeping what `before` had (its creation, its expiry).
    fn write_list_head(
        &mut self,
        key: &Bytes,
        before: Option<&Head>,
        len: u64,
        first: i64,
        index: u64,
    ) -> Result<(), StorageError> {
        if len == 0 {
            if before.is_some() {
                self.set(key.clone(), None)?;
            }
            return Ok(());
        }
        let record = Record {
            value: encode_list(len, first),
            flags: 0,
            create_index: before.map_or(index, |h| h.record.create_index),
            modify_index: index,
            expires_at_ms: before.and_then(|h| h.record.expires_at_ms),
            lock: Default::default(),
            kind: ValueKind::List,
        };
        self.set(key.clone(), Some(record))
    }

    /// Pushes `elements` one after the other at `end` of the list at `key` (`before`: its
    /// head); the length after, or `ValueTooLarge` past `max_len` (nothing pushed).
    fn push(
        &mut self,
        key: &Bytes,
        before: Option<&Head>,
        elements: &[Bytes],
        end: End,
        max_len: u64,
        index: u64,
    ) -> Result<Result<u64, ErrorCode>, StorageError> {
        let (mut len, mut first) = before.map_or((0, 0), |h| (h.len, h.first));
        if len.saturating_add(elements.len() as u64) > max_len {
            return Ok(Err(ErrorCode::ValueTooLarge));
        }
        if before.is_none() && self.raw(key)?.is_some() {
            // Whatever an expired key of this name left goes first.
            self.set(key.clone(), None)?;
        }
        let version = before.map_or(index, |h| h.record.create_index);
        for element in elements {
            let position = match end {
                End::Left => {
                    first -= 1;
                    first
                }
                End::Right => first + len as i64,
            };
            self.set(
                row(key, version, position),
                Some(Record::string(element.clone(), index)),
            )?;
            len += 1;
        }
        self.write_list_head(key, before, len, first, index)?;
        Ok(Ok(len))
    }

    /// Pops up to `count` elements from `end` of the list `head` at `key`, in pop order.
    fn pop(
        &mut self,
        key: &Bytes,
        head: &Head,
        end: End,
        count: u64,
        index: u64,
    ) -> Result<Vec<Bytes>, StorageError> {
        let take = count.min(head.len);
        if take == 0 {
            // `LPOP key 0` leaves the key untouched (a `WATCH` on it holds), as in Redis.
            return Ok(Vec::new());
        }
        let mut popped = Vec::with_capacity(take as usize);
        for i in 0..take {
            let position = match end {
                End::Left => head.first + i as i64,
                End::Right => head.first + (head.len - 1 - i) as i64,
            };
            let at = head.row(key, position);
            if let Some(record) = self.raw(&at)? {
                popped.push(record.value);
            }
            self.set(at, None)?;
        }
        let first = match end {
            End::Left => head.first + take as i64,
            End::Right => head.first,
        };
        self.write_list_head(key, Some(head), head.len - take, first, index)?;
        Ok(popped)
    }

    /// Replaces the elements of the list `head` at `key` with `elements`.
    fn rewrite(
        &mut self,
        key: &Bytes,
        head: &Head,
        elements: Vec<Bytes>,
        index: u64,
    ) -> Result<(), StorageError> {
        for i in 0..head.len {
            self.set(head.row(key, head.first + i as i64), None)?;
        }
        let len = elements.len() as u64;
        for (i, element) in elements.into_iter().enumerate() {
            self.set(
                head.row(key, head.first + i as i64),
                Some(Record::string(element, index)),
            )?;
        }
        self.write_list_head(key, Some(head), len, head.first, index)
    }

    /// Every element of the list `head` at `key`, in order.
    fn all_elements(
        &mut self,
        key: &Bytes,
        head: &Head,
        now: u64,
    ) -> Result<Vec<Bytes>, StorageError> {
        if head.len == 0 {
            return Ok(Vec::new());
        }
        elements(
            &mut InBatch { pending: self, now },
            key,
            head,
            0,
            head.len - 1,
        )
    }

    /// Applies a list command to `key` at `index`.
    pub(super) fn list(
        &mut self,
        key: &Bytes,
        op: &ListOp,
        index: u64,
        now: u64,
    ) -> Result<Result<ListAnswer, ErrorCode>, StorageError> {
        if let ListOp::Read(list_read) = op {
            return read(&mut InBatch { pending: self, now }, key, list_read);
        }
        if let ListOp::PopFirst { end, others } = op {
            for candidate in std::iter::once(key).chain(others) {
                match self.list_head(candidate, now)? {
                    Err(code) => return Ok(Err(code)),
                    Ok(Some(head)) => {
                        let popped = self.pop(candidate, &head, *end, 1, index)?;
                        let element = popped.into_iter().next().unwrap_or_default();
                        return Ok(Ok(ListAnswer::Popped(Some((candidate.clone(), element)))));
                    }
                    Ok(None) => {}
                }
            }
            return Ok(Ok(ListAnswer::Popped(None)));
        }
        let before = match self.list_head(key, now)? {
            Ok(before) => before,
            Err(code) => return Ok(Err(code)),
        };
        Ok(Ok(match op {
            ListOp::Read(_) | ListOp::PopFirst { .. } => unreachable!("answered above"),
            ListOp::Push {
                elements,
                end,
                only_existing,
                max_len,
            } => {
                if *only_existing && before.is_none() {
                    return Ok(Ok(ListAnswer::Count(0)));
                }
                match self.push(key, before.as_ref(), elements, *end, *max_len, index)? {
                    Ok(len) => ListAnswer::Count(len),
                    Err(code) => return Ok(Err(code)),
                }
            }
            ListOp::Restore {
                elements,
                from,
                max_len,
            } => {
                let len = before.as_ref().map_or(0, |h| h.len);
                if len != *from {
                    return Ok(Ok(ListAnswer::Count(len)));
                }
                match self.push(key, before.as_ref(), elements, End::Right, *max_len, index)? {
                    Ok(len) => ListAnswer::Count(len),
                    Err(code) => return Ok(Err(code)),
                }
            }
            ListOp::Pop { end, count } => match &before {
                Some(head) => ListAnswer::Elements(self.pop(key, head, *end, *count, index)?),
                // No list: said apart from a pop of none (`LPOP key 0`), which Redis does.
                None => ListAnswer::Popped(None),
            },
            ListOp::Set { index: at, element } => {
                let Some(head) = &before else {
                    return Ok(Err(ErrorCode::NotFound));
                };
                let Some(i) = index_in(*at, head.len) else {
                    return Ok(Err(ErrorCode::InvalidArgument));
                };
                let position = head.first + i as i64;
                self.set(
                    head.row(key, position),
                    Some(Record::string(element.clone(), index)),
                )?;
                self.write_list_head(key, Some(head), head.len, head.first, index)?;
                ListAnswer::Done
            }
            ListOp::Trim { start, stop } => {
                let Some(head) = &before else {
                    return Ok(Ok(ListAnswer::Done));
                };
                let (keep_from, keep_to) = match list_range(*start, *stop, head.len) {
                    Some(range) => range,
                    None => (head.len, head.len),
                };
                for i in (0..keep_from).chain(keep_to.saturating_add(1).min(head.len)..head.len) {
                    self.set(head.row(key, head.first + i as i64), None)?;
                }
                let kept = if keep_from >= head.len {
                    0
                } else {
                    keep_to - keep_from + 1
                };
                // Written even when everything is kept: Redis counts an `LTRIM` as a change.
                let first = head.first + keep_from.min(head.len) as i64;
                self.write_list_head(key, Some(head), kept, first, index)?;
                ListAnswer::Done
            }
            ListOp::Remove { count, element } => {
                let Some(head) = &before else {
                    return Ok(Ok(ListAnswer::Count(0)));
                };
                let all = self.all_elements(key, head, now)?;
                let limit = if *count == 0 {
                    usize::MAX
                } else {
                    count.unsigned_abs() as usize
                };
                let mut drop = vec![false; all.len()];
                let order: Box<dyn Iterator<Item = usize>> = if *count < 0 {
                    Box::new((0..all.len()).rev())
                } else {
                    Box::new(0..all.len())
                };
                let mut removed = 0usize;
                for i in order {
                    if removed >= limit {
                        break;
                    }
                    if all[i] == *element {
                        drop[i] = true;
                        removed += 1;
                    }
                }
                if removed > 0 {
                    let kept = all
                        .into_iter()
                        .zip(drop)
                        .filter(|(_, d)| !d)
                        .map(|(e, _)| e)
                        .collect();
                    self.rewrite(key, head, kept, index)?;
                }
                ListAnswer::Count(removed as u64)
            }
            ListOp::Insert {
                before: in_front,
                pivot,
                element,
                max_len,
            } => {
                let Some(head) = &before else {
                    return Ok(Ok(ListAnswer::Int(0)));
                };
                let mut all = self.all_elements(key, head, now)?;
                let Some(at) = all.iter().position(|e| e == pivot) else {
                    return Ok(Ok(ListAnswer::Int(-1)));
                };
                if head.len + 1 > *max_len {
                    return Ok(Err(ErrorCode::ValueTooLarge));
                }
                all.insert(if *in_front { at } else { at + 1 }, element.clone());
                let len = all.len() as i64;
                self.rewrite(key, head, all, index)?;
                ListAnswer::Int(len)
            }
            ListOp::Move {
                to,
                from,
                onto,
                max_len,
            } => {
                let Some(head) = &before else {
                    return Ok(Ok(ListAnswer::Elements(Vec::new())));
                };
                let target = match self.list_head(to, now)? {
                    Ok(target) => target,
                    Err(code) => return Ok(Err(code)),
                };
                if target.as_ref().map_or(0, |t| t.len) + 1 > *max_len && to != key {
                    return Ok(Err(ErrorCode::ValueTooLarge));
                }
                let popped = self.pop(key, head, *from, 1, index)?;
                // The target read again: it is this list when an element goes round.
                let target = match self.list_head(to, now)? {
                    Ok(target) => target,
                    Err(code) => return Ok(Err(code)),
                };
                self.push(to, target.as_ref(), &popped, *onto, u64::MAX, index)?
                    .map_err(|_| StorageError::Corrupt("a push past no limit".into()))?;
                ListAnswer::Elements(popped)
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::index_in;
    use crate::{Storage, StorageOptions};
    use bytes::Bytes;
    use trireme_types::collection::list_range;
    use trireme_types::{
        Command, CommandResult, End, ErrorCode, ListAnswer, ListOp, ListRead, ShardId,
    };

    fn op(key: &str, op: ListOp) -> Command {
        Command::List { key: b(key), op }
    }

    fn push(key: &str, end: End, elements: &[&str]) -> Command {
        op(
            key,
            ListOp::Push {
                elements: bs(elements),
                end,
                only_existing: false,
                max_len: 6,
            },
        )
    }

    fn answer(result: &CommandResult) -> Result<ListAnswer, ErrorCode> {
        match result {
            CommandResult::List(answer) => answer.clone(),
            other => panic!("not a list answer: {other:?}"),
        }
    }

    fn all(storage: &Storage, key: &str) -> Vec<Bytes> {
        let read = ListRead::Range { start: 0, stop: -1 };
        match storage
            .shard_view(ShardId(0))
            .list_read(&b(key), &read, 1)
            .unwrap()
        {
            Ok(ListAnswer::Elements(e)) => e,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_restored_piece_sent_twice_is_appended_once() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(dir.path(), &StorageOptions::default()).unwrap();
        let restore = |elements: &[&str], from: u64| {
            op(
                "l",
                ListOp::Restore {
                    elements: bs(elements),
                    from,
                    max_len: 10,
                },
            )
        };
        let results = run(
            &storage,
            1,
            vec![
                restore(&["a", "b"], 0),
                restore(&["a", "b"], 0),
                restore(&["c"], 2),
                restore(&["x"], 1),
            ],
        );
        let counts: Vec<_> = results.iter().map(answer).collect();
        assert_eq!(
            counts,
            [2, 2, 3, 3].map(|n| Ok(ListAnswer::Count(n))).to_vec()
        );
        assert_eq!(all(&storage, "l"), bs(&["a", "b", "c"]));
    }

    #[test]
    fn bounds_are_read_as_redis_reads_them() {
        assert_eq!(list_range(0, -1, 3), Some((0, 2)));
        assert_eq!(list_range(-100, 100, 3), Some((0, 2)));
        assert_eq!(list_range(2, 1, 3), None);
        assert_eq!(list_range(5, 10, 3), None);
        assert_eq!(list_range(-2, -1, 3), Some((1, 2)));
        assert_eq!(list_range(0, -4, 3), None);
        assert_eq!(index_in(-1, 3), Some(2));
        assert_eq!(index_in(3, 3), None);
        assert_eq!(index_in(-4, 3), None);
    }

    #[test]
    fn both_ends_grow_and_shrink_and_the_middle_is_rewritten() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(dir.path(), &StorageOptions::default()).unwrap();
        let results = run(
            &storage,
            1,
            vec![
                push("l", End::Right, &["c", "d"]),
                push("l", End::Left, &["b", "a"]),
                push("l", End::Left, &["x", "y", "z"]),
                op(
                    "l",
                    ListOp::Pop {
                        end: End::Right,
                        count: 1,
                    },
                ),
                op(
                    "l",
                    ListOp::Insert {
                        before: true,
                        pivot: b("b"),
                        element: b("a2"),
                        max_len: 10,
                    },
                ),
                op(
                    "l",
                    ListOp::Remove {
                        count: 0,
                        element: b("a"),
                    },
                ),
                op(
                    "l",
                    ListOp::Set {
                        index: -1,
                        element: b("C"),
                    },
                ),
                op(
                    "l",
                    ListOp::Set {
                        index: 9,
                        element: b("?"),
                    },
                ),
                Command::Incr {
                    key: b("l"),
                    delta: 1,
                },
                op(
                    "l",
                    ListOp::Move {
                        to: b("m"),
                        from: End::Left,
                        onto: End::Right,
                        max_len: 10,
                    },
                ),
            ],
        );
        assert_eq!(answer(&results[0]), Ok(ListAnswer::Count(2)));
        assert_eq!(answer(&results[1]), Ok(ListAnswer::Count(4)));
        // Past the limit of 6: nothing pushed.
        assert_eq!(answer(&results[2]), Err(ErrorCode::ValueTooLarge));
        assert_eq!(answer(&results[3]), Ok(ListAnswer::Elements(bs(&["d"]))));
        assert_eq!(answer(&results[4]), Ok(ListAnswer::Int(4)));
        assert_eq!(answer(&results[5]), Ok(ListAnswer::Count(1)));
        assert_eq!(answer(&results[6]), Ok(ListAnswer::Done));
        assert_eq!(answer(&results[7]), Err(ErrorCode::InvalidArgument));
        assert_eq!(results[8], CommandResult::Incr(Err(ErrorCode::WrongType)));
        assert_eq!(answer(&results[9]), Ok(ListAnswer::Elements(bs(&["a2"]))));
        assert_eq!(all(&storage, "l"), bs(&["b", "C"]));
        assert_eq!(all(&storage, "m"), bs(&["a2"]));

        let results = run(
            &storage,
            20,
            vec![
                push("l", End::Right, &["e", "f", "g"]),
                op("l", ListOp::Trim { start: 1, stop: -2 }),
                op(
                    "l",
                    ListOp::Read(ListRead::Positions {
                        element: b("f"),
                        rank: 1,
                        count: 0,
                        max_len: 0,
                    }),
                ),
                op(
                    "m",
                    ListOp::PopFirst {
                        end: End::Left,
                        others: vec![],
                    },
                ),
                op("l", ListOp::Trim { start: 5, stop: 9 }),
            ],
        );
        assert_eq!(answer(&results[2]), Ok(ListAnswer::Positions(vec![2])));
        assert_eq!(
            answer(&results[3]),
            Ok(ListAnswer::Popped(Some((b("m"), b("a2")))))
        );
        // Trimmed to nothing and popped empty: both keys are gone, rows and all.
        assert!(all(&storage, "l").is_empty());
        assert_eq!(storage.count_keys(ShardId(0)), 0);
    }
}
