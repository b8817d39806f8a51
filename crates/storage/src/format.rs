//! The data directory's format version: a `FORMAT` file written when the directory is first
//! used and checked every time it is opened, so that a build never half-reads a layout it
//! does not know. A change to what is stored on disk raises [`CURRENT`]; a directory of
//! another version is refused with a message that says what to do.

use crate::StorageError;
use std::io::Write as _;
use std::path::Path;

/// The format this build writes and reads.
/// - 1: one fjall database (`fjall/`) holding every group's Raft log and every shard's rows.
/// - 2: the Raft logs in a raft-engine log store (`raft-log/`), the rows in fjall (`fjall/`).
/// - 3: the Raft logs as in 2, the rows in one LSM tree without a journal (`tables/`).
pub const CURRENT: u32 = 3;

/// The file's name, in the data directory.
const FILE: &str = "FORMAT";

/// What the file says before the number.
const MAGIC: &str = "trireme-data-format";

/// Checks the format of the data directory `dir`, recording it when the directory is new (or
/// was written before the format had a file: format 1, the one fjall database).
pub(crate) fn check_or_record(dir: &Path) -> Result<(), StorageError> {
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
            check(dir, found)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // A directory with a fjall database and no FORMAT file was written by a build
            // from before the file existed, in format 1; anything else is new.
            let found = if dir.join("fjall").is_dir() {
                1
            } else {
                CURRENT
            };
            check(dir, found)?;
            record(dir, found)
        }
        Err(e) => Err(StorageError::Io(e)),
    }
}

fn parse(text: &str) -> Option<u32> {
    text.trim().strip_prefix(MAGIC)?.trim().parse().ok()
}

fn check(dir: &Path, found: u32) -> Result<(), StorageError> {
    let dir = dir.display();
    match found.cmp(&CURRENT) {
        std::cmp::Ordering::Equal => Ok(()),
        std::cmp::Ordering::Greater => Err(StorageError::Format(format!(
            "the data directory {dir} holds data format {found}, written by a newer build; \
             this build reads format {CURRENT} only: run the build that wrote it (or a newer one)"
        ))),
        std::cmp::Ordering::Less => Err(StorageError::Format(format!(
            "the data directory {dir} holds data format {found}; this build reads format \
             {CURRENT} only and never reads an older layout in place. With the build that wrote \
             it, take a backup (`trireme backup`), then restore it (`trireme restore`) into a \
             cluster of this build started on empty data directories (docs/operations.md)"
        ))),
    }
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
