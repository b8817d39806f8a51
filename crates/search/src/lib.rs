//! Document search: the query language users write (Lucene's, as Orchestrate documented it),
//! and an index per shard replica, kept by tantivy and fed from the shard's applied log.

mod ast;
mod compile;
mod error;
mod index;
mod indexer;
mod matcher;
mod parse;
mod sort;

pub use ast::{FieldPath, MAX_WORD_BYTES, Query, RangeKind, Test, parse_date, parse_number, words};
pub use error::SearchError;
pub use index::{Hit, Hits};
pub use indexer::{DEFAULT_COMMIT_INTERVAL, SearchIndexes, ShardIndexStats};
pub use matcher::{matches, matches_json};
pub use parse::{MAX_DEPTH, MAX_QUERY_BYTES, parse};
pub use sort::{
    MAX_SORT_FIELDS, SORT_STRING_BYTES, SortKey, SortValue, check_one_type, compare_sort_values,
    parse_sort,
};

#[cfg(test)]
mod agreement;
