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
use trireme_types::backup::{Frame, FrameReader, MAGIC, Verifier, Writer};
use trireme_types::cluster_status::ClusterStatus;

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

/// The shards' slot ranges, to notice a split during a backup.
fn shape(status: &ClusterStatus) -> Vec<(u32, [u16; 2])> {
    let mut shape: Vec<_> = status.shards.iter().map(|s| (s.shard, s.slots)).collect();
    shape.sort_unstable();
    shape
}

async fn backup(args: &BackupArgs) -> anyhow::Result<()> {
    let status = fetch_status(&args.target).await?;
    let before = shape(&status);
    let partial = args.out.with_extension("partial");
    let mut file = std::fs::File::create(&partial)
        .with_context(|| format!("cannot create {}", partial.display()))?;
    let mut writer = Writer::new();
    file.write_all(&writer.start())?;
    let client = http_client(Duration::from_secs(600))?;
    for &(shard, _) in &before {
        // Where the file and the checksum stood before this shard: a failed try is undone.
        let mark = (file.stream_position()?, writer.clone());
        let mut attempt = 0;
        loop {
            attempt += 1;
            match backup_shard(&client, &args.target, shard, &mut file, &mut writer).await {
                Ok(()) => break,
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
    if shape(&fetch_status(&args.target).await?) != before {
        let _ = std::fs::remove_file(&partial);
        bail!("a shard split while the backup ran, so keys may have been missed: run it again");
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
        "backed up {entries} keys from {} shards to {} ({bytes} bytes)",
        before.len(),
        args.out.display()
    );
    Ok(())
}

/// Appends one shard's entries, as its leader streams them, to `file`.
async fn backup_shard(
    client: &reqwest::Client,
    target: &str,
    shard: u32,
    file: &mut std::fs::File,
    writer: &mut Writer,
) -> anyhow::Result<()> {
    // Asked afresh on every try: the leader may have changed.
    let status = fetch_status(target).await?;
    let leader = status
        .shards
        .iter()
        .find(|s| s.shard == shard)
        .and_then(|s| s.leader.clone())
        .ok_or_else(|| anyhow!("no leader known"))?;
    let http = status
        .nodes
        .iter()
        .find(|n| n.name == leader)
        .map(|n| n.http.clone())
        .ok_or_else(|| anyhow!("no address known for its leader {leader}"))?;
    let url = format!("{}/v1/backup/shard/{shard}", normalize_target(&http)?);
    let mut response = client
        .get(&url)
        .send()
        .await
        .map_err(|e| anyhow!("GET {url}: {}", root_cause(&e)))?;
    if !response.status().is_success() {
        let status = response.status();
        let body = response.text().await.unwrap_or_default();
        bail!("GET {url} answered {status}: {body}");
    }
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
                Frame::Entry(_) => {
                    file.write_all(&writer.entry_bytes(&raw))?;
                    seen += 1;
                }
                Frame::End { entries, .. } if entries == seen => return Ok(()),
                Frame::End { entries, .. } => {
                    bail!("{url} counted {entries} keys and sent {seen}")
                }
            }
        }
    }
    bail!("{url} ended after {seen} keys without its end mark")
}

/// Reads `path` whole and checks it; the number of entries.
fn verify(path: &Path) -> anyhow::Result<u64> {
    let mut file =
        std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut verifier = Verifier::new();
    let mut buf = vec![0u8; RESTORE_PIECE];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        verifier.feed(&buf[..n], |_| {});
    }
    verifier
        .finish()
        .map_err(|e| anyhow!("refusing {}: {e}; nothing was written", path.display()))
}

async fn restore(args: &RestoreArgs) -> anyhow::Result<()> {
    let total = verify(&args.file)?;
    let base = normalize_target(&args.target)?;
    let client = http_client(Duration::from_secs(120))?;
    let mut file = std::fs::File::open(&args.file)?;
    file.seek(std::io::SeekFrom::Start(MAGIC.len() as u64))?;
    let mut reader = FrameReader::new();
    let mut piece = Vec::with_capacity(RESTORE_PIECE);
    let mut buf = vec![0u8; RESTORE_PIECE];
    // An empty first piece: the target checks that it holds no key, and nothing is written.
    send_piece(&client, &base, &[], true).await?;
    let mut written = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        reader.push(&buf[..n]);
        while let Some((frame, raw)) = reader.next_frame()? {
            let Frame::Entry(_) = frame else { continue };
            // A piece stays within a request body: it goes before the entry that would
            // take it past the size (one entry alone always fits, as values are limited).
            if !piece.is_empty() && piece.len() + raw.len() > RESTORE_PIECE {
                written += send_piece(&client, &base, &piece, false).await?;
                piece.clear();
            }
            piece.extend_from_slice(&raw);
        }
        if n == 0 {
            break;
        }
    }
    if !piece.is_empty() {
        written += send_piece(&client, &base, &piece, false).await?;
    }
    println!(
        "restored {written} of {total} keys from {} into {base} ({} had expired)",
        args.file.display(),
        total - written
    );
    Ok(())
}

/// Sends one piece of entries (with `first`, an empty one that only checks the target is
/// empty); the number written.
async fn send_piece(
    client: &reqwest::Client,
    base: &str,
    piece: &[u8],
    first: bool,
) -> anyhow::Result<u64> {
    let url = format!(
        "{base}/v1/backup/restore{}",
        if first { "?first" } else { "" }
    );
    let mut attempt = 0;
    loop {
        attempt += 1;
        let sent = client.post(&url).body(piece.to_vec()).send().await;
        let failure = match sent {
            Ok(response) if response.status().is_success() => {
                let answer: serde_json::Value = response
                    .json()
                    .await
                    .map_err(|e| anyhow!("POST {url}: unexpected answer: {}", root_cause(&e)))?;
                return answer["written"]
                    .as_u64()
                    .ok_or_else(|| anyhow!("POST {url}: unexpected answer {answer}"));
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
