//! Node logs: the line that starts each run in a log kept across runs, and the tail of the
//! last run that error messages quote.

use std::io::{Read as _, Seek as _, SeekFrom};
use std::path::Path;

/// Starts each run's output in a log that keeps the output of earlier runs.
pub const RUN_MARKER: &str = "==== trireme server starting:";

/// How many log lines an error message shows per node.
pub const LOG_TAIL_LINES: usize = 20;

/// `\n--- last lines of <log> (<name>) ---\n...`, for error messages.
pub fn log_section(name: &str, log: &Path) -> String {
    format!(
        "\n--- last lines of {} ({name}) ---\n{}",
        log.display(),
        log_tail(log, LOG_TAIL_LINES)
    )
}

/// The last `lines` lines of a file written since the last [`RUN_MARKER`] (what an earlier run
/// said would mislead), reading at most its last 64 KiB.
pub fn log_tail(path: &Path, lines: usize) -> String {
    const WINDOW: u64 = 64 * 1024;
    let read = || -> std::io::Result<String> {
        let mut file = std::fs::File::open(path)?;
        let len = file.metadata()?.len();
        let start = len.saturating_sub(WINDOW);
        file.seek(SeekFrom::Start(start))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let mut all: Vec<&str> = text.lines().collect();
        if start > 0 && !all.is_empty() {
            all.remove(0); // cut in the middle
        }
        if let Some(marker) = all.iter().rposition(|l| l.starts_with(RUN_MARKER)) {
            all.drain(..marker);
        }
        let from = all.len().saturating_sub(lines);
        Ok(all[from..].join("\n"))
    };
    read().unwrap_or_else(|e| format!("(cannot read {}: {e})", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_tail_keeps_the_last_lines_of_the_last_run() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.log");
        let text: String = (0..100).map(|i| format!("line {i}\n")).collect();
        std::fs::write(&path, text).unwrap();
        assert_eq!(log_tail(&path, 2), "line 98\nline 99");
        let text = format!("old\n{RUN_MARKER} n1 ====\nnew\n");
        std::fs::write(&path, text).unwrap();
        assert_eq!(log_tail(&path, 5), format!("{RUN_MARKER} n1 ====\nnew"));
        assert!(log_tail(&dir.path().join("nope"), 2).starts_with("(cannot read"));
    }
}
