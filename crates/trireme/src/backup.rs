//! `trireme backup` and `trireme restore`: every shard's live keys to one file, and back into a
//! cluster of any shape.
//!
//! A backup asks each shard's leader for its keys (`GET /v1/backup/shard/{id}`: one storage
//! snapshot taken after a linearizable read barrier) and writes them in the format of
//! `trireme_types::backup`, ending with a count and a checksum. The file is written under a
//! `.partial` name and renamed once whole. A restore first reads the whole file and checks
//! it, so a damaged or truncated file is refused before anything is written; then it sends
//! the entries in pieces to `POST /v1/backup/restore`, which routes them by the target
//! cluster's own shards.

use crate::cluster::{http_client, normalize_target, root_cause};
use crate::cluster_admin::fetch_status;
use anyhow::{Context, anyhow, bail};
use clap::Args;
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;
use trireme_types::SLOT_COUNT;
use trireme_types::backup::{Frame, FrameReader, MAGIC, Verifier, Writer};

/// Tries per shard (a leader that changes under the backup is asked again).
const SHARD_ATTEMPTS: u32 = 10;
/// Most bytes of entries sent in one restore request: within every node's request body
/// limit (at least 1 MiB + 64 KiB), and no entry is larger than a node's value limit.
const RESTORE_PIECE: usize = 1 << 20;
/// Tries per restore piece (writes are idempotent: a piece is simply sent again).
const PIECE_ATTEMPTS: u32 = 10;
/// Pause before trying again.
const RETRY_PAUSE: Duration = Duration::from_millis(500);

/// `trireme backup`.
#[derive(Args, Debug)]
pub struct BackupArgs {
    /// Any node of the cluster (`host:port` of its HTTP API, or a URL).
    #[arg(long, default_value = "127.0.0.1:7700")]
    pub target: String,
    /// The backup file to write.
    #[arg(long)]
    pub out: PathBuf,
}

