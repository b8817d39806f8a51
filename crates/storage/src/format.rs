//! The data directory's format version: a `FORMAT` file written when the directory is first
//! used and checked every time it is opened, so that a build never half-reads a layout it
//! does not know. A change to what is stored on disk raises [`CURRENT`]; a directory of
//! another version is refused with a message that says what to do.

use crate::StorageError;
use crate::tables::{Space, Tables};
use std::io::Write as _;
use std::ops::Bound;
use std::path::Path;

/// The format this build writes and reads.
/// - 1: one fjall database (`fjall/`) holding every group's Raft log and every shard's rows.
/// - 2: the Raft logs in a raft-engine log store (`raft-log/`), the rows in fjall (`fjall/`).
/// - 3: the Raft logs as in 2, the rows in one LSM tree without a journal (`tables/`).
/// - 4: as 3, with each collection's member and score rows keyed under its version (see
///   [`trireme_types::collection`]). A directory of format 3 is upgraded in place when it is
///   opened ([`upgrade_collection_rows`]).
pub const CURRENT: u32 = 4;

/// The oldest format this build upgrades in place.
const UPGRADABLE: u32 = 3;

/// Collection rows rewritten per batch by the upgrade.
const UPGRADE_PIECE_ROWS: usize = 8192;

/// What opening a data directory found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Found {
    /// The format this build writes.
    Current,
    /// An older format this build upgrades in place (then [`record_current`]).
    Upgradable(u32),
}

/// The file's name, in the data directory.
const FILE: &str = "FORMAT";

/// What the file says before the number.
const MAGIC: &str = "trireme-data-format";

/// Checks the format of the data directory `dir`, recording it when the directory is new (or
/// was written before the format had a file: format 1, the one fjall database).
pub(crate) fn check_or_record(dir: &Path) -> Result<Found, StorageError> {
    let path = dir.join(FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let found = parse(&text).ok_or_else(|| {
                StorageError::Format(format!(
                    "{} is not a format file (it should read \"{MAGIC} N\"): {:?}",
                    path.display(),
                    text.trim()
                ))
            })?;
            let checked = check(dir, found)?;
            // An upgrade begun and not finished: its rows are in both layouts.
            if checked == Found::Current
                && let Some(from) = upgrade_begun(dir)?
            {
                return Ok(Found::Upgradable(from));
            }
            Ok(checked)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // A directory with a fjall database and no FORMAT file was written by a build
            // from before the file existed, in format 1; anything else is new.
            let found = if dir.join("fjall").is_dir() {
                1
            } else {
                CURRENT
            };
            let checked = check(dir, found)?;
            record(dir, found)?;
            Ok(checked)
        }
        Err(e) => Err(StorageError::Io(e)),
    }
}

fn parse(text: &str) -> Option<u32> {
    text.trim().strip_prefix(MAGIC)?.trim().parse().ok()
}

fn check(dir: &Path, found: u32) -> Result<Found, StorageError> {
    let dir = dir.display();
    if (UPGRADABLE..CURRENT).contains(&found) {
        return Ok(Found::Upgradable(found));
    }
    match found.cmp(&CURRENT) {
        std::cmp::Ordering::Equal => Ok(Found::Current),
        std::cmp::Ordering::Greater => Err(StorageError::Format(format!(
            "the data directory {dir} holds data format {found}, written by a newer build; \
             this build reads format {CURRENT} only: run the build that wrote it (or a newer one)"
        ))),
        std::cmp::Ordering::Less => Err(StorageError::Format(format!(
            "the data directory {dir} holds data format {found}; this build reads format \
             {CURRENT}, upgrades format {UPGRADABLE} in place, and never reads an older layout. \
             With the build that wrote it, take a backup (`trireme backup`), then restore it \
             (`trireme restore`) into a cluster of this build started on empty data \
             directories (docs/operations.md)"
        ))),
    }
}

/// The file that says an upgrade from the format it names was begun and not finished.
const UPGRADING: &str = "FORMAT-UPGRADING";

/// Begins the upgrade of `dir` from format `from`: first the marker, then the current
/// format in `FORMAT`, both synced. From then on a build of the old format refuses the
/// directory (its rows may be in either layout), and this one goes on with the upgrade
/// when it opens it, until [`finish_upgrade`].
pub(crate) fn begin_upgrade(dir: &Path, from: u32) -> Result<(), StorageError> {
    let marker = dir.join(UPGRADING);
    let mut file = std::fs::File::create(&marker)?;
    writeln!(file, "{MAGIC} {from}")?;
    file.sync_all()?;
    std::fs::File::open(dir)?.sync_all()?;
    record(dir, CURRENT)
}

