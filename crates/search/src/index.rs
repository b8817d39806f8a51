//! The node's search index: one tantivy index in its own directory, with one document per
//! stored JSON object of every shard replica the node holds, each marked with its shard.
//! (One index per shard replica made one writer, one commit and one stream of small segments
//! to merge per replica: with 16 replicas per node, merging them took most of the machine.)
//!
//! A document of the index holds its key (to delete or replace it, and to find the record a
//! result names), its shard, the collection (the key up to its first `/`), the key's slot (so that a
//! replica that has not yet applied a split answers only for the slots the sender routes to
//! it), the record's `ModifyIndex` (to compare with the shard's rows when the index is checked
//! after a restart), the JSON object itself (every path, typed: words of strings, numbers,
//! booleans, and strings that read as dates once more as dates). A term without a field is
//! asked of every path that holds strings: the paths are read from each segment's word list
//! once and kept (indexing every string a second time, in one field for such terms, cost a
//! fifth of the throughput of a write-heavy mix).

use crate::ast::{IndexNumber, MAX_WORD_BYTES, parse_date};
use crate::compile::compile;
use crate::sort::{
    SORT_FIELD, SortKey, SortValue, TopMatches, check_one_type, compare_sort_values, sort_text,
};
use crate::{FieldPath, Query, SearchError};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};
use tantivy::collector::Count;
use tantivy::directory::MmapDirectory;
use tantivy::index::SegmentId;
use tantivy::query::{BooleanQuery, ConstScoreQuery, Occur, RangeQuery, TermQuery};
use tantivy::schema::Value as _;
use tantivy::schema::{
    FAST, Field, INDEXED, IndexRecordOption, JsonObjectOptions, OwnedValue, STORED, Schema,
    TextFieldIndexing, Type,
};
use tantivy::store::Compressor;
use tantivy::tokenizer::{LowerCaser, RemoveLongFilter, SimpleTokenizer, TextAnalyzer};
use tantivy::{
    DateTime, Index, IndexReader, IndexSettings, IndexWriter, ReloadPolicy, Searcher,
    SegmentReader, TantivyDocument, Term,
};
use trireme_types::ShardId;

/// The tokenizer every text of the index goes through: [`crate::words`], as tantivy parts.
pub(crate) const TOKENIZER: &str = "trireme_words";

/// Memory the writer may fill before it writes a segment.
const WRITER_MEMORY_BYTES: usize = 64_000_000;

/// The fields of the schema.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fields {
    pub key: Field,
    pub shard: Field,
    pub collection: Field,
    pub slot: Field,
    pub modify_index: Field,
    pub doc: Field,
    /// The document's scalar values again, as columns, for sorting (see [`crate::sort`]).
    pub sort: Field,
}

fn schema() -> (Schema, Fields) {
    let mut builder = Schema::builder();
    let words = TextFieldIndexing::default()
        .set_tokenizer(TOKENIZER)
        .set_index_option(IndexRecordOption::WithFreqsAndPositions);
    // Indexed to delete by key, fast for its order within a segment, stored to read the keys
    // of a page's results back (small uncompressed store blocks: one key costs a short read).
    let key = builder.add_bytes_field("key", INDEXED | FAST | STORED);
    let shard = builder.add_u64_field("shard", INDEXED | FAST);
    let collection = builder.add_bytes_field("collection", INDEXED);
    let slot = builder.add_u64_field("slot", INDEXED | FAST);
    let modify_index = builder.add_u64_field("ref", FAST);
    let doc = builder.add_json_field(
        "doc",
        JsonObjectOptions::default().set_indexing_options(words),
    );
    let sort = builder.add_json_field(SORT_FIELD, JsonObjectOptions::default().set_fast("raw"));
    (
        builder.build(),
        Fields {
            key,
            shard,
            collection,
            slot,
            modify_index,
            doc,
            sort,
        },
    )
}

/// Opens the index in `dir`, or creates it with this schema and settings.
fn create(dir: MmapDirectory, schema: Schema) -> tantivy::Result<Index> {
    let settings = IndexSettings {
        docstore_compression: Compressor::None,
        docstore_blocksize: 4096,
        ..IndexSettings::default()
    };
    Index::builder()
        .schema(schema)
        .settings(settings)
        .open_or_create(dir)
}