/// `trireme restore`.
#[derive(Args, Debug)]
pub struct RestoreArgs {
    /// The backup file.
    pub file: PathBuf,
    /// Any node of the cluster to restore into, which must hold no key yet.
    #[arg(long, default_value = "127.0.0.1:7700")]
    pub target: String,
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// Runs `trireme backup`.
pub fn run_backup(args: BackupArgs) -> anyhow::Result<()> {
    runtime()?.block_on(backup(&args))
}

/// Runs `trireme restore`.
pub fn run_restore(args: RestoreArgs) -> anyhow::Result<()> {
    runtime()?.block_on(restore(&args))
}

/// Checks that the slot ranges the shards' streams covered take in every slot exactly once.
fn check_coverage(mut ranges: Vec<(u16, u16)>) -> anyhow::Result<()> {
    ranges.sort_unstable();
    let mut next = 0u32;
    for (first, last) in ranges {
        if u32::from(first) != next || last < first {
            bail!(
                "the shards' streams did not cover every slot exactly once (at slot {next}): a shard was splitting; run the backup again"
            );
        }
        next = u32::from(last) + 1;
    }
    if next != u32::from(SLOT_COUNT) {
        bail!(
            "the shards' streams stopped at slot {next}: a shard was splitting; run the backup again"
        );
    }
    Ok(())
}

async fn backup(args: &BackupArgs) -> anyhow::Result<()> {
    let status = fetch_status(&args.target).await?;
    let mut shards: Vec<u32> = status.shards.iter().map(|s| s.shard.0).collect();
    shards.sort_unstable();
    let mut partial = args.out.clone().into_os_string();
    partial.push(".partial");
    let partial = PathBuf::from(partial);
    let mut file = std::fs::File::create(&partial)
        .with_context(|| format!("cannot create {}", partial.display()))?;
    let mut writer = Writer::new();
    file.write_all(&writer.start())?;
    let client = http_client(Duration::from_secs(600))?;
    let mut covered = Vec::with_capacity(shards.len());
    for &shard in &shards {
        // Where the file and the checksum stood before this shard: a failed try is undone.
        let mark = (file.stream_position()?, writer.clone());
        let mut attempt = 0;
        loop {
            attempt += 1;
            match backup_shard(&client, &args.target, shard, &mut file, &mut writer).await {
                Ok(range) => {
                    covered.push(range);
                    break;
                }
                Err(e) if attempt < SHARD_ATTEMPTS => {
                    eprintln!("shard {shard}: {e:#}; trying again");
                    file.set_len(mark.0)?;
                    file.seek(std::io::SeekFrom::Start(mark.0))?;
                    writer = mark.1.clone();
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
                Err(e) => {
                    let _ = std::fs::remove_file(&partial);
                    return Err(e.context(format!("shard {shard}")));
                }
            }
        }
    }
    if let Err(e) = check_coverage(covered) {
        let _ = std::fs::remove_file(&partial);
        return Err(e);
    }
    let entries = writer.entries();
    file.write_all(&writer.end())?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&partial, &args.out).with_context(|| {
        format!(
            "cannot rename {} to {}",
            partial.display(),
            args.out.display()
        )
    })?;
    let bytes = std::fs::metadata(&args.out).map(|m| m.len()).unwrap_or(0);
    println!(
        "backed up {entries} entries from {} shards to {} ({bytes} bytes)",
        shards.len(),
        args.out.display()
    );
    Ok(())
}

/// Appends one shard's entries, as its leader streams them, to `file`; the slot range they
/// are the keys of.
async fn backup_shard(
    client: &reqwest::Client,
    target: &str,
    shard: u32,
    file: &mut std::fs::File,
    writer: &mut Writer,
) -> anyhow::Result<(u16, u16)> {
    // Asked afresh on every try: the leader may have changed. A node knows the leader of
    // the shards it holds only, so the shard's replicas are asked after the leader it names.
    let status = fetch_status(target).await?;
    let placement = status
        .shards
        .iter()
        .find(|s| s.shard.0 == shard)
        .ok_or_else(|| anyhow!("the cluster no longer lists it"))?;
    let mut candidates: Vec<&str> = placement.leader.iter().map(String::as_str).collect();
    candidates.extend(placement.replicas.iter().map(String::as_str));
    candidates.dedup();
    let mut refusals = Vec::new();
    for name in candidates {
        let Some(http) = status
            .nodes
            .iter()
            .find(|n| n.name == name)
            .map(|n| &n.http)
        else {
            continue;
        };
        let url = format!("{}/v1/backup/shard/{shard}", normalize_target(http)?);
        let response = client
            .get(&url)
            .send()
            .await
            .map_err(|e| anyhow!("GET {url}: {}", root_cause(&e)))?;
        if response.status().is_success() {
            return stream_shard(response, &url, file, writer).await;
        }
        let status = response.status();
        let body = response.text().await.unwrap_or_default();
        refusals.push(format!("{name} answered {status}: {body}"));
    }
    bail!("no replica served it ({})", refusals.join("; "))
}

/// Copies a shard's stream into `file`; the slot range its end frame names.
async fn stream_shard(
    mut response: reqwest::Response,
    url: &str,
    file: &mut std::fs::File,
    writer: &mut Writer,
) -> anyhow::Result<(u16, u16)> {
    let mut reader = FrameReader::new();
    let mut seen = 0u64;
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| anyhow!("GET {url}: {}", root_cause(&e)))?
    {
        reader.push(&chunk);
        while let Some((frame, raw)) = reader.next_frame()? {
            match frame {
                Frame::Entry(_)
                | Frame::Hash(_)
                | Frame::Set(_)
                | Frame::List(_)
                | Frame::SortedSet(_) => {
                    file.write_all(&writer.entry_bytes(&raw))?;
                    seen += 1;
                }
                Frame::ShardEnd {
                    entries,
                    first_slot,
                    last_slot,
                } if entries == seen => return Ok((first_slot, last_slot)),
                Frame::ShardEnd { entries, .. } => {
                    bail!("{url} counted {entries} keys and sent {seen}")
                }
                Frame::End { .. } => bail!("{url} sent a file's end mark"),
            }
        }
    }
    bail!("{url} ended after {seen} keys without its end mark")
}

/// What checking a backup file found.
struct Checked {
    entries: u64,
    longest_key: usize,
    largest_value: usize,
}

/// Reads `path` whole and checks it.
fn verify(path: &Path) -> anyhow::Result<Checked> {
    let mut file =
        std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut verifier = Verifier::new();
    let (mut longest_key, mut largest_value) = (0, 0);
    let mut buf = vec![0u8; RESTORE_PIECE];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        verifier.feed(&buf[..n], |frame| match frame {
            Frame::Entry(entry) => {
                longest_key = longest_key.max(entry.key.len());
                largest_value = largest_value.max(entry.value.len());
            }
            Frame::Hash(hash) => {
                // A field is limited as a key is.
                longest_key = longest_key.max(hash.key.len());
                for (field, value) in &hash.fields {
                    longest_key = longest_key.max(field.len());
                    largest_value = largest_value.max(value.len());
                }
            }
            Frame::Set(set) => {
                longest_key = longest_key.max(set.key.len());
                for member in &set.members {
                    longest_key = longest_key.max(member.len());
                }
            }
            Frame::List(list) => {
                longest_key = longest_key.max(list.key.len());
                for element in &list.elements {
                    largest_value = largest_value.max(element.len());
                }
            }
            Frame::SortedSet(sorted) => {
                longest_key = longest_key.max(sorted.key.len());
                for (member, _) in &sorted.members {
                    longest_key = longest_key.max(member.len());
                }
            }
            Frame::End { .. } | Frame::ShardEnd { .. } => {}
        });
    }
    let entries = verifier
        .finish()
        .map_err(|e| anyhow!("refusing {}: {e}; nothing was written", path.display()))?;
    Ok(Checked {
        entries,
        longest_key,
        largest_value,
    })
}

