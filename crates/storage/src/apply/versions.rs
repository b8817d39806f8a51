//! Collection versions: deleting or replacing a collection leaves its rows dead, for the
//! background purge; snapshots, installs, splits and the format upgrade handle dead and
//! live rows apart.

use super::testing::*;
use crate::tables::Space;
use crate::{ShardExport, Storage, StorageOptions};
use bytes::Bytes;
use std::time::Duration;
use trireme_types::collection::{member_key, row_parts, unversioned_row};
use trireme_types::sorted::{Score, score_key};
use trireme_types::{
    Command, CommandResult, HashAnswer, HashOp, HashRead, Record, ShardId, SortedSetOp,
    ZAddCompare, ZAddWhen,
};

const SHARD: ShardId = ShardId(0);

fn hset(key: &str, fields: impl IntoIterator<Item = String>) -> Command {
    Command::Hash {
        key: b(key),
        op: HashOp::Set {
            pairs: fields.into_iter().map(|f| (b(&f), b("v"))).collect(),
            only_new: false,
            max_fields: u64::MAX,
        },
    }
}

fn zadd(key: &str, members: &[(f64, &str)]) -> Command {
    Command::SortedSet {
        key: b(key),
        op: SortedSetOp::Add {
            members: members
                .iter()
                .map(|(s, m)| (Score::new(*s).expect("a number"), b(m)))
                .collect(),
            when: ZAddWhen::Always,
            compare: ZAddCompare::Any,
            increment: false,
            max_members: 100,
        },
    }
}

fn delete(key: &str) -> Command {
    Command::Delete {
        keys: vec![b(key)],
        cas: None,
    }
}

fn fields(storage: &Storage, key: &str) -> Vec<Bytes> {
    let read = HashRead::Fields {
        after: None,
        limit: u64::MAX,
    };
    match storage
        .shard_view(SHARD)
        .hash_read(&b(key), &read, 1)
        .unwrap()
    {
        Ok(HashAnswer::Pairs(pairs)) => pairs.into_iter().map(|(f, _)| f).collect(),
        other => panic!("{other:?}"),
    }
}

/// Every stored row of the shard: key (without the shard) and value.
fn rows(storage: &Storage) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    storage
        .shard_view(SHARD)
        .for_each_record(|k, v| out.push((k.to_vec(), v.to_vec())))
        .unwrap();
    out
}

fn version_of(storage: &Storage, key: &str) -> u64 {
    storage
        .get_raw(SHARD, key.as_bytes())
        .unwrap()
        .expect("the collection")
        .create_index
}

#[test]
fn the_purge_keeps_to_its_pace() {
    // 20,000 rows at 10,000 a second: at least two seconds, less the first batch's share.
    let dir = tempfile::tempdir().unwrap();
    let options = StorageOptions {
        purge_rows_per_sec: 10_000,
        ..StorageOptions::default()
    };
    let storage = Storage::open(dir.path(), &options).unwrap();
    let many: Vec<String> = (0..20_000).map(|i| format!("f{i:05}")).collect();
    run(&storage, 1, vec![hset("h", many)]);
    let started = std::time::Instant::now();
    run(&storage, 2, vec![delete("h")]);
    assert!(storage.wait_for_purges(Duration::from_secs(60)));
    let took = started.elapsed();
    assert_eq!(storage.purged_rows(), 20_000);
    assert!(took >= Duration::from_millis(1_700), "purged in {took:?}");
    assert_eq!(storage.count_keys(SHARD), 0);
}

#[test]
fn a_deleted_collection_is_gone_at_once_and_its_rows_are_purged_in_the_background() {
    let (_dir, storage) = storage();
    let many: Vec<String> = (0..20_000).map(|i| format!("f{i:05}")).collect();
    run(
        &storage,
        1,
        vec![hset("h", many.clone()), zadd("z", &[(1.0, "a")])],
    );
    assert_eq!(fields(&storage, "h").len(), 20_000);
    // Deleted, then created again in the next entry: only the new field is there.
    run(
        &storage,
        3,
        vec![delete("h"), hset("h", ["new".to_string()]), delete("z")],
    );
    assert_eq!(fields(&storage, "h"), vec![b("new")]);
    assert_eq!(version_of(&storage, "h"), 4);
    assert!(storage.wait_for_purges(Duration::from_secs(60)));
    assert_eq!(storage.purges_pending(), 0);
    assert!(storage.purged_rows() >= 20_002, "{}", storage.purged_rows());
    // The record and one field of the new hash are all that is left.
    assert_eq!(storage.count_keys(SHARD), 2);
}

#[test]
fn a_collection_created_and_deleted_in_one_batch_leaves_no_row() {
    let (_dir, storage) = storage();
    run(
        &storage,
        1,
        vec![
            hset("h", ["a".to_string(), "b".to_string()]),
            delete("h"),
            hset("h", ["c".to_string()]),
        ],
    );
    assert_eq!(fields(&storage, "h"), vec![b("c")]);
    assert_eq!(storage.count_keys(SHARD), 2);
}