fn analyzer() -> TextAnalyzer {
    TextAnalyzer::builder(SimpleTokenizer::default())
        .filter(LowerCaser)
        .filter(RemoveLongFilter::limit(MAX_WORD_BYTES + 1))
        .build()
}

/// What [`Searchable::search`] returns: how many documents match, and the best ones.
#[derive(Debug, Clone, Default)]
pub struct Hits {
    /// Every match in the shard (within the slots asked for).
    pub total: u64,
    /// The first matches, best first: by relevance, or by the sort asked for.
    pub top: Vec<Hit>,
}

/// One match as a shard reports it: enough to merge it with other shards' and find its record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hit {
    /// The document's key (`collection/key`).
    pub key: Bytes,
    /// Relevance (BM25 over this node's index); higher is better.
    pub score: f32,
    /// The document's value for each field sorted by; empty when sorting by relevance.
    pub sort: Vec<SortValue>,
}

impl Hit {
    /// The order pages are cut in: by `sort` when given (then key), else by score (highest
    /// first, then key).
    pub fn order(&self, other: &Hit, sort: &[SortKey]) -> std::cmp::Ordering {
        let first = if sort.is_empty() {
            other.score.total_cmp(&self.score)
        } else {
            compare_sort_values(&self.sort, &other.sort, sort)
        };
        first.then_with(|| self.key.cmp(&other.key))
    }
}

/// A document to index: a stored JSON object and where it lives.
#[derive(Debug)]
pub(crate) struct Indexable<'a> {
    pub shard: ShardId,
    pub key: &'a [u8],
    pub slot: u16,
    pub modify_index: u64,
    pub object: serde_json::Map<String, serde_json::Value>,
}

/// The node's index: the writer (used by the indexer thread alone) and the reader searches
/// go through.
pub(crate) struct NodeIndex {
    dir: std::path::PathBuf,
    /// Shared by every [`Searchable`] made from this index: segments outlive commits.
    string_paths: Arc<Mutex<HashMap<SegmentId, Arc<Vec<FieldPath>>>>>,
    writer: IndexWriter,
    reader: IndexReader,
    fields: Fields,
}

