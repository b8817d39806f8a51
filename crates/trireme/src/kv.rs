//! `trireme kv`: read and write the keys of a running cluster from a shell, through any
//! node's Consul KV HTTP API (`/v1/kv/...`).
//!
//! It is a thin client on purpose: every subcommand is one or two HTTP requests, so what it
//! prints is what the API answers (values raw, or Consul's JSON entries with `--json`), and a
//! script can rely on the exit status: 0 done, 1 the answer is "no" (a missing key, a
//! check-and-set that did not hold), 2 something went wrong (the node cannot be reached, a bad
//! answer, bad input).

use anyhow::{Context, anyhow, bail};
use clap::{Args, Subcommand};
use reqwest::{Method, StatusCode, Url};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::io::{IsTerminal, Read, Write};
use std::process::ExitCode;
use std::time::Duration;

/// How long one request may take before `trireme kv` gives up on it.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Flags of `trireme kv`.
#[derive(Args, Debug)]
#[command(
    after_help = "Exit status: 0 done; 1 a missing key, or a --cas that did not hold; \
                        2 any other error (the node cannot be reached, a bad answer)."
)]
pub struct KvArgs {
    #[command(subcommand)]
    command: KvCommand,
}

#[derive(Subcommand, Debug)]
enum KvCommand {
    /// Print a key's value (raw bytes; with --json, Consul's entry). Exit 1 if it is missing.
    Get(GetArgs),
    /// Write a value to a key; VALUE `-` reads it from stdin. With --cas, exit 1 if the key
    /// was not at that ModifyIndex (0: if it already existed), saying why.
    Put(PutArgs),
    /// Delete a key, or with --recurse every key under a prefix. With --cas, exit 1 if the key
    /// was not at that ModifyIndex.
    Delete(DeleteArgs),
    /// Print the keys under a prefix, one per line (with --json, Consul's entries).
    List(ListArgs),
    /// Print a key's value, then each new value as it changes.
    ///
    /// Each read is a Consul blocking query (?index=N&wait=...) that the node answers when
    /// the key's ModifyIndex moves past N, or after --wait unchanged; several changes between
    /// two answers show as the last of them. A deletion is reported on stderr (with --json,
    /// printed as `null`). Runs until interrupted, or until --count values were printed.
    Watch(WatchArgs),
}

/// Which node to ask.
#[derive(Args, Debug)]
struct Target {
    /// HTTP URL of any node of the cluster.
    #[arg(long, default_value = "http://127.0.0.1:7700")]
    target: String,
}

/// The read mode, as Consul's `?consistent` / `?stale`.
#[derive(Args, Debug)]
struct ReadFlags {
    /// Linearizable read: the shard leader confirms with a quorum first (ReadIndex).
    #[arg(long, conflicts_with = "stale")]
    consistent: bool,
    /// Read from whichever replica the node holds; may be behind.
    #[arg(long)]
    stale: bool,
}

impl ReadFlags {
    fn query(&self) -> Vec<String> {
        if self.consistent {
            vec!["consistent".into()]
        } else if self.stale {
            vec!["stale".into()]
        } else {
            Vec::new()
        }
    }
}

#[derive(Args, Debug)]
struct GetArgs {
    /// The key.
    key: String,
    #[command(flatten)]
    read: ReadFlags,
    /// Print Consul's JSON entry (Key, Value in base64, Flags, CreateIndex, ModifyIndex).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    target: Target,
}

#[derive(Args, Debug)]
struct PutArgs {
    /// The key.
    key: String,
    /// The value; `-` reads it from stdin.
    value: String,
    /// A number stored with the value (Consul's Flags).
    #[arg(long, value_name = "N")]
    flags: Option<u64>,
    /// Write only if the key's ModifyIndex is N; 0: only if the key does not exist.
    #[arg(long, value_name = "N")]
    cas: Option<u64>,
    #[command(flatten)]
    target: Target,
}

#[derive(Args, Debug)]
struct DeleteArgs {
    /// The key, or with --recurse the prefix.
    key: String,
    /// Delete every key that starts with KEY (atomic per shard, not across shards).
    #[arg(long, conflicts_with = "cas")]
    recurse: bool,
    /// Delete only if the key's ModifyIndex is N.
    #[arg(long, value_name = "N")]
    cas: Option<u64>,
    #[command(flatten)]
    target: Target,
}

