//! The backup format: what `trireme backup` writes and `trireme restore` reads, and what a
//! node streams for one shard.
//!
//! A backup is logical, not a copy of the shards: one [`BackupEntry`] per live key (value,
//! flags, expiry), so it restores into a cluster of any shape, the keys routed anew. A file
//! is the [`MAGIC`] line, then frames, each a length (u32, little-endian) and a postcard body:
//! [`Frame::Entry`] for every key, and one [`Frame::End`] last, with the number of entries
//! and the xxh3 checksum of every byte before it. A file without its end, or whose count or
//! checksum disagrees, is refused whole, before anything is written.

use bytes::{Bytes, BytesMut};
use serde::{Deserialize, Serialize};

/// First bytes of a backup file.
pub const MAGIC: &[u8; 16] = b"TRIREME-BACKUP1\n";

/// The largest frame a reader accepts: an entry is a key and a value within the limits.
pub const MAX_FRAME: usize = 80 << 20;

/// One key as backed up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupEntry {
    /// The key.
    pub key: Bytes,
    /// The value.
    pub value: Bytes,
    /// Consul's flags.
    pub flags: u64,
    /// When the key expires, Unix milliseconds.
    pub expires_at_ms: Option<u64>,
}

/// Fields of one Redis hash as backed up. A large hash is cut into several of these, each
/// restored by adding its fields to the hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HashEntry {
    /// The hash's key.
    pub key: Bytes,
    /// Field-value pairs.
    pub fields: Vec<(Bytes, Bytes)>,
    /// When the hash expires, Unix milliseconds.
    pub expires_at_ms: Option<u64>,
}

/// Members of one Redis set as backed up; a large set is cut into several of these, as a
/// hash is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetEntry {
    /// The set's key.
    pub key: Bytes,
    /// Members.
    pub members: Vec<Bytes>,
    /// When the set expires, Unix milliseconds.
    pub expires_at_ms: Option<u64>,
}

/// Elements of one Redis list as backed up, in order; a long list is cut into several of
/// these, each restored by appending it if the list holds the elements before it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListEntry {
    /// The list's key.
    pub key: Bytes,
    /// The index of the first element of this part.
    pub from: u64,
    /// Elements, head first.
    pub elements: Vec<Bytes>,
    /// When the list expires, Unix milliseconds.
    pub expires_at_ms: Option<u64>,
}

/// Members of one Redis sorted set with their scores, as backed up; a large one is cut into
/// several of these, as a hash is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SortedSetEntry {
    /// The sorted set's key.
    pub key: Bytes,
    /// Members and their scores.
    pub members: Vec<(Bytes, crate::Score)>,
    /// When the sorted set expires, Unix milliseconds.
    pub expires_at_ms: Option<u64>,
}

/// Bytes of fields and values one [`HashEntry`] (or members one [`SetEntry`], elements one
/// [`ListEntry`]) carries at most (a single larger field
/// travels alone), so that it fits in one restore request.
pub const HASH_ENTRY_BYTES: usize = 256 << 10;

/// One frame of a backup file or of a shard's stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Frame {
    /// A key.
    Entry(BackupEntry),
    /// The end of a file: how many entries came before it, and the xxh3 of every byte
    /// before this frame, the magic line included.
    End {
        /// Entries before it.
        entries: u64,
        /// The checksum.
        checksum: u64,
    },
    /// The end of one shard's stream: how many entries it sent, and the inclusive slot range
    /// they are the keys of (read from the same snapshot), so that the backup can check its
    /// shards covered every slot once even if one was splitting.
    ShardEnd {
        /// Entries before it.
        entries: u64,
        /// First slot of the range.
        first_slot: u16,
        /// Last slot of the range.
        last_slot: u16,
    },
    /// A Redis hash, or a part of one. Counts as an entry in the end frames.
    Hash(HashEntry),
    /// A Redis set, or a part of one. Counts as an entry in the end frames.
    Set(SetEntry),
    /// A Redis list, or a part of one. Counts as an entry in the end frames.
    List(ListEntry),
    /// A Redis sorted set, or a part of one. Counts as an entry in the end frames.
    SortedSet(SortedSetEntry),
}

impl Frame {
    /// Whether the frame carries data (a key, or a part of a collection), as opposed to an
    /// end mark: what the end frames count.
    pub fn is_entry(&self) -> bool {
        !matches!(self, Frame::End { .. } | Frame::ShardEnd { .. })
    }
}