impl NodeIndex {
    /// Opens the index in `dir`, or creates an empty one; an index that cannot be opened
    /// (damaged, or from another schema) is thrown away and created empty: the shard's rows
    /// rebuild it.
    pub(crate) fn open(dir: &Path) -> Result<Self, SearchError> {
        let (schema, fields) = schema();
        std::fs::create_dir_all(dir).map_err(tantivy::TantivyError::from)?;
        let opened = MmapDirectory::open(dir)
            .map_err(tantivy::TantivyError::from)
            .and_then(|d| create(d, schema.clone()));
        let index = match opened {
            Ok(index) => index,
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "search index unreadable; rebuilding it");
                let _ = std::fs::remove_dir_all(dir);
                std::fs::create_dir_all(dir).map_err(tantivy::TantivyError::from)?;
                create(
                    MmapDirectory::open(dir).map_err(tantivy::TantivyError::from)?,
                    schema,
                )?
            }
        };
        index.tokenizers().register(TOKENIZER, analyzer());
        let writer = index.writer_with_num_threads(1, WRITER_MEMORY_BYTES)?;
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()?;
        Ok(Self {
            dir: dir.to_path_buf(),
            string_paths: Arc::default(),
            writer,
            reader,
            fields,
        })
    }

    /// Removes the document at `key`, if indexed.
    pub(crate) fn remove(&mut self, key: &[u8]) {
        self.writer
            .delete_term(Term::from_field_bytes(self.fields.key, key));
    }

    /// Indexes `doc`, replacing whatever was indexed at its key.
    pub(crate) fn put(&mut self, doc: Indexable<'_>) -> Result<(), SearchError> {
        self.remove(doc.key);
        let f = self.fields;
        let mut out = TantivyDocument::new();
        out.add_bytes(f.key, doc.key);
        out.add_u64(f.shard, u64::from(doc.shard.0));
        let collection = doc.key.split(|b| *b == b'/').next().unwrap_or_default();
        out.add_bytes(f.collection, collection);
        out.add_u64(f.slot, u64::from(doc.slot));
        out.add_u64(f.modify_index, doc.modify_index);
        out.add_object(f.sort, sortable_object(&doc.object));
        let object = doc
            .object
            .into_iter()
            .map(|(k, v)| (k, typed(v)))
            .collect::<BTreeMap<_, _>>();
        out.add_object(f.doc, object);
        self.writer.add_document(out)?;
        Ok(())
    }

    /// Makes what was put and removed so far visible to searches.
    pub(crate) fn commit(&mut self) -> Result<(), SearchError> {
        self.writer.commit()?;
        self.reader.reload()?;
        Ok(())
    }

    /// Removes every document of `shard`.
    pub(crate) fn remove_shard(&mut self, shard: ShardId) {
        self.writer
            .delete_term(Term::from_field_u64(self.fields.shard, u64::from(shard.0)));
    }

    /// Every indexed key of `shard` with the `ModifyIndex` it was indexed at, as of the last
    /// commit. Walks the shard's postings, not every document of the node.
    pub(crate) fn indexed(&self, shard: ShardId) -> Result<Vec<(Vec<u8>, u64)>, SearchError> {
        use tantivy::{DocSet as _, TERMINATED};
        let searcher = self.reader.searcher();
        let term = Term::from_field_u64(self.fields.shard, u64::from(shard.0));
        let mut out = Vec::new();
        for segment in searcher.segment_readers() {
            let fast = segment.fast_fields();
            let Some(keys) = fast.bytes("key")? else {
                continue;
            };
            let refs = fast.u64("ref")?;
            let Some(mut postings) = segment
                .inverted_index(self.fields.shard)?
                .read_postings(&term, IndexRecordOption::Basic)
                .map_err(tantivy::TantivyError::from)?
            else {
                continue;
            };
            let alive = segment.alive_bitset();
            let mut doc = postings.doc();
            while doc != TERMINATED {
                if !alive.is_some_and(|a| a.is_deleted(doc)) {
                    let mut key = Vec::new();
                    if let Some(ord) = keys.term_ords(doc).next() {
                        keys.ord_to_bytes(ord, &mut key)
                            .map_err(tantivy::TantivyError::from)?;
                    }
                    out.push((key, refs.first(doc).unwrap_or_default()));
                }
                doc = postings.advance();
            }
        }
        Ok(out)
    }

    /// The index's files' size in bytes, and its live documents.
    pub(crate) fn usage(&self) -> (u64, u64) {
        let searcher = self.reader.searcher();
        let docs = searcher.num_docs();
        let bytes = std::fs::read_dir(&self.dir)
            .map(|entries| {
                entries
                    .filter_map(|e| e.ok()?.metadata().ok())
                    .filter(|m| m.is_file())
                    .map(|m| m.len())
                    .sum()
            })
            .unwrap_or(0);
        (bytes, docs)
    }

    /// The side of the index searches use, for other threads.
    pub(crate) fn searchable(&self) -> Searchable {
        Searchable {
            reader: self.reader.clone(),
            fields: self.fields,
            string_paths: self.string_paths.clone(),
        }
    }
}

/// What searches need of a shard's index: its reader (which sees the last commit).
#[derive(Clone)]
pub(crate) struct Searchable {
    reader: IndexReader,
    fields: Fields,
    /// The paths that hold strings in each segment, as read from its word list.
    string_paths: Arc<Mutex<HashMap<SegmentId, Arc<Vec<FieldPath>>>>>,
}