/// Made, deleted and made again inside one transaction (one log entry: both versions are
/// that entry's index); and the same undone by a failed check, which leaves the stored
/// hash whole.
#[test]
fn a_collection_made_twice_in_one_transaction_keeps_only_the_second() {
    let (_dir, storage) = storage();
    run(&storage, 1, vec![hset("kept", ["old".to_string()])]);
    let twice = |key: &str| {
        vec![
            hset(key, ["a".to_string(), "b".to_string()]),
            delete(key),
            hset(key, ["c".to_string()]),
        ]
    };
    let mut undone = twice("kept");
    undone.push(Command::Check {
        key: b("missing"),
        check: trireme_types::KeyCheck::Exists,
    });
    let results = run(
        &storage,
        2,
        vec![
            Command::Transaction {
                watches: vec![],
                commands: twice("fresh"),
            },
            Command::Transaction {
                watches: vec![],
                commands: undone,
            },
        ],
    );
    assert!(
        matches!(results[0], CommandResult::Transaction(Ok(_))),
        "{results:?}"
    );
    assert!(
        matches!(results[1], CommandResult::Transaction(Err(3))),
        "{results:?}"
    );
    assert_eq!(fields(&storage, "fresh"), vec![b("c")]);
    assert_eq!(version_of(&storage, "fresh"), 2);
    assert_eq!(fields(&storage, "kept"), vec![b("old")]);
    assert_eq!(version_of(&storage, "kept"), 1);
    assert!(storage.wait_for_purges(Duration::from_secs(60)));
    // Two records and one field each.
    assert_eq!(storage.count_keys(SHARD), 4);
}

#[test]
fn dead_rows_found_when_the_index_is_built_are_purged() {
    let (_dir, storage) = storage();
    run(&storage, 1, vec![hset("h", ["a".to_string()])]);
    // Rows of a version no record holds, as a crash that lost the purge queue leaves them.
    let dead = member_key(b"h", 99, b"x");
    let orphan = member_key(b"gone", 5, b"y");
    let row = Record::string(b("v"), 1).encode();
    storage
        .import_rows(SHARD, &[(&dead[..], &row[..]), (&orphan[..], &row[..])])
        .unwrap();
    assert_eq!(storage.count_keys(SHARD), 4);
    // The next batch builds the index, which finds them.
    run(&storage, 2, vec![hset("h", ["b".to_string()])]);
    assert!(storage.wait_for_purges(Duration::from_secs(60)));
    assert_eq!(storage.count_keys(SHARD), 3);
    assert_eq!(fields(&storage, "h"), vec![b("a"), b("b")]);
}

#[test]
fn a_snapshot_carries_live_rows_unversioned_and_an_install_keys_them_under_their_versions() {
    let (_dir, storage) = storage();
    run(
        &storage,
        1,
        vec![
            hset("h", ["old".to_string()]),
            zadd("z", &[(2.0, "m"), (1.0, "n")]),
        ],
    );
    // A dead version whose rows are still stored (its purge has not run).
    let dead = member_key(b"h", 1, b"stale");
    let row = Record::string(b("v"), 1).encode();
    run(
        &storage,
        3,
        vec![delete("h"), hset("h", ["new".to_string()])],
    );
    storage.wait_for_purges(Duration::from_secs(60));
    storage
        .import_rows(SHARD, &[(&dead[..], &row[..])])
        .unwrap();
    let mut carried = Vec::new();
    storage
        .shard_view(SHARD)
        .for_each_snapshot_row(|k, v| carried.push((k.to_vec(), v.to_vec())))
        .unwrap();
    let names: Vec<String> = carried
        .iter()
        .map(|(k, _)| String::from_utf8_lossy(k).into_owned())
        .collect();
    assert_eq!(carried.len(), 2 + 1 + 2 * 2, "{names:?}");
    for (key, _) in &carried {
        if let Some(parts) = row_parts(key) {
            assert_eq!(parts.version, None, "carried unversioned");
            assert_ne!(parts.rest, b"stale", "a dead row is left out");
        }
    }
    // Installed at once and by pieces (records first), the rows are stored as they were.
    let live: Vec<(Vec<u8>, Vec<u8>)> = rows(&storage)
        .into_iter()
        .filter(|(k, _)| k[..] != dead[..])
        .collect();
    let at_once = tempfile::tempdir().unwrap();
    let at_once = Storage::open(at_once.path(), &StorageOptions::default()).unwrap();
    at_once
        .import_shard(
            SHARD,
            &ShardExport {
                meta: Vec::new(),
                records: carried.clone(),
            },
        )
        .unwrap();
    assert_eq!(rows(&at_once), live);
    let by_pieces = tempfile::tempdir().unwrap();
    let by_pieces = Storage::open(by_pieces.path(), &StorageOptions::default()).unwrap();
    for collection_rows in [false, true] {
        for (key, value) in &carried {
            if crate::is_unversioned_row(key) == collection_rows {
                by_pieces
                    .import_rows(SHARD, &[(&key[..], &value[..])])
                    .unwrap();
            }
        }
    }
    assert_eq!(rows(&by_pieces), live);
    assert_eq!(fields(&by_pieces, "h"), vec![b("new")]);
}