#[derive(Args, Debug)]
struct ListArgs {
    /// Only keys that start with this (default: every key).
    #[arg(default_value = "")]
    prefix: String,
    /// Cut each key after the first SEP following the prefix, listing each level once.
    #[arg(long, value_name = "SEP", conflicts_with = "json")]
    separator: Option<String>,
    #[command(flatten)]
    read: ReadFlags,
    /// Print Consul's JSON entries instead of keys.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    target: Target,
}

#[derive(Args, Debug)]
struct WatchArgs {
    /// The key.
    key: String,
    /// Longest a blocking query is held before the node answers unchanged, e.g. 30s or 5m
    /// (the node caps it at 10m); the watch then asks again.
    #[arg(long, default_value = "5m")]
    wait: String,
    /// Stop after printing this many values.
    #[arg(long, value_name = "N")]
    count: Option<u64>,
    #[command(flatten)]
    read: ReadFlags,
    /// Print Consul's JSON entry for each value (one line each).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    target: Target,
}

/// How a subcommand ended, when nothing went wrong.
enum Outcome {
    /// Done: exit 0.
    Done,
    /// The answer is "no": the message goes to stderr, exit 1.
    No(String),
}

/// Runs `trireme kv ...` and turns its outcome into the exit status.
pub fn run(args: KvArgs) -> ExitCode {
    let outcome = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
        .and_then(|runtime| runtime.block_on(dispatch(args.command)));
    match outcome {
        Ok(Outcome::Done) => ExitCode::SUCCESS,
        Ok(Outcome::No(message)) => {
            eprintln!("{message}");
            ExitCode::from(1)
        }
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// A reader that went away (`trireme kv list | head`) is not an error of ours.
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.downcast_ref::<std::io::Error>()
        .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
}

async fn dispatch(command: KvCommand) -> anyhow::Result<Outcome> {
    match command {
        KvCommand::Get(args) => get(args).await,
        KvCommand::Put(args) => put(args).await,
        KvCommand::Delete(args) => delete(args).await,
        KvCommand::List(args) => list(args).await,
        KvCommand::Watch(args) => watch(args).await,
    }
}

/// One node's `/v1/kv` API.
struct KvApi {
    client: reqwest::Client,
    base: Url,
}

/// One of Consul's entries, its fields in Consul's order (so `--json` prints them as Consul
/// does); the value stays in base64, as the API sends it.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Entry {
    lock_index: u64,
    key: String,
    flags: u64,
    value: Option<String>,
    create_index: u64,
    modify_index: u64,
}

/// An answer: status, `X-Consul-Index` if any, and the body.
struct Answer {
    status: StatusCode,
    index: Option<u64>,
    /// Kept as bytes: values are not necessarily UTF-8.
    body: Vec<u8>,
}

impl KvApi {
    fn new(target: &Target) -> anyhow::Result<Self> {
        let base = crate::cluster::normalize_target(&target.target)?;
        let base = Url::parse(&base).with_context(|| format!("--target {base} is not a URL"))?;
        Ok(KvApi {
            client: crate::cluster::http_client(REQUEST_TIMEOUT)?,
            base,
        })
    }

    /// `<target>/v1/kv/<key>?<query>`, each part of the key between slashes percent-encoded.
    ///
    /// URLs resolve `.` and `..` parts away (`a/../b` would become `b`), so a key with such a
    /// part goes as one segment, its slashes encoded; the node decodes them back. A key that
    /// is only `.` or `..` cannot be sent in a URL at all.
    fn url(&self, key: &str, query: &[String]) -> anyhow::Result<Url> {
        if key == "." || key == ".." {
            bail!("the key {key:?} cannot be addressed through the HTTP API");
        }
        let mut url = self.base.clone();
        {
            let mut path = url
                .path_segments_mut()
                .map_err(|()| anyhow!("--target {} cannot take a path", self.base))?;
            path.pop_if_empty().extend(["v1", "kv"]);
            if key.split('/').any(|part| part == "." || part == "..") {
                path.push(key);
            } else {
                path.extend(key.split('/'));
            }
        }
        if !query.is_empty() {
            url.set_query(Some(&query.join("&")));
        }
        Ok(url)
    }

    /// Sends one request; any status comes back as an [`Answer`], only a failure to get one
    /// is an error.
    async fn send(
        &self,
        method: Method,
        key: &str,
        query: &[String],
        body: Option<Vec<u8>>,
    ) -> anyhow::Result<Answer> {
        let url = self.url(key, query)?;
        let mut request = self.client.request(method.clone(), url.clone());
        if let Some(body) = body {
            request = request.body(body);
        }
        let response = request
            .send()
            .await
            .map_err(|e| anyhow!("{method} {url}: {}", crate::cluster::root_cause(&e)))?;
        let status = response.status();
        let index = response
            .headers()
            .get("X-Consul-Index")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        let body = response
            .bytes()
            .await
            .map_err(|e| anyhow!("{method} {url}: {}", crate::cluster::root_cause(&e)))?
            .to_vec();
        Ok(Answer {
            status,
            index,
            body,
        })
    }