/// Ends an upgrade whose rows are all rewritten and flushed.
pub(crate) fn finish_upgrade(dir: &Path) -> Result<(), StorageError> {
    std::fs::remove_file(dir.join(UPGRADING))?;
    std::fs::File::open(dir)?.sync_all()?;
    Ok(())
}

/// The format an unfinished upgrade of `dir` started from, if one was begun.
fn upgrade_begun(dir: &Path) -> Result<Option<u32>, StorageError> {
    match std::fs::read_to_string(dir.join(UPGRADING)) {
        Ok(text) => Ok(Some(parse(&text).unwrap_or(UPGRADABLE))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(StorageError::Io(e)),
    }
}

/// Upgrades the rows of a format 3 directory to format 4: every collection row of the
/// unversioned layout is rewritten under its record's version (a row without a collection
/// record, which nothing reads, is dropped). Each batch removes the rows it rewrites, so a
/// crash part way leaves every row in one layout or the other, and the next open goes on
/// (see [`begin_upgrade`]); the caller flushes the tables before [`finish_upgrade`].
/// Returns how many rows were rewritten.
pub(crate) fn upgrade_collection_rows(tables: &Tables) -> Result<u64, StorageError> {
    use trireme_types::collection::{row_parts, versioned_row};
    let snapshot = tables.snapshot();
    let mut rewritten = 0u64;
    let mut batch = tables.batch();
    let mut in_batch = 0usize;
    let mut versions = crate::purge::CollectionVersions::new(&snapshot, 0);
    for row in snapshot.range(Space::Data, Bound::Unbounded, Bound::Unbounded) {
        let (key, value) = row?;
        let Some((shard, user_key)) = key.split_first_chunk::<4>() else {
            continue;
        };
        let Some(parts) = row_parts(user_key).filter(|p| p.version.is_none()) else {
            continue;
        };
        let version = versions.version_of(u32::from_be_bytes(*shard), parts.key)?;
        batch.remove(Space::Data, &key[..]);
        if let Some(new) = version.and_then(|v| versioned_row(user_key, v)) {
            let mut stored = shard.to_vec();
            stored.extend_from_slice(&new);
            batch.insert(Space::Data, stored, value);
        }
        rewritten += 1;
        in_batch += 1;
        if in_batch >= UPGRADE_PIECE_ROWS {
            std::mem::replace(&mut batch, tables.batch()).commit()?;
            in_batch = 0;
        }
    }
    batch.commit()?;
    Ok(rewritten)
}

/// Writes the file whole or not at all: a temporary file, synced, renamed over, and the
/// directory synced.
fn record(dir: &Path, format: u32) -> Result<(), StorageError> {
    let temporary = dir.join(format!("{FILE}.tmp"));
    let mut file = std::fs::File::create(&temporary)?;
    writeln!(file, "{MAGIC} {format}")?;
    file.sync_all()?;
    std::fs::rename(&temporary, dir.join(FILE))?;
    std::fs::File::open(dir)?.sync_all()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_directory_is_recorded_in_the_current_format() {
        let dir = tempfile::tempdir().unwrap();
        check_or_record(dir.path()).unwrap();
        let text = std::fs::read_to_string(dir.path().join(FILE)).unwrap();
        assert_eq!(text, format!("{MAGIC} {CURRENT}\n"));
        // And read back as such.
        check_or_record(dir.path()).unwrap();
    }

    #[test]
    fn a_directory_from_before_the_file_is_format_one_and_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("fjall")).unwrap();
        let refused = check_or_record(dir.path()).unwrap_err().to_string();
        assert!(
            refused.contains("format 1") && refused.contains("trireme backup"),
            "{refused}"
        );
        // Refused without being marked as anything.
        assert!(!dir.path().join(FILE).exists());
    }

    #[test]
    fn other_formats_and_damaged_files_are_refused_with_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let write = |text: &str| std::fs::write(dir.path().join(FILE), text).unwrap();
        write(&format!("{MAGIC} {}\n", CURRENT + 1));
        let newer = check_or_record(dir.path()).unwrap_err().to_string();
        assert!(newer.contains("newer build"), "{newer}");
        write(&format!("{MAGIC} 1\n"));
        let older = check_or_record(dir.path()).unwrap_err().to_string();
        assert!(
            older.contains("trireme backup") && older.contains("trireme restore"),
            "{older}"
        );
        write("hello\n");
        let damaged = check_or_record(dir.path()).unwrap_err().to_string();
        assert!(damaged.contains("not a format file"), "{damaged}");
        // Nothing was rewritten over what was there.
        assert_eq!(
            std::fs::read_to_string(dir.path().join(FILE)).unwrap(),
            "hello\n"
        );
    }
}