async fn restore(args: &RestoreArgs) -> anyhow::Result<()> {
    let checked = verify(&args.file)?;
    let total = checked.entries;
    let base = normalize_target(&args.target)?;
    let client = http_client(Duration::from_secs(120))?;
    let mut file = std::fs::File::open(&args.file)?;
    file.seek(std::io::SeekFrom::Start(MAGIC.len() as u64))?;
    let mut reader = FrameReader::new();
    let mut piece = Vec::with_capacity(RESTORE_PIECE);
    let mut buf = vec![0u8; RESTORE_PIECE];
    // An empty first piece: the target checks that it holds no key and takes keys and
    // values this large, and nothing is written.
    let first = format!(
        "first&max_key={}&max_value={}",
        checked.longest_key, checked.largest_value
    );
    send_piece(&client, &base, &[], Some(&first)).await?;
    let mut written = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        reader.push(&buf[..n]);
        while let Some((frame, raw)) = reader.next_frame()? {
            if !frame.is_entry() {
                continue;
            }
            // A piece stays within a request body: it goes before the entry that would
            // take it past the size (one entry alone always fits, as values are limited).
            if !piece.is_empty() && piece.len() + raw.len() > RESTORE_PIECE {
                written += send_piece(&client, &base, &piece, None).await?;
                piece.clear();
            }
            piece.extend_from_slice(&raw);
        }
        if n == 0 {
            break;
        }
    }
    if !piece.is_empty() {
        written += send_piece(&client, &base, &piece, None).await?;
    }
    println!(
        "restored {written} of {total} entries from {} into {base} ({} had expired)",
        args.file.display(),
        total - written
    );
    Ok(())
}

/// Sends one piece of entries (with a `first` query, an empty one that only checks the
/// target); the number written.
async fn send_piece(
    client: &reqwest::Client,
    base: &str,
    piece: &[u8],
    query: Option<&str>,
) -> anyhow::Result<u64> {
    let url = match query {
        Some(query) => format!("{base}/v1/backup/restore?{query}"),
        None => format!("{base}/v1/backup/restore"),
    };
    let mut attempt = 0;
    loop {
        attempt += 1;
        let sent = client.post(&url).body(piece.to_vec()).send().await;
        let failure = match sent {
            Ok(response) if response.status().is_success() => {
                let answer: trireme_types::admin::RestoreAnswer = response
                    .json()
                    .await
                    .map_err(|e| anyhow!("POST {url}: unexpected answer: {}", root_cause(&e)))?;
                return Ok(answer.written);
            }
            // Refused for what it is (a cluster that is not empty, a key over the limits):
            // trying again changes nothing.
            Ok(response) if response.status().is_client_error() => {
                let status = response.status();
                let body = response.text().await.unwrap_or_default();
                bail!("POST {url} answered {status}: {body}");
            }
            Ok(response) => format!("answered {}", response.status()),
            Err(e) => root_cause(&e),
        };
        if attempt >= PIECE_ATTEMPTS {
            bail!("POST {url}: {failure}");
        }
        eprintln!("POST {url}: {failure}; trying again");
        tokio::time::sleep(RETRY_PAUSE).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_slot_must_be_covered_exactly_once() {
        let last = SLOT_COUNT - 1;
        assert!(check_coverage(vec![(8192, last), (0, 8191)]).is_ok());
        assert!(check_coverage(vec![(0, last)]).is_ok());
        // A parent read after its split, its child missing from the map: a gap.
        assert!(check_coverage(vec![(0, 4095), (8192, last)]).is_err());
        // A parent read before its split and its child too: slots twice.
        assert!(check_coverage(vec![(0, last), (8192, last)]).is_err());
        assert!(check_coverage(vec![(0, 100)]).is_err());
        assert!(check_coverage(vec![]).is_err());
    }
}