    /// The key's entry, or `None` when it does not exist.
    async fn entry(&self, key: &str, read: &[String]) -> anyhow::Result<Option<Entry>> {
        let answer = self.send(Method::GET, key, read, None).await?;
        match answer.status {
            StatusCode::NOT_FOUND => Ok(None),
            StatusCode::OK => Ok(entries(&answer)?.into_iter().next()),
            _ => Err(api_error(&answer)),
        }
    }

    /// The key's ModifyIndex now (a consistent read), for explaining a failed check-and-set.
    async fn modify_index(&self, key: &str) -> anyhow::Result<Option<u64>> {
        let entry = self.entry(key, &["consistent".into()]).await?;
        Ok(entry.map(|e| e.modify_index))
    }
}

/// The entries of a 200 answer.
fn entries(answer: &Answer) -> anyhow::Result<Vec<Entry>> {
    serde_json::from_slice(&answer.body)
        .context("the node's answer is not a list of Consul entries")
}

/// An error answer, with the node's message and code when it sent the usual JSON body.
fn api_error(answer: &Answer) -> anyhow::Error {
    match serde_json::from_slice::<Value>(&answer.body) {
        Ok(body) if body["error"].is_string() => anyhow!(
            "the node answered {}: {} ({})",
            answer.status,
            body["error"].as_str().unwrap_or_default(),
            body["code"].as_str().unwrap_or("no code")
        ),
        _ => anyhow!(
            "the node answered {}: {}",
            answer.status,
            String::from_utf8_lossy(&answer.body).trim()
        ),
    }
}

/// Reads `true` / `false`, the answer of a PUT or DELETE.
fn boolean(answer: &Answer) -> anyhow::Result<bool> {
    if answer.status != StatusCode::OK {
        return Err(api_error(answer));
    }
    serde_json::from_slice(&answer.body).with_context(|| {
        format!(
            "expected true or false from the node, got {:?}",
            String::from_utf8_lossy(&answer.body)
        )
    })
}

fn print_json(value: &impl Serialize) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, value)?;
    out.write_all(b"\n")?;
    out.flush()?;
    Ok(())
}

fn missing(key: &str) -> Outcome {
    Outcome::No(format!("key {key:?} not found"))
}

async fn get(args: GetArgs) -> anyhow::Result<Outcome> {
    let api = KvApi::new(&args.target)?;
    let read = args.read.query();
    if args.json {
        return Ok(match api.entry(&args.key, &read).await? {
            Some(entry) => {
                print_json(&entry)?;
                Outcome::Done
            }
            None => missing(&args.key),
        });
    }
    let mut query = read;
    query.push("raw".into());
    let answer = api.send(Method::GET, &args.key, &query, None).await?;
    match answer.status {
        StatusCode::OK => {
            let mut out = std::io::stdout().lock();
            out.write_all(&answer.body)?;
            // Byte-exact into a pipe or a file; readable at a terminal.
            if out.is_terminal() && !answer.body.ends_with(b"\n") {
                out.write_all(b"\n")?;
            }
            out.flush()?;
            Ok(Outcome::Done)
        }
        StatusCode::NOT_FOUND => Ok(missing(&args.key)),
        _ => Err(api_error(&answer)),
    }
}

async fn put(args: PutArgs) -> anyhow::Result<Outcome> {
    let api = KvApi::new(&args.target)?;
    let value = if args.value == "-" {
        let mut value = Vec::new();
        std::io::stdin()
            .read_to_end(&mut value)
            .context("cannot read the value from stdin")?;
        value
    } else {
        args.value.into_bytes()
    };
    let mut query = Vec::new();
    if let Some(flags) = args.flags {
        query.push(format!("flags={flags}"));
    }
    if let Some(cas) = args.cas {
        query.push(format!("cas={cas}"));
    }
    let answer = api
        .send(Method::PUT, &args.key, &query, Some(value))
        .await?;
    if boolean(&answer)? {
        return Ok(Outcome::Done);
    }
    let key = &args.key;
    let now = api.modify_index(key).await?;
    Ok(Outcome::No(match (args.cas, now) {
        (Some(0), Some(index)) => {
            format!(
                "not written: --cas 0 needs {key:?} not to exist, and it does (ModifyIndex {index})"
            )
        }
        (Some(cas), Some(index)) => {
            format!("not written: --cas {cas}, but {key:?} is at ModifyIndex {index}")
        }
        (Some(cas), None) => format!("not written: --cas {cas}, but {key:?} does not exist"),
        (None, _) => format!("not written: the node refused to write {key:?}"),
    }))
}

