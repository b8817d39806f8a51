//! Whole-collection reads walked a page at a time (see [`trireme_types::whole`]): opened on a
//! view, which measures the answer from the collection's record, then read in pages with
//! that same view, each page starting where the last one ended. A rank or index window is
//! found once, when the read opens; after that every page is a range read from a row, so
//! reading a collection of n members costs O(n) however small the pages.

use super::hash::{MemberSource, Stored};
use super::rows::{RowSpan, stored_rows};
use super::sorted::{from_score_rows, rank_window};
use crate::{ShardView, StorageError};
use bytes::Bytes;
use std::ops::Bound;
use trireme_types::collection::{
    decode_count, decode_list, list_position, list_range, member_prefix,
};
use trireme_types::sorted::score_prefix;
use trireme_types::whole::{WholeItems, WholeRead};
use trireme_types::{ErrorCode, ValueKind};

/// A whole read opened on a view: what is left of it.
#[derive(Debug)]
pub struct WholeScan {
    read: WholeRead,
    /// The rows still to read; `None` when the collection is missing or the window empty.
    span: Option<RowSpan>,
    /// Rows to pass over before the first page (a rank window's start).
    skip: u64,
    /// Items still to read.
    left: u64,
    total: u64,
}

impl WholeScan {
    /// How many items the whole answer has, as the collection's record counts them.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Whether every item was read.
    pub fn is_done(&self) -> bool {
        self.left == 0
    }

    /// What it reads.
    pub fn read(&self) -> &WholeRead {
        &self.read
    }
}