/// Why a backup cannot be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BackupError {
    /// Not a backup file (no magic line).
    #[error("not a Trireme backup (it does not start with the backup header)")]
    NotABackup,
    /// The data ends before its end frame.
    #[error("the backup is truncated: it ends after {0} entries, without its end mark")]
    Truncated(u64),
    /// A frame does not decode, or is too long.
    #[error("the backup is damaged: frame {frame} does not decode ({reason})")]
    Damaged {
        /// Which frame, from 0.
        frame: u64,
        /// What is wrong.
        reason: String,
    },
    /// The count or the checksum in the end frame disagrees with the data.
    #[error("the backup is damaged: {0}")]
    Mismatch(String),
    /// Bytes after the end frame.
    #[error("the backup has data after its end mark")]
    TrailingData,
}

/// Appends `frame`, with its length, to `out`.
#[must_use]
pub fn encode_frame(frame: &Frame) -> Vec<u8> {
    // Encoding plain data into a Vec cannot fail.
    let body = postcard::to_stdvec(frame).unwrap_or_default();
    let mut out = Vec::with_capacity(body.len() + 4);
    out.extend_from_slice(&u32::try_from(body.len()).unwrap_or(u32::MAX).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

/// Splits frames off the front of a byte stream as they arrive.
#[derive(Debug, Default)]
pub struct FrameReader {
    buf: BytesMut,
    frames: u64,
}

impl FrameReader {
    /// A reader with nothing buffered.
    #[must_use]
    pub fn new() -> Self {
        FrameReader::default()
    }

    /// Adds bytes that arrived.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next whole frame and its encoded bytes (length included), if one has arrived.
    pub fn next_frame(&mut self) -> Result<Option<(Frame, Bytes)>, BackupError> {
        if self.buf.len() < 4 {
            return Ok(None);
        }
        let mut len = [0u8; 4];
        len.copy_from_slice(&self.buf[..4]);
        let len = u32::from_le_bytes(len) as usize;
        if len > MAX_FRAME {
            return Err(BackupError::Damaged {
                frame: self.frames,
                reason: format!("a length of {len} bytes"),
            });
        }
        if self.buf.len() < 4 + len {
            return Ok(None);
        }
        // Taken off the front without moving what follows.
        let raw = self.buf.split_to(4 + len).freeze();
        let frame = postcard::from_bytes(&raw[4..]).map_err(|e| BackupError::Damaged {
            frame: self.frames,
            reason: e.to_string(),
        })?;
        self.frames += 1;
        Ok(Some((frame, raw)))
    }

    /// Whether bytes that make no whole frame are left.
    #[must_use]
    pub fn has_partial(&self) -> bool {
        !self.buf.is_empty()
    }
}

/// Checks a whole backup read in pieces: feed it everything, then [`Verifier::finish`].
pub struct Verifier {
    reader: FrameReader,
    hasher: xxhash_rust::xxh3::Xxh3,
    magic: Vec<u8>,
    entries: u64,
    ended: bool,
    error: Option<BackupError>,
}

impl Default for Verifier {
    fn default() -> Self {
        Self::new()
    }
}

impl Verifier {
    /// A verifier at the start of a file.
    #[must_use]
    pub fn new() -> Self {
        Verifier {
            reader: FrameReader::new(),
            hasher: xxhash_rust::xxh3::Xxh3::new(),
            magic: Vec::new(),
            entries: 0,
            ended: false,
            error: None,
        }
    }

    /// Feeds the next bytes of the file; calls `entry` for each entry found.
    pub fn feed(&mut self, mut bytes: &[u8], mut entry: impl FnMut(&Frame)) {
        if self.error.is_some() {
            return;
        }
        if self.magic.len() < MAGIC.len() {
            let take = (MAGIC.len() - self.magic.len()).min(bytes.len());
            self.magic.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
            if !MAGIC.starts_with(&self.magic) {
                self.error = Some(BackupError::NotABackup);
                return;
            }
            self.hasher.update(&self.magic[self.magic.len() - take..]);
        }
        self.reader.push(bytes);
        loop {
            match self.reader.next_frame() {
                Ok(None) => return,
                Ok(Some(_)) if self.ended => {
                    self.error = Some(BackupError::TrailingData);
                    return;
                }
                Ok(Some((
                    frame @ (Frame::Entry(_)
                    | Frame::Hash(_)
                    | Frame::Set(_)
                    | Frame::List(_)
                    | Frame::SortedSet(_)),
                    raw,
                ))) => {
                    self.hasher.update(&raw);
                    self.entries += 1;
                    entry(&frame);
                }
                Ok(Some((Frame::ShardEnd { .. }, _))) => {
                    self.error = Some(BackupError::Damaged {
                        frame: self.entries,
                        reason: "a shard's end mark inside a file".into(),
                    });
                    return;
                }
                Ok(Some((Frame::End { entries, checksum }, _))) => {
                    let sum = self.hasher.digest();
                    if entries != self.entries {
                        self.error = Some(BackupError::Mismatch(format!(
                            "its end mark counts {entries} entries, the file holds {}",
                            self.entries
                        )));
                    } else if checksum != sum {
                        self.error = Some(BackupError::Mismatch(format!(
                            "checksum {checksum:016x} in its end mark, {sum:016x} computed"
                        )));
                    }
                    self.ended = true;
                }
                Err(e) => {
                    self.error = Some(e);
                    return;
                }
            }
        }
    }

    /// The verdict once the whole file was fed: the number of entries, or why it is refused.
    pub fn finish(self) -> Result<u64, BackupError> {
        if let Some(e) = self.error {
            return Err(e);
        }
        if self.magic.len() < MAGIC.len() {
            return Err(BackupError::NotABackup);
        }
        if !self.ended || self.reader.has_partial() {
            return Err(BackupError::Truncated(self.entries));
        }
        Ok(self.entries)
    }
}

/// Writes a backup file piece by piece: the magic line, entries, the end frame. A clone
/// remembers where a file stood, to undo a shard whose stream failed.
#[derive(Clone)]
pub struct Writer {
    hasher: xxhash_rust::xxh3::Xxh3,
    entries: u64,
}

impl Default for Writer {
    fn default() -> Self {
        Self::new()
    }
}

impl Writer {
    /// A writer; [`Writer::start`] gives the first bytes.
    #[must_use]
    pub fn new() -> Self {
        Writer {
            hasher: xxhash_rust::xxh3::Xxh3::new(),
            entries: 0,
        }
    }

    /// The magic line.
    pub fn start(&mut self) -> Vec<u8> {
        self.hasher.update(MAGIC);
        MAGIC.to_vec()
    }

    /// One entry frame, already encoded (as a shard's stream carries it).
    pub fn entry_bytes(&mut self, raw: &[u8]) -> Vec<u8> {
        self.hasher.update(raw);
        self.entries += 1;
        raw.to_vec()
    }

    /// The end frame.
    #[must_use]
    pub fn end(self) -> Vec<u8> {
        encode_frame(&Frame::End {
            entries: self.entries,
            checksum: self.hasher.digest(),
        })
    }

    /// Entries written so far.
    #[must_use]
    pub fn entries(&self) -> u64 {
        self.entries
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(i: u32) -> BackupEntry {
        BackupEntry {
            key: Bytes::from(format!("k{i}")),
            value: Bytes::from(vec![b'v'; i as usize]),
            flags: u64::from(i),
            expires_at_ms: i.is_multiple_of(2).then_some(1_000 + u64::from(i)),
        }
    }

    /// A file of `n` entries, and where its end frame starts.
    fn file_with_end(n: u32) -> (Vec<u8>, usize) {
        let mut w = Writer::new();
        let mut out = w.start();
        for i in 0..n {
            out.extend(w.entry_bytes(&encode_frame(&Frame::Entry(entry(i)))));
        }
        let end = out.len();
        out.extend(w.end());
        (out, end)
    }

    fn file(n: u32) -> Vec<u8> {
        file_with_end(n).0
    }

    fn verify(bytes: &[u8], piece: usize) -> (Result<u64, BackupError>, Vec<BackupEntry>) {
        let mut v = Verifier::new();
        let mut seen = Vec::new();
        for chunk in bytes.chunks(piece.max(1)) {
            v.feed(chunk, |frame| match frame {
                Frame::Entry(e) => seen.push(e.clone()),
                other => panic!("not an entry: {other:?}"),
            });
        }
        (v.finish(), seen)
    }

    #[test]
    fn a_file_reads_back_in_pieces_of_any_size() {
        let bytes = file(50);
        for piece in [1, 3, 16, 17, 1000, bytes.len()] {
            let (verdict, seen) = verify(&bytes, piece);
            assert_eq!(verdict, Ok(50), "pieces of {piece}");
            assert_eq!(seen, (0..50).map(entry).collect::<Vec<_>>());
        }
        assert_eq!(verify(&file(0), 7).0, Ok(0));
    }

    #[test]
    fn damage_and_truncation_are_refused() {
        let bytes = file(20);
        // Cut anywhere: truncated or not a backup, never accepted.
        for cut in [0, 5, MAGIC.len(), MAGIC.len() + 3, bytes.len() - 1] {
            assert!(verify(&bytes[..cut], 4).0.is_err(), "cut at {cut}");
        }
        let (_, end) = file_with_end(20);
        assert_eq!(verify(&bytes[..end], 64).0, Err(BackupError::Truncated(20)));
        // Every single flipped byte is caught.
        for at in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[at] ^= 0x40;
            assert!(verify(&bad, 64).0.is_err(), "flipped byte {at}");
        }
        let mut longer = bytes.clone();
        longer.extend(encode_frame(&Frame::Entry(entry(1))));
        assert_eq!(verify(&longer, 64).0, Err(BackupError::TrailingData));
        assert_eq!(
            verify(b"hello world, not a backup", 64).0,
            Err(BackupError::NotABackup)
        );
    }
}
