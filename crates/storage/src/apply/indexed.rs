//! The member index changes how collection writes learn what a collection holds, never what
//! they do: random collection commands applied to stores with the index, without it, with a
//! budget too small for every collection, and reopened (the index built again from rows) must
//! answer alike and leave the same rows.

use super::testing::b;
use crate::{ApplyEntry, Storage, StorageOptions};
use bytes::Bytes;
use std::sync::Arc;
use trireme_types::sorted::{Score, SortedSetOp, ZAddCompare, ZAddWhen};
use trireme_types::{
    Command, CommandResult, End, HashOp, KeyCheck, ListOp, LogCommand, PutCondition, SetOp,
    ShardId, TtlUpdate,
};

/// A small deterministic generator (xorshift), so a failure names its seed.
struct Draw(u64);

impl Draw {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len() as u64) as usize]
    }

    fn members(&mut self) -> Vec<Bytes> {
        (0..1 + self.below(3))
            .map(|_| b(self.pick(&["a", "b", "c", "d", "e", "f"])))
            .collect()
    }
}

const KEYS: &[&str] = &["h", "s", "z", "l", "x"];

/// One random command; keys are shared between kinds, so commands meet the wrong type, and
/// deletes, expiries and plain writes replace collections.
fn command(draw: &mut Draw) -> Command {
    let key = b(draw.pick(KEYS));
    match draw.below(14) {
        0..=2 => Command::Hash {
            key,
            op: HashOp::Set {
                pairs: draw
                    .members()
                    .into_iter()
                    .map(|f| (f, b(&draw.below(100).to_string())))
                    .collect(),
                only_new: draw.below(4) == 0,
                max_fields: 5,
            },
        },
        3 => Command::Hash {
            key,
            op: HashOp::Delete {
                fields: draw.members(),
            },
        },
        4 => Command::Hash {
            key,
            op: HashOp::IncrBy {
                field: draw.members().remove(0),
                delta: 1,
                max_fields: 5,
            },
        },
        5 | 6 => Command::SetMembers {
            key,
            op: SetOp::Add {
                members: draw.members(),
                max_members: 5,
            },
        },
        7 => Command::SetMembers {
            key,
            op: match draw.below(2) {
                0 => SetOp::Remove {
                    members: draw.members(),
                },
                _ => SetOp::Move {
                    to: b(draw.pick(KEYS)),
                    member: draw.members().remove(0),
                    max_members: 5,
                },
            },
        },
        8 | 9 => Command::SortedSet {
            key,
            op: SortedSetOp::Add {
                members: draw
                    .members()
                    .into_iter()
                    .map(|m| (Score::new(draw.below(5) as f64).expect("a number"), m))
                    .collect(),
                when: [ZAddWhen::Always, ZAddWhen::IfNew, ZAddWhen::IfExists]
                    [draw.below(3) as usize],
                compare: [ZAddCompare::Any, ZAddCompare::Greater, ZAddCompare::Less]
                    [draw.below(3) as usize],
                increment: draw.below(4) == 0,
                max_members: 5,
            },
        },
        10 => Command::SortedSet {
            key,
            op: SortedSetOp::Remove {
                members: draw.members(),
            },
        },
        11 => Command::List {
            key,
            op: ListOp::Push {
                elements: draw.members(),
                end: End::Left,
                only_existing: false,
                max_len: 10,
            },
        },
        12 => match draw.below(3) {
            0 => Command::Delete {
                keys: vec![key],
                cas: None,
            },
            1 => Command::Put {
                key,
                value: b("plain"),
                flags: None,
                condition: PutCondition::Always,
                ttl: TtlUpdate::Keep,
                return_previous: false,
            },
            _ => Command::SetTtl {
                key,
                ttl: TtlUpdate::At(draw.below(4) * 1_000),
            },
        },
        // A transaction whose check may fail after its first command wrote: undone whole.
        _ => Command::Transaction {
            watches: Vec::new(),
            commands: vec![
                command(draw),
                Command::Check {
                    key: b(draw.pick(KEYS)),
                    check: KeyCheck::Exists,
                },
                command(draw),
            ],
        },
    }
}

fn open(dir: &std::path::Path, member_index_bytes: u64) -> Arc<Storage> {
    let options = StorageOptions {
        member_index_bytes,
        min_free_bytes: 0,
        ..StorageOptions::default()
    };
    Storage::open(dir, &options).unwrap()
}

fn rows(storage: &Storage) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut rows = Vec::new();
    storage
        .shard_view(ShardId(0))
        .for_each_record(|key, value| rows.push((key.to_vec(), value.to_vec())))
        .unwrap();
    rows
}