impl Searchable {
    /// The documents of `shard` and `collection` matching `query`, within `slots` when
    /// given: how many, and the best `want` by relevance or, when `sort` names fields, by
    /// their values.
    pub(crate) fn search(
        &self,
        shard: ShardId,
        collection: &[u8],
        query: &Query,
        slots: Option<(u16, u16)>,
        want: usize,
        sort: &[SortKey],
    ) -> Result<Hits, SearchError> {
        let f = self.fields;
        let searcher = self.reader.searcher();
        let paths = if needs_string_paths(query) {
            self.string_paths(&searcher)?
        } else {
            Vec::new()
        };
        // The collection, shard and slot filters add nothing to the relevance.
        let filter = |query: Box<dyn tantivy::query::Query>| {
            (
                Occur::Must,
                Box::new(ConstScoreQuery::new(query, 0.0)) as Box<dyn tantivy::query::Query>,
            )
        };
        let term = |term| Box::new(TermQuery::new(term, IndexRecordOption::Basic));
        let mut clauses = vec![
            filter(term(Term::from_field_bytes(f.collection, collection))),
            (Occur::Must, compile(query, &f, &paths)),
            filter(term(Term::from_field_u64(f.shard, u64::from(shard.0)))),
        ];
        if let Some((low, high)) = slots {
            clauses.push(filter(Box::new(RangeQuery::new(
                std::ops::Bound::Included(Term::from_field_u64(f.slot, u64::from(low))),
                std::ops::Bound::Included(Term::from_field_u64(f.slot, u64::from(high))),
            ))));
        }
        let query = BooleanQuery::new(clauses);
        let collector = TopMatches {
            keys: sort.to_vec(),
            want,
        };
        let (candidates, total) = searcher.search(&query, &(collector, Count))?;
        let candidates = candidates.map_err(SearchError::Refused)?;
        // Each segment's best, with their keys read from the store, merged.
        let mut out = Vec::with_capacity(candidates.len());
        for found in candidates {
            let doc: TantivyDocument = searcher.doc(found.address)?;
            if let Some(key) = doc.get_first(f.key).and_then(|v| v.as_bytes()) {
                out.push(Hit {
                    key: Bytes::copy_from_slice(key),
                    score: found.score,
                    sort: found.values,
                });
            }
        }
        if !sort.is_empty() {
            // Segments each hold one type under a field; two segments may disagree.
            check_one_type(out.iter().map(|hit| hit.sort.as_slice()), sort)?;
        }
        out.sort_by(|a, b| a.order(b, sort));
        out.truncate(want);
        Ok(Hits {
            total: total as u64,
            top: out,
        })
    }
}

impl Searchable {
    /// Every path holding a string with a word in some segment of `searcher`.
    fn string_paths(&self, searcher: &Searcher) -> Result<Vec<FieldPath>, SearchError> {
        let mut cache = self.string_paths.lock().unwrap_or_else(|e| e.into_inner());
        let mut all = std::collections::BTreeSet::new();
        let mut live = Vec::new();
        for segment in searcher.segment_readers() {
            let id = segment.segment_id();
            live.push(id);
            let paths = match cache.get(&id) {
                Some(paths) => paths.clone(),
                None => {
                    let read = Arc::new(paths_with_strings(segment, self.fields.doc)?);
                    cache.insert(id, read.clone());
                    read
                }
            };
            all.extend(paths.iter().cloned());
        }
        if cache.len() > live.len() * 2 {
            cache.retain(|id, _| live.contains(id));
        }
        Ok(all.into_iter().collect())
    }
}

/// Whether `query` has a test without a field (which asks every path holding strings).
fn needs_string_paths(query: &Query) -> bool {
    match query {
        Query::Leaf { field, .. } => field.is_none(),
        Query::And(parts) | Query::Or(parts) => parts.iter().any(needs_string_paths),
        Query::Not(inner) | Query::Boosted(inner, _) => needs_string_paths(inner),
        Query::All => false,
    }
}

/// The paths of the JSON field `doc` that hold words in `segment`: one look per path into its
/// word list, skipping the words themselves.
fn paths_with_strings(segment: &SegmentReader, doc: Field) -> Result<Vec<FieldPath>, SearchError> {
    let index = segment.inverted_index(doc)?;
    let terms = index.terms();
    let mut out = Vec::new();
    let mut from: Vec<u8> = Vec::new();
    loop {
        let mut stream = terms
            .range()
            .ge(&from)
            .into_stream()
            .map_err(tantivy::TantivyError::from)?;
        if !stream.advance() {
            break;
        }
        let term = stream.key();
        // A term is the path, an end byte (0), a type code, then the value.
        let Some(end) = term.iter().position(|b| *b == 0) else {
            break;
        };
        let Some(&code) = term.get(end + 1) else {
            break;
        };
        if code == Type::Str.to_code()
            && let Ok(path) = std::str::from_utf8(&term[..end])
        {
            out.push(path.split('\u{1}').map(str::to_owned).collect());
        }
        // On to the next type of this path, or the next path.
        from = term[..=end].to_vec();
        from.push(code + 1);
    }
    Ok(out)
}