async fn delete(args: DeleteArgs) -> anyhow::Result<Outcome> {
    if args.recurse && args.key.is_empty() {
        bail!("delete --recurse needs a prefix; an empty one would delete every key");
    }
    let api = KvApi::new(&args.target)?;
    let query = match (args.recurse, args.cas) {
        (true, _) => vec!["recurse".to_string()],
        (false, Some(cas)) => vec![format!("cas={cas}")],
        (false, None) => Vec::new(),
    };
    let answer = api.send(Method::DELETE, &args.key, &query, None).await?;
    if boolean(&answer)? {
        return Ok(Outcome::Done);
    }
    let key = &args.key;
    let cas = args.cas.unwrap_or_default();
    Ok(Outcome::No(match api.modify_index(key).await? {
        Some(index) => format!("not deleted: --cas {cas}, but {key:?} is at ModifyIndex {index}"),
        None => format!("not deleted: --cas {cas}, but {key:?} does not exist"),
    }))
}

async fn list(args: ListArgs) -> anyhow::Result<Outcome> {
    let api = KvApi::new(&args.target)?;
    let mut query = args.read.query();
    if args.json {
        query.push("recurse".into());
    } else {
        query.push("keys".into());
        if let Some(separator) = &args.separator {
            let encoded: String = url_encoded(separator);
            query.push(format!("separator={encoded}"));
        }
    }
    let answer = api.send(Method::GET, &args.prefix, &query, None).await?;
    // Nothing under the prefix (404) is an empty list, not an error.
    let found = match answer.status {
        StatusCode::NOT_FOUND => false,
        StatusCode::OK => true,
        _ => return Err(api_error(&answer)),
    };
    if args.json {
        let entries = if found { entries(&answer)? } else { Vec::new() };
        print_json(&entries)?;
        return Ok(Outcome::Done);
    }
    let keys: Vec<String> = if found {
        serde_json::from_slice(&answer.body).context("the node's answer is not a list of keys")?
    } else {
        Vec::new()
    };
    let mut out = std::io::stdout().lock();
    for key in &keys {
        writeln!(out, "{key}")?;
    }
    out.flush()?;
    Ok(Outcome::Done)
}

/// Percent-encodes a query parameter's value.
fn url_encoded(text: &str) -> String {
    let mut url = Url::parse("http://x/").expect("a constant URL parses");
    url.query_pairs_mut().append_pair("v", text);
    url.query()
        .and_then(|q| q.strip_prefix("v="))
        .unwrap_or_default()
        .to_string()
}

/// What `watch` saw of the key at one read.
#[derive(Debug, PartialEq)]
enum Seen {
    Missing,
    /// The ModifyIndex, and what to print for it.
    Value(u64, Vec<u8>),
}

/// One read of the watched key: a blocking query when `after` names the index last seen.
/// Returns what it saw and the answer's `X-Consul-Index`.
async fn read_for_watch(
    api: &KvApi,
    args: &WatchArgs,
    after: Option<(u64, &str)>,
) -> anyhow::Result<(Seen, u64)> {
    let mut query = args.read.query();
    if let Some((index, wait)) = after {
        query.push(format!("index={index}"));
        query.push(format!("wait={wait}"));
    }
    if !args.json {
        query.push("raw".into());
    }
    let answer = api.send(Method::GET, &args.key, &query, None).await?;
    let index = answer
        .index
        .context("the node's answer has no X-Consul-Index header")?;
    let seen = match answer.status {
        StatusCode::NOT_FOUND => Seen::Missing,
        StatusCode::OK if args.json => match entries(&answer)?.into_iter().next() {
            None => Seen::Missing,
            Some(entry) => Seen::Value(entry.modify_index, serde_json::to_vec(&entry)?),
        },
        // With ?raw the body is the value, and X-Consul-Index the key's ModifyIndex.
        StatusCode::OK => Seen::Value(index, answer.body),
        _ => return Err(api_error(&answer)),
    };
    Ok((seen, index))
}