#[test]
fn a_split_leaves_dead_rows_behind_and_moves_live_ones() {
    let (_dir, storage) = storage();
    let keys: Vec<String> = (0..40).map(|i| format!("h{i}")).collect();
    let writes = keys.iter().map(|k| hset(k, ["f".to_string()])).collect();
    run(&storage, 1, writes);
    // A dead row beside each hash's live one.
    let row = Record::string(b("v"), 1).encode();
    let dead: Vec<Bytes> = keys
        .iter()
        .map(|k| member_key(k.as_bytes(), 1_000, b"stale"))
        .collect();
    let pieces: Vec<(&[u8], &[u8])> = dead.iter().map(|k| (&k[..], &row[..])).collect();
    storage.import_rows(SHARD, &pieces).unwrap();
    split_in_half(&storage);
    let child_rows = storage.count_keys(ShardId(1));
    let upper = keys
        .iter()
        .filter(|k| trireme_types::key_slot(k.as_bytes()) >= 8192)
        .count();
    assert!(upper > 0 && upper < keys.len());
    // Each moved hash: its record and its one live field.
    assert_eq!(child_rows, 2 * upper);
    for key in &keys {
        let shard = if trireme_types::key_slot(key.as_bytes()) >= 8192 {
            ShardId(1)
        } else {
            SHARD
        };
        let version = storage
            .get_raw(shard, key.as_bytes())
            .unwrap()
            .expect("the hash")
            .create_index;
        assert!(
            storage
                .get_raw(shard, &member_key(key.as_bytes(), version, b"f"))
                .unwrap()
                .is_some()
        );
    }
}

/// A directory of format 3 (every collection row unversioned) or one whose upgrade was cut
/// short (`FORMAT` already 4, the marker still there, only some rows rewritten): opened, it
/// ends upgraded, with every collection as it was.
#[test]
fn a_directory_of_format_three_is_upgraded_when_opened_and_an_upgrade_cut_short_goes_on() {
    for cut_short in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        {
            let storage = Storage::open(dir.path(), &StorageOptions::default()).unwrap();
            run(
                &storage,
                1,
                vec![
                    hset("h", ["a".to_string(), "b".to_string()]),
                    zadd("z", &[(3.0, "m")]),
                ],
            );
            // Back to format 3's layout: the collection rows unversioned (with the upgrade
            // cut short, only every other one), and one orphan row.
            let mut batch = storage.tables.batch();
            for (n, (key, value)) in rows(&storage).into_iter().enumerate() {
                if cut_short && n % 2 == 0 {
                    continue;
                }
                if let Some(plain) = unversioned_row(&key) {
                    batch.remove(Space::Data, crate::keys::owned_key(0, &key));
                    batch.insert(Space::Data, crate::keys::owned_key(0, &plain), value);
                }
            }
            let orphan = unversioned_row(&member_key(b"nobody", 1, b"x")).unwrap();
            let row = Record::string(b("v"), 1).encode();
            batch.insert(
                Space::Data,
                crate::keys::owned_key(0, &orphan),
                row.to_vec(),
            );
            batch.commit().unwrap();
            storage.tables.flush().unwrap();
        }
        let format_file = |format: u32| format!("trireme-data-format {format}\n");
        if cut_short {
            std::fs::write(dir.path().join("FORMAT"), format_file(crate::DATA_FORMAT)).unwrap();
            std::fs::write(dir.path().join("FORMAT-UPGRADING"), format_file(3)).unwrap();
        } else {
            std::fs::write(dir.path().join("FORMAT"), format_file(3)).unwrap();
        }
        let storage = Storage::open(dir.path(), &StorageOptions::default()).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("FORMAT")).unwrap(),
            format_file(crate::DATA_FORMAT)
        );
        assert!(!dir.path().join("FORMAT-UPGRADING").exists());
        assert_eq!(
            fields(&storage, "h"),
            vec![b("a"), b("b")],
            "cut short: {cut_short}"
        );
        let version = version_of(&storage, "z");
        let score = Score::new(3.0).unwrap();
        assert!(
            storage
                .get_raw(SHARD, &score_key(b"z", version, score, b"m"))
                .unwrap()
                .is_some()
        );
        // Two hash fields, a member and a score row, two records: no orphan, nothing
        // unversioned.
        let stored = rows(&storage);
        assert_eq!(stored.len(), 6, "cut short: {cut_short}");
        assert!(stored.iter().all(|(k, _)| !crate::is_unversioned_row(k)));
        let answers = run(&storage, 10, vec![hset("h", ["c".to_string()])]);
        assert_eq!(answers, vec![CommandResult::Hash(Ok(HashAnswer::Count(1)))]);
    }
}
