//! The lock clients: Consul sessions and `?acquire=` / `?release=` on a few lock keys, the
//! way `api.Lock` and leader election use them, recorded for the checker's lock check.
//!
//! A client keeps one session alive by renewing it, takes a lock when it can, holds it for a
//! while and releases it. Now and then the holder is *paused*: it stops renewing and sleeps
//! past its lease while still "holding" the lock, as a process stopped by the scheduler or a
//! long GC would, then wakes and releases. The server's promise, which the checker holds it
//! to, is the lease each successful create or renew buys: the session is not invalidated
//! before twice its TTL has passed (Consul's grace), and the lock it held is not granted to
//! another session for the lock-delay after that.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde_json::json;

use crate::history::{Event, OpKind, Status};
use crate::workload::{
    Endpoint, Outcome, Workload, client_rng, finish, http_client, http_write, refused, since,
    unanswered,
};

/// The sessions' TTL (the chaos servers allow TTLs from 1 s).
pub const SESSION_TTL: Duration = Duration::from_secs(2);
/// The sessions' lock-delay.
pub const LOCK_DELAY: Duration = Duration::from_secs(1);
/// How often a client renews its session.
const RENEW_EVERY: Duration = Duration::from_millis(500);
/// The share of holds in which the holder is paused.
const PAUSE_PERCENT: u32 = 20;

/// How long after a successful create or renew no other session may take a lock this one
/// holds: invalidation no sooner than twice the TTL, then the lock-delay.
#[must_use]
pub fn lease() -> Duration {
    SESSION_TTL * 2 + LOCK_DELAY
}

/// Lock key `i`.
fn lock_key(i: u32) -> String {
    format!("lock/l{i}")
}

/// `PUT /v1/session/create`: the new session's id.
async fn create(client: &reqwest::Client, base: &str, name: &str) -> Outcome<String> {
    let body = json!({
        "Name": name,
        "TTL": format!("{}ms", SESSION_TTL.as_millis()),
        "LockDelay": format!("{}ms", LOCK_DELAY.as_millis()),
        "Behavior": "release",
    });
    let resp = match client
        .put(format!("{base}/v1/session/create"))
        .json(&body)
        .send()
        .await
    {
        Ok(r) => r,
        Err(e) => return unanswered(&e),
    };
    if resp.status() != reqwest::StatusCode::OK {
        return refused(resp.status());
    }
    match resp.json::<serde_json::Value>().await {
        Ok(v) => match v["ID"].as_str() {
            Some(id) => Outcome::Ok(id.to_string()),
            None => Outcome::Unknown(format!("create answered {v}")),
        },
        Err(e) => Outcome::Unknown(e.to_string()),
    }
}

/// Why a renew of a session that no longer exists failed.
const GONE: &str = "session not found";

/// `PUT /v1/session/renew/<id>` or `.../destroy/<id>`: Ok when done; a renew of a session
/// that is gone (404) certainly renewed nothing.
async fn session_put(client: &reqwest::Client, base: &str, what: &str, id: &str) -> Outcome<()> {
    match client
        .put(format!("{base}/v1/session/{what}/{id}"))
        .send()
        .await
    {
        Ok(r) if r.status() == reqwest::StatusCode::OK => Outcome::Ok(()),
        Ok(r) if r.status() == reqwest::StatusCode::NOT_FOUND => Outcome::Fail(GONE.into()),
        Ok(r) => refused(r.status()),
        Err(e) => unanswered(&e),
    }
}

/// One lock client: its session and the lock it holds.
struct Holder {
    id: u32,
    work: Workload,
    http: reqwest::Client,
    rng: ChaCha8Rng,
    events: Vec<Event>,
    counter: u64,
    session: Option<String>,
    renewed: Instant,
    /// The lock held, and until when the client means to hold it.
    held: Option<(String, Instant)>,
}

impl Holder {
    fn node(&mut self) -> Endpoint {
        let slot = self.rng.random_range(0..self.work.endpoints.len());
        self.work.endpoints.get(slot)
    }

    fn event(&self, node: &Endpoint, op: OpKind, key: &str) -> Event {
        let mut e = Event::new(self.id, &node.name, "http", op, key, since(self.work.clock));
        e.session.clone_from(&self.session);
        e
    }

    fn stopped(&self) -> bool {
        self.work.stop.load(Ordering::Relaxed)
    }

    /// Sleeps `d`, or less if the run stops.
    async fn sleep(&self, d: Duration) {
        let until = Instant::now() + d;
        while Instant::now() < until && !self.stopped() {
            tokio::time::sleep(Duration::from_millis(100).min(until - Instant::now())).await;
        }
    }