/// Pause after a failed read before the next, so a watch through a node that is down does
/// not spin.
const WATCH_RETRY_PAUSE: Duration = Duration::from_millis(500);

async fn watch(args: WatchArgs) -> anyhow::Result<Outcome> {
    let wait = humantime::parse_duration(&args.wait)
        .with_context(|| format!("--wait {:?} is not a duration like 30s or 5m", args.wait))?;
    if wait.is_zero() {
        bail!("--wait must be longer than zero");
    }
    if args.count == Some(0) {
        return Ok(Outcome::Done);
    }
    // The node holds a query up to the wait plus a sixteenth, and caps it at 10 minutes.
    let mut api = KvApi::new(&args.target)?;
    api.client = crate::cluster::http_client(
        wait.min(Duration::from_secs(600)) * 17 / 16 + REQUEST_TIMEOUT,
    )?;
    let wait_text = format!("{}ms", wait.as_millis());
    let key = &args.key;
    // The first read must work: a wrong target or key is reported, not retried forever.
    let (mut last, mut index) = read_for_watch(&api, &args, None).await?;
    let mut printed = 0;
    match &last {
        Seen::Missing => eprintln!("{key:?} does not exist yet; waiting for it"),
        Seen::Value(_, shown) => {
            print_line(shown)?;
            printed += 1;
        }
    }
    let mut failing: Option<String> = None;
    while args.count.is_none_or(|count| printed < count) {
        let (seen, now) = match read_for_watch(&api, &args, Some((index, &wait_text))).await {
            Ok(read) => read,
            Err(e) => {
                // A node restarting or a leader changing: say so once, and keep reading.
                let message = format!("{e:#}");
                if failing.as_ref() != Some(&message) {
                    eprintln!("error (still watching): {message}");
                    failing = Some(message);
                }
                tokio::time::sleep(WATCH_RETRY_PAUSE).await;
                continue;
            }
        };
        if failing.take().is_some() {
            eprintln!("reading {key:?} again");
        }
        // An index that went backwards (a restored cluster) starts the watch over, as
        // Consul's clients do.
        index = if now < index { 0 } else { now };
        let changed = match (&last, &seen) {
            (Seen::Value(before, _), Seen::Value(now, _)) => before != now,
            (Seen::Missing, Seen::Missing) => false,
            _ => true,
        };
        if !changed {
            continue;
        }
        match &seen {
            Seen::Value(_, shown) => {
                print_line(shown)?;
                printed += 1;
            }
            Seen::Missing => {
                eprintln!("{key:?} was deleted");
                if args.json {
                    print_line(b"null")?;
                }
            }
        }
        last = seen;
    }
    Ok(Outcome::Done)
}

/// One value per line, flushed at once: a watcher is read as it goes.
fn print_line(bytes: &[u8]) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)?;
    out.write_all(b"\n")?;
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(target: &str) -> KvApi {
        KvApi::new(&Target {
            target: target.into(),
        })
        .expect("a valid target")
    }

    #[test]
    fn key_parts_are_encoded_and_slashes_kept() {
        let api = api("127.0.0.1:7700");
        let url = api.url("app/a b?#%/x", &["raw".into()]).expect("url");
        assert_eq!(
            url.as_str(),
            "http://127.0.0.1:7700/v1/kv/app/a%20b%3F%23%25/x?raw"
        );
        let url = api.url("", &["keys".into(), "stale".into()]).expect("url");
        assert_eq!(url.as_str(), "http://127.0.0.1:7700/v1/kv/?keys&stale");
        let url = api.url("dir/", &[]).expect("url");
        assert_eq!(url.as_str(), "http://127.0.0.1:7700/v1/kv/dir/");
        // Dot parts are kept, not resolved away.
        let url = api.url("a/../b/.", &[]).expect("url");
        assert_eq!(url.as_str(), "http://127.0.0.1:7700/v1/kv/a%2F..%2Fb%2F.");
        assert!(api.url("..", &[]).is_err());
    }

    #[test]
    fn separators_are_percent_encoded() {
        assert_eq!(url_encoded("/"), "%2F");
        assert_eq!(url_encoded("a&b"), "a%26b");
    }

    #[test]
    fn error_answers_name_the_status_and_code() {
        let answer = Answer {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            index: None,
            body: br#"{"error":"value is 9 bytes, the limit is 8","code":"value_too_large"}"#
                .to_vec(),
        };
        let message = format!("{:#}", api_error(&answer));
        assert!(
            message.contains("413") && message.contains("value_too_large"),
            "{message}"
        );
    }
}