impl ShardView<'_> {
    /// Opens `read` of the collection at `key` as this view holds it at `now`: `WrongType`
    /// when the key holds another type; a missing key reads as an empty collection.
    pub fn open_whole(
        &self,
        key: &Bytes,
        read: WholeRead,
        now: u64,
    ) -> Result<Result<WholeScan, ErrorCode>, StorageError> {
        let mut source = Stored {
            snapshot: self.snapshot(),
            shard: self.shard().0,
            now,
        };
        let kind = match read {
            WholeRead::Hash => ValueKind::Hash,
            WholeRead::Set => ValueKind::Set,
            WholeRead::List { .. } => ValueKind::List,
            WholeRead::SortedSet { .. } => ValueKind::SortedSet,
        };
        let mut scan = WholeScan {
            read,
            span: None,
            skip: 0,
            left: 0,
            total: 0,
        };
        let head = match source.head(key)? {
            Some(head) if head.kind != kind => return Ok(Err(ErrorCode::WrongType)),
            Some(head) => head,
            None => return Ok(Ok(scan)),
        };
        let version = head.create_index;
        let (span, skip, count) = match read {
            WholeRead::Hash | WholeRead::Set => (
                RowSpan::all(member_prefix(key, version)),
                0,
                decode_count(&head.value),
            ),
            WholeRead::List { start, stop } => {
                let (len, first) = decode_list(&head.value);
                let Some((from, to)) = list_range(start, stop, len) else {
                    return Ok(Ok(scan));
                };
                let at = |index: u64| list_position(first.saturating_add(index as i64)).to_vec();
                let span = RowSpan {
                    lower: Bound::Included(at(from)),
                    upper: Bound::Included(at(to)),
                    ..RowSpan::all(member_prefix(key, version))
                };
                (span, 0, to - from + 1)
            }
            WholeRead::SortedSet {
                start,
                stop,
                reverse,
            } => {
                let Some((skip, take)) = rank_window(start, stop, decode_count(&head.value)) else {
                    return Ok(Ok(scan));
                };
                let span = RowSpan {
                    reverse,
                    ..RowSpan::all(score_prefix(key, version))
                };
                (span, skip, take)
            }
        };
        scan.span = Some(span);
        scan.skip = skip;
        scan.left = count;
        scan.total = count;
        Ok(Ok(scan))
    }

    /// The next at most `limit` items of `scan`, which this view opened. A collection
    /// holding fewer rows than its record counts (never in a sound store) ends the read
    /// early: the caller checks the items against [`WholeScan::total`].
    pub fn whole_page(&self, scan: &mut WholeScan, limit: u64) -> Result<WholeItems, StorageError> {
        let take = limit.max(1).min(scan.left);
        let Some(span) = scan.span.as_mut().filter(|_| take > 0) else {
            scan.left = 0;
            return Ok(WholeItems::empty(&scan.read));
        };
        let values = matches!(scan.read, WholeRead::Hash | WholeRead::List { .. });
        let rows = stored_rows(
            self.snapshot(),
            self.shard().0,
            span,
            scan.skip,
            take,
            values,
        )?;
        scan.skip = 0;
        scan.left = if (rows.len() as u64) < take {
            0
        } else {
            scan.left - take
        };
        if let Some((last, _)) = rows.last() {
            // The next page starts past the last row read, on the side the walk goes.
            let past = Bound::Excluded(last.to_vec());
            if span.reverse {
                span.upper = past;
            } else {
                span.lower = past;
            }
        }
        Ok(match scan.read {
            WholeRead::Hash => WholeItems::Pairs(rows),
            WholeRead::Set => WholeItems::Members(rows.into_iter().map(|(m, _)| m).collect()),
            WholeRead::List { .. } => {
                WholeItems::Members(rows.into_iter().map(|(_, v)| v).collect())
            }
            WholeRead::SortedSet { .. } => WholeItems::Scored(from_score_rows(rows)?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Storage;
    use crate::apply::testing::*;
    use trireme_types::{
        Command, HashAnswer, HashOp, HashRead, ListAnswer, ListOp, ListRead, Score, SetOp, ShardId,
        SortedSetAnswer, SortedSetOp, SortedSetRead, ZRange,
    };

    /// Every item of `read` of `key`, in pages of `page`, from one view.
    fn walk(storage: &Storage, key: &str, read: WholeRead, page: u64) -> (u64, WholeItems) {
        let view = storage.shard_view(ShardId(0));
        let mut scan = view
            .open_whole(&Bytes::copy_from_slice(key.as_bytes()), read, 1)
            .unwrap()
            .unwrap();
        let mut all = WholeItems::empty(&read);
        while !scan.is_done() {
            match (&mut all, view.whole_page(&mut scan, page).unwrap()) {
                (WholeItems::Pairs(all), WholeItems::Pairs(p)) => all.extend(p),
                (WholeItems::Members(all), WholeItems::Members(p)) => all.extend(p),
                (WholeItems::Scored(all), WholeItems::Scored(p)) => all.extend(p),
                other => panic!("pages of two kinds: {other:?}"),
            }
        }
        (scan.total(), all)
    }

    fn names(prefix: &str, n: usize) -> Vec<Bytes> {
        (0..n).map(|i| b(&format!("{prefix}{i:02}"))).collect()
    }

    /// A hash, a set, a list (pushed at both ends) and a sorted set of 25 members each.
    fn four_collections(storage: &Storage) {
        let fields = names("f", 25);
        let pairs = fields.iter().map(|f| (f.clone(), f.slice(1..))).collect();
        let push = |elements: Vec<Bytes>, end| Command::List {
            key: b("l"),
            op: ListOp::Push {
                elements,
                end,
                only_existing: false,
                max_len: 100,
            },
        };
        run(
            storage,
            1,
            vec![
                Command::Hash {
                    key: b("h"),
                    op: HashOp::Set {
                        pairs,
                        only_new: false,
                        max_fields: 100,
                    },
                },
                Command::SetMembers {
                    key: b("s"),
                    op: SetOp::Add {
                        members: names("m", 25),
                        max_members: 100,
                    },
                },
                push(names("r", 15), trireme_types::End::Right),
                push(names("l", 10), trireme_types::End::Left),
                Command::SortedSet {
                    key: b("z"),
                    op: SortedSetOp::Add {
                        members: (0..25)
                            .map(|i| {
                                (
                                    Score::new(f64::from(25 - i)).unwrap(),
                                    b(&format!("z{i:02}")),
                                )
                            })
                            .collect(),
                        when: Default::default(),
                        compare: Default::default(),
                        increment: false,
                        max_members: 100,
                    },
                },
            ],
        );
    }

    #[test]
    fn pages_of_any_size_add_up_to_the_whole_read() {
        let (_dir, storage) = storage();
        four_collections(&storage);
        let view = storage.shard_view(ShardId(0));
        let hash = match view.hash_read(
            &b("h"),
            &HashRead::Fields {
                after: None,
                limit: u64::MAX,
            },
            1,
        ) {
            Ok(Ok(HashAnswer::Pairs(pairs))) => pairs,
            other => panic!("{other:?}"),
        };
        let list = |start, stop| match view.list_read(&b("l"), &ListRead::Range { start, stop }, 1)
        {
            Ok(Ok(ListAnswer::Elements(e))) => e,
            other => panic!("{other:?}"),
        };
        let ranks = |start, stop, reverse| {
            let read = SortedSetRead::Range {
                range: ZRange::Rank { start, stop },
                reverse,
                offset: 0,
                limit: u64::MAX,
            };
            match view.sorted_set_read(&b("z"), &read, 1) {
                Ok(Ok(SortedSetAnswer::Pairs(p))) => p,
                other => panic!("{other:?}"),
            }
        };
        for page in [1, 7, 25, 1000] {
            assert_eq!(
                walk(&storage, "h", WholeRead::Hash, page),
                (25, WholeItems::Pairs(hash.clone()))
            );
            assert_eq!(
                walk(&storage, "s", WholeRead::Set, page),
                (25, WholeItems::Members(names("m", 25)))
            );
            for (start, stop) in [(0, -1), (3, 17), (-5, -1), (20, 100), (30, 40), (-100, 2)] {
                let expected = list(start, stop);
                assert_eq!(
                    walk(&storage, "l", WholeRead::List { start, stop }, page),
                    (expected.len() as u64, WholeItems::Members(expected)),
                    "LRANGE {start} {stop} in pages of {page}"
                );
                for reverse in [false, true] {
                    let expected = ranks(start, stop, reverse);
                    assert_eq!(
                        walk(
                            &storage,
                            "z",
                            WholeRead::SortedSet {
                                start,
                                stop,
                                reverse
                            },
                            page
                        ),
                        (expected.len() as u64, WholeItems::Scored(expected)),
                        "ZRANGE {start} {stop} reverse {reverse} in pages of {page}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_read_keeps_its_view_while_the_collection_changes() {
        let (_dir, storage) = storage();
        four_collections(&storage);
        let view = storage.shard_view(ShardId(0));
        let mut scan = view
            .open_whole(&b("s"), WholeRead::Set, 1)
            .unwrap()
            .unwrap();
        let first = view.whole_page(&mut scan, 10).unwrap();
        run(
            &storage,
            10,
            vec![
                Command::SetMembers {
                    key: b("s"),
                    op: SetOp::Remove {
                        members: names("m", 20),
                    },
                },
                Command::SetMembers {
                    key: b("s"),
                    op: SetOp::Add {
                        members: names("n", 30),
                        max_members: 100,
                    },
                },
            ],
        );
        let mut members = match first {
            WholeItems::Members(m) => m,
            other => panic!("{other:?}"),
        };
        while !scan.is_done() {
            match view.whole_page(&mut scan, 10).unwrap() {
                WholeItems::Members(m) => members.extend(m),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(members, names("m", 25));
        // A new view sees the change.
        assert_eq!(walk(&storage, "s", WholeRead::Set, 10).0, 35);
    }

    #[test]
    fn a_missing_key_is_empty_and_another_type_is_refused() {
        let (_dir, storage) = storage();
        four_collections(&storage);
        assert_eq!(
            walk(&storage, "nothing", WholeRead::Hash, 10),
            (0, WholeItems::Pairs(Vec::new()))
        );
        let view = storage.shard_view(ShardId(0));
        assert_eq!(
            view.open_whole(&b("h"), WholeRead::Set, 1).unwrap().err(),
            Some(ErrorCode::WrongType)
        );
    }
}