#[test]
fn collection_writes_answer_alike_with_and_without_the_member_index() {
    for seed in 1..=12u64 {
        let dirs: Vec<_> = (0..4).map(|_| tempfile::tempdir().unwrap()).collect();
        // Indexed; never indexed; a budget that holds about two collections; indexed and
        // reopened now and then.
        let budgets = [u64::MAX, 0, 700, u64::MAX];
        let mut stores: Vec<_> = dirs
            .iter()
            .zip(budgets)
            .map(|(dir, budget)| open(dir.path(), budget))
            .collect();
        let mut draw = Draw(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let mut index = 1;
        for round in 0..150 {
            // Time passes across the expiries the commands set.
            let now = round * 40;
            let commands: Vec<LogCommand> = (0..1 + draw.below(6))
                .map(|_| LogCommand {
                    now_ms: now,
                    command: command(&mut draw),
                })
                .collect();
            let entries: Vec<_> = commands
                .iter()
                .enumerate()
                .map(|(i, command)| ApplyEntry {
                    index: index + i as u64,
                    command: Some(command),
                })
                .collect();
            index += entries.len() as u64;
            let answers: Vec<Vec<CommandResult>> = stores
                .iter()
                .map(|store| store.apply(ShardId(0), &entries, &[]).unwrap())
                .collect();
            for (n, answer) in answers.iter().enumerate().skip(1) {
                assert_eq!(
                    answer, &answers[0],
                    "seed {seed} round {round}: store {n} answered otherwise to {commands:?}"
                );
            }
            if round % 37 == 36 {
                drop(stores.pop());
                stores.push(open(dirs[3].path(), u64::MAX));
            }
        }
        // Dead collection versions' rows go in the background, on each store at its pace.
        for store in &stores {
            assert!(store.wait_for_purges(std::time::Duration::from_secs(30)));
        }
        let expected = rows(&stores[0]);
        for (n, store) in stores.iter().enumerate().skip(1) {
            assert_eq!(
                rows(store),
                expected,
                "seed {seed}: store {n} holds other rows"
            );
        }
    }
}

#[test]
fn the_index_takes_what_it_counts_and_gives_it_back() {
    let dir = tempfile::tempdir().unwrap();
    let storage = open(dir.path(), u64::MAX);
    let hset = |key: &str, field: &str| Command::Hash {
        key: b(key),
        op: HashOp::Set {
            pairs: vec![(b(field), b("v"))],
            only_new: false,
            max_fields: 100,
        },
    };
    super::testing::run(&storage, 1, vec![hset("h", "f1"), hset("h", "f2")]);
    let two = storage.member_index_bytes();
    assert!(two > 0);
    super::testing::run(&storage, 3, vec![hset("h", "f3")]);
    let per_member = storage.member_index_bytes() - two;
    assert_eq!(
        per_member,
        crate::member_index::MEMBER_BYTES + 2,
        "a member takes its name and one entry"
    );
    super::testing::run(
        &storage,
        4,
        vec![Command::Delete {
            keys: vec![b("h")],
            cas: None,
        }],
    );
    assert_eq!(storage.member_index_bytes(), 0);
}

/// A member row without its collection's record (which no command writes) is dead: neither
/// the index nor a read finds it in a collection created over it later.
#[test]
fn member_rows_without_a_record_are_dead_with_or_without_the_index() {
    let orphan = trireme_types::collection::member_key(b"k", 1, b"g");
    let row = trireme_types::Record::string(b("old"), 1).encode();
    let hset = |field: &str| Command::Hash {
        key: b("k"),
        op: HashOp::Set {
            pairs: vec![(b(field), b("v"))],
            only_new: false,
            max_fields: 100,
        },
    };
    let mut answers = Vec::new();
    for budget in [u64::MAX, 0] {
        let dir = tempfile::tempdir().unwrap();
        let storage = open(dir.path(), budget);
        storage
            .import_rows(ShardId(0), &[(&orphan[..], &row[..])])
            .unwrap();
        // One batch each: the index changes between batches.
        for (index, field) in [(2, "f"), (3, "g"), (4, "g")] {
            answers.push(super::testing::run(&storage, index, vec![hset(field)]));
        }
    }
    let (indexed, read) = answers.split_at(3);
    assert_eq!(indexed, read);
    // `g` was new to the hash.
    assert_eq!(
        indexed[1],
        vec![CommandResult::Hash(Ok(trireme_types::HashAnswer::Count(1)))]
    );
}