    async fn create(&mut self) {
        let node = self.node();
        let mut e = self.event(&node, OpKind::SessionCreate, "");
        let name = format!("chaos-c{}", self.id);
        let outcome = create(&self.http, &node.http_base, &name).await;
        let mut created = None;
        finish(&mut e, self.work.clock, outcome, |_, id| created = Some(id));
        let lease = lease() + self.work.overstate_lease;
        e.lease = Some(u64::try_from(lease.as_nanos()).unwrap_or(u64::MAX));
        if let Some(id) = created {
            e.session = Some(id.clone());
            self.session = Some(id);
            self.renewed = Instant::now();
        }
        // A create that failed or whose answer was lost made no session the client knows
        // of: there is nothing for the checker to follow.
        if e.session.is_some() {
            self.events.push(e);
        }
    }

    /// Renews or destroys the session; whether the server said it is gone.
    async fn session_op(&mut self, op: OpKind) -> bool {
        let Some(id) = self.session.clone() else {
            return true;
        };
        let node = self.node();
        let mut e = self.event(&node, op, "");
        let what = if op == OpKind::Renew {
            "renew"
        } else {
            "destroy"
        };
        let outcome = session_put(&self.http, &node.http_base, what, &id).await;
        let gone = matches!(&outcome, Outcome::Fail(why) if why == GONE);
        finish(&mut e, self.work.clock, outcome, |_, ()| {});
        self.events.push(e);
        gone
    }

    /// Renews the session; forgets it, and the lock, once it is gone.
    async fn renew(&mut self) {
        self.renewed = Instant::now();
        if self.session_op(OpKind::Renew).await {
            self.session = None;
            self.held = None;
        }
    }

    /// Destroys the session (releasing what it held) and starts afresh.
    async fn abandon(&mut self) {
        self.session_op(OpKind::SessionDestroy).await;
        self.session = None;
        self.held = None;
    }

    /// `?acquire=` or `?release=` of `key`; the answer.
    async fn lock_op(&mut self, op: OpKind, key: &str) -> (Status, Option<bool>) {
        let Some(id) = self.session.clone() else {
            return (Status::Fail, None);
        };
        let node = self.node();
        let mut e = self.event(&node, op, key);
        self.counter += 1;
        let (query, value) = match op {
            OpKind::Acquire => (
                format!("acquire={id}"),
                format!("c{}-{}", self.id, self.counter),
            ),
            _ => (format!("release={id}"), String::new()),
        };
        let outcome =
            http_write(&self.http, &node.http_base, key, Some(&value), Some(&query)).await;
        finish(&mut e, self.work.clock, outcome, |e, done| {
            e.result = Some(done)
        });
        let answer = (e.status, e.result);
        self.events.push(e);
        answer
    }

    async fn step(&mut self, locks: u32) {
        if self.session.is_none() {
            self.create().await;
            if self.session.is_none() {
                self.sleep(Duration::from_millis(200)).await;
            }
            return;
        }
        if self.renewed.elapsed() >= RENEW_EVERY {
            self.renew().await;
            return;
        }
        match self.held.clone() {
            Some((key, until)) if Instant::now() >= until => {
                // A planted overstated lease only shows when a holder outlives its real
                // lease, so under it every hold pauses: the self-test must not hang on luck.
                let pause_percent = if self.work.overstate_lease.is_zero() {
                    PAUSE_PERCENT
                } else {
                    100
                };
                if self.rng.random_range(0..100u32) < pause_percent {
                    // Paused while holding: no renewals until well past the lease.
                    self.sleep(lease() + Duration::from_secs(3)).await;
                }
                let (status, _) = self.lock_op(OpKind::Release, &key).await;
                self.held = None;
                if status != Status::Ok || self.rng.random_range(0..100u32) < 20 {
                    self.abandon().await;
                }
            }
            Some(_) => self.sleep(Duration::from_millis(100)).await,
            None => {
                let key = lock_key(self.rng.random_range(0..locks.max(1)));
                match self.lock_op(OpKind::Acquire, &key).await {
                    (Status::Ok, Some(true)) => {
                        let hold = Duration::from_millis(self.rng.random_range(200..1500));
                        self.held = Some((key, Instant::now() + hold));
                    }
                    (Status::Unknown, _) => self.abandon().await,
                    _ => {
                        let wait = Duration::from_millis(self.rng.random_range(50..300));
                        self.sleep(wait).await;
                    }
                }
            }
        }
    }
}

/// Lock client `id`'s loop over `locks` lock keys until the stop; returns its history.
pub async fn client(id: u32, work: Workload, locks: u32) -> Vec<Event> {
    let mut holder = Holder {
        id,
        rng: client_rng(&work, id),
        work,
        http: http_client(),
        events: Vec::new(),
        counter: 0,
        session: None,
        renewed: Instant::now(),
        held: None,
    };
    while !holder.stopped() {
        holder.step(locks).await;
    }
    holder.events
}