/// A JSON value as the index takes it: numbers as themselves, strings that read as dates
/// both as text and as a date.
fn typed(value: serde_json::Value) -> OwnedValue {
    use serde_json::Value;
    match value {
        Value::Null => OwnedValue::Null,
        Value::Bool(b) => OwnedValue::Bool(b),
        Value::Number(n) => indexed_number(&n),
        Value::String(s) => match parse_date(&s) {
            Some((secs, _)) => {
                OwnedValue::Array(vec![OwnedValue::Str(s), OwnedValue::Date(date_at(secs))])
            }
            None => OwnedValue::Str(s),
        },
        Value::Array(items) => OwnedValue::Array(items.into_iter().map(typed).collect()),
        Value::Object(map) => {
            OwnedValue::Object(map.into_iter().map(|(k, v)| (k, typed(v))).collect())
        }
    }
}

/// A JSON number for the inverted index, keyed as [`IndexNumber`] says (whole floats made
/// integers here, so that tantivy's own conversion never clamps one, as it would 2^63).
fn indexed_number(n: &serde_json::Number) -> OwnedValue {
    match IndexNumber::of(n) {
        Some(IndexNumber::Whole(whole)) => match i64::try_from(whole) {
            Ok(signed) => OwnedValue::I64(signed),
            Err(_) => OwnedValue::U64(u64::try_from(whole).unwrap_or(u64::MAX)),
        },
        Some(IndexNumber::Float(float)) => OwnedValue::F64(float),
        None => OwnedValue::Null,
    }
}

/// A JSON number in the narrowest of the index's number types that holds it exactly.
fn number(n: &serde_json::Number) -> OwnedValue {
    if let Some(i) = n.as_i64() {
        OwnedValue::I64(i)
    } else if let Some(u) = n.as_u64() {
        OwnedValue::U64(u)
    } else {
        OwnedValue::F64(n.as_f64().unwrap_or_default())
    }
}

/// The scalar values of a stored object as the sort columns take them: numbers, booleans
/// and strings (cut to [`crate::SORT_STRING_BYTES`]), by path; arrays keep their scalars.
fn sortable_object(
    object: &serde_json::Map<String, serde_json::Value>,
) -> BTreeMap<String, OwnedValue> {
    object
        .iter()
        .filter_map(|(k, v)| Some((k.clone(), sortable(v)?)))
        .collect()
}

fn sortable(value: &serde_json::Value) -> Option<OwnedValue> {
    use serde_json::Value;
    Some(match value {
        Value::Null => return None,
        Value::Bool(b) => OwnedValue::Bool(*b),
        // -0 and 0 are one number to a sort (the columns would keep the sign apart).
        Value::Number(n) if n.as_f64() == Some(0.0) => OwnedValue::I64(0),
        Value::Number(n) => number(n),
        Value::String(s) => OwnedValue::Str(sort_text(s).to_owned()),
        Value::Array(items) => {
            let items: Vec<OwnedValue> = items.iter().filter_map(sortable).collect();
            if items.is_empty() {
                return None;
            }
            OwnedValue::Array(items)
        }
        Value::Object(map) => {
            let map = sortable_object(map);
            if map.is_empty() {
                return None;
            }
            OwnedValue::Object(map.into_iter().collect())
        }
    })
}

/// An instant in whole seconds as the index stores dates, clamped to what it can hold.
pub(crate) fn date_at(secs: i64) -> DateTime {
    const LIMIT: i64 = i64::MAX / 1_000_000_000;
    DateTime::from_timestamp_secs(secs.clamp(-LIMIT, LIMIT))
}
