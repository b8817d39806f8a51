//! Regions: voters in the home region and a learner of every shard in each other region,
//! which answers stale reads there even when every voter is stopped and never votes; the
//! placement an operator reads and sets. Stale reads and the age they report:
//! `X-Consul-LastContact` on a `?stale` read is a bound that holds (no write acknowledged
//! longer ago than that is missing from the answer), grows while a replica is cut off from
//! its leader, and `?max_stale` sends a read whose replica may be older than it allows to the
//! leader. Region labels show where Consul names datacenters.

use crate::common::cluster::{
    ClusterOptions, TestCluster, bounded, header, other_than, poll_until,
};
use crate::common::{ReplyExt, http_client};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use trireme_types::admin::ShardsDoc;
use trireme_types::cluster_status::Placement;

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is past 1970")
        .as_millis() as u64
}

/// Three nodes, one per region (`r1`, `r2`, `r3`), one shard: its voter in r1 (the home
/// region: the first of the regions tied for most nodes), a learner in each of the others.
fn three_regions() -> ClusterOptions {
    ClusterOptions {
        node_args: (1..=3)
            .map(|i| vec!["--region".to_string(), format!("r{i}")])
            .collect(),
        ..ClusterOptions::default().shards(1)
    }
}

/// Three voters in one region, one shard.
fn one_region() -> ClusterOptions {
    ClusterOptions {
        node_args: vec![vec!["--region".to_string(), "r1".to_string()]; 3],
        ..ClusterOptions::default().shards(1)
    }
}

/// n1-n3 in `home`, n4 in `west`, two shards.
fn home_and_west() -> ClusterOptions {
    ClusterOptions {
        nodes: 4,
        node_args: ["home", "home", "home", "west"]
            .iter()
            .map(|r| vec!["--region".to_string(), (*r).to_string()])
            .collect(),
        ..ClusterOptions::default().shards(2)
    }
}

/// Waits until node `via` shows `learner` holding a learner of every shard.
async fn until_learners(
    c: &TestCluster,
    via: usize,
    learner: &str,
) -> Vec<(Vec<String>, Vec<String>)> {
    poll_until(
        Duration::from_secs(30),
        Duration::from_millis(100),
        || async {
            let roles = roles(c, via).await;
            if roles.iter().all(|(_, learners)| learners == &[learner]) {
                Ok(roles)
            } else {
                Err(roles)
            }
        },
    )
    .await
    .unwrap_or_else(|roles| panic!("{learner} never held a learner of every shard: {roles:?}"))
}

/// GET `url` and its JSON body, which must be a `T`.
async fn get_json<T: serde::de::DeserializeOwned>(url: String) -> T {
    let response = http_client().get(&url).send().await.expect("an answer");
    assert_eq!(response.status(), 200, "GET {url}");
    response
        .json()
        .await
        .expect("a JSON body of the expected shape")
}

fn signal(c: &TestCluster, i: usize, signal: rustix::process::Signal) {
    let pid = rustix::process::Pid::from_raw(c.node(i).pid() as i32).expect("a PID");
    rustix::process::kill_process(pid, signal).expect("signal the server");
}

/// The value of a stale read through node `i` and its reported bound, in ms.
async fn stale_read(c: &TestCluster, i: usize, key: &str) -> (Option<u64>, u64) {
    let (entry, headers) = c.try_get(i, key, "?stale").await.expect("a stale read");
    let bound = header(&headers, "X-Consul-LastContact")
        .parse()
        .expect("X-Consul-LastContact is a number");
    let value = entry.map(|e| {
        String::from_utf8(e.value)
            .expect("a number")
            .parse()
            .expect("a number")
    });
    (value, bound)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regions_show_as_consul_datacenters_and_replica_labels() {
    let c = TestCluster::start(three_regions()).await;
    bounded(Duration::from_secs(60), async {
        c.expect_all_led(Duration::from_secs(20)).await;
        let base = c.node(1).http_url();
        let dcs: Vec<String> = get_json(format!("{base}/v1/catalog/datacenters")).await;
        assert_eq!(dcs, ["r2", "r1", "r3"], "own region first, then by name");
        let agent: serde_json::Value = get_json(format!("{base}/v1/agent/self")).await;
        assert_eq!(agent["Config"]["Datacenter"], "r2");
        let doc: ShardsDoc = get_json(format!("{base}/v1/cluster/shards")).await;
        let replicas = &doc.shards[0].replicas;
        assert_eq!(replicas[0].name, "n1");
        for r in replicas {
            let expected = format!("r{}", &r.name[1..]);
            assert_eq!(r.region.as_deref(), Some(expected.as_str()), "{r:?}");
        }
        // The voter in r1, the home region; a learner each in r2 and r3.
        let roles = poll_until(
            Duration::from_secs(30),
            Duration::from_millis(100),
            || async {
                match roles(&c, 2).await.pop() {
                    Some((voters, mut learners)) if learners.len() == 2 => {
                        learners.sort();
                        Ok((voters, learners))
                    }
                    other => Err(other),
                }
            },
        )
        .await
        .expect("a learner in each other region");
        assert_eq!(
            roles,
            (
                vec!["n1".to_string()],
                vec!["n2".to_string(), "n3".to_string()]
            )
        );

        // Redis Cluster clients see the learners as replicas after the voter.
        let mut resp = crate::common::RawResp::connect(c.node(0).resp_addr()).await;
        let slots = crate::common::Reply::parse(&resp.cmd(&[b"CLUSTER", b"SLOTS"]).await);
        let ports: Vec<i64> = slots.array()[0].array()[2..]
            .iter()
            .map(|node| node.array()[1].int())
            .collect();
        let expected: Vec<i64> = (0..3)
            .map(|i| i64::from(c.node(i).resp_addr().port()))
            .collect();
        assert_eq!(ports[0], expected[0], "the voter first: {ports:?}");
        let mut learners = ports[1..].to_vec();
        learners.sort_unstable();
        let mut others = expected[1..].to_vec();
        others.sort_unstable();
        assert_eq!(learners, others, "then the learners");

        // Consul's `?dc=`: a stale read naming r3 is answered by r3's learner, so with n3
        // stopped it is not answered at all, while the same read naming r2 (or none) is.
        c.put(0, "dc/key", "1").await;
        poll_until(
            Duration::from_secs(10),
            Duration::from_millis(20),
            || async {
                match stale_read(&c, 2, "dc/key").await {
                    (Some(1), _) => Ok(()),
                    other => Err(other),
                }
            },
        )
        .await
        .expect("r3's learner has the key");
        let url = |dc: &str| format!("{}?stale&dc={dc}", c.node(0).kv_url("dc/key"));
        let http = http_client();
        for dc in ["r1", "r2", "r3", "trireme"] {
            let answer = http.get(url(dc)).send().await.expect("an answer");
            assert_eq!(answer.status(), 200, "dc={dc}");
        }
        let unknown = http.get(url("mars")).send().await.expect("an answer");
        assert_eq!(unknown.status(), 500);
        assert!(
            unknown
                .text()
                .await
                .unwrap_or_default()
                .contains("No path to datacenter")
        );
        signal(&c, 2, rustix::process::Signal::STOP);
        let in_r3 = tokio::time::timeout(Duration::from_secs(1), http.get(url("r3")).send()).await;
        assert!(in_r3.is_err(), "answered without r3: {in_r3:?}");
        for dc in ["r1", "r2"] {
            let answer = http.get(url(dc)).send().await.expect("an answer");
            assert_eq!(answer.status(), 200, "dc={dc} with r3 stopped");
        }
        signal(&c, 2, rustix::process::Signal::CONT);
    })
    .await;
}

/// A writer bumps a counter through the leader, noting when each value was acknowledged; a
/// reader on a follower, then on a learner in another region, checks every stale answer
/// against its bound: the value must be at least the last one acknowledged before the read
/// began minus the bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_reads_never_miss_a_write_older_than_their_bound() {
    let c = Arc::new(TestCluster::start(home_and_west()).await);
    bounded(Duration::from_secs(120), async {
        until_learners(&c, 0, "n4").await;
        let shard = 0;
        let leader = c.expect_all_led(Duration::from_secs(20)).await[shard as usize].node;
        let follower = other_than(&c, &[leader, 3]);
        let key = c.key_in_shard(shard, "bounds/");
        for reader in [follower, 3] {
            bound_holds(&c, leader, reader, &key).await;
        }
        reads_see_their_own_writes(&c, leader, 3, &key).await;
    })
    .await;
}

/// Read-your-writes: each PUT through `leader` answers its index in `X-Consul-Index`; a stale
/// read through `reader` right after it, carrying `?after_index=` that index, always sees
/// the write. An index the shard has not reached is answered by the leader after a wait.
async fn reads_see_their_own_writes(c: &TestCluster, leader: usize, reader: usize, key: &str) {
    let http = http_client();
    let mut last = 0;
    for value in 0..30u64 {
        let response = http
            .put(c.node(leader).kv_url(key))
            .body(format!("rw{value}"))
            .send()
            .await
            .expect("a PUT answer");
        assert_eq!(response.status(), 200);
        let index: u64 = header(response.headers(), "X-Consul-Index")
            .parse()
            .expect("a PUT answers its index");
        assert!(index > last, "indexes grow: {index} after {last}");
        last = index;
        let (entry, _) = c
            .try_get(reader, key, &format!("?stale&after_index={index}"))
            .await
            .expect("a stale read");
        let entry = entry.expect("the key exists");
        assert_eq!(
            entry.value,
            format!("rw{value}").as_bytes(),
            "after {index}"
        );
        assert!(entry.modify_index >= index);
    }
    // A reader just resumed is behind: its first reads would miss the write; carrying the
    // index they wait for it.
    let mut behind = 0;
    for round in 0..5 {
        signal(c, reader, rustix::process::Signal::STOP);
        let value = format!("paused{round}");
        let response = http
            .put(c.node(leader).kv_url(key))
            .body(value.clone())
            .send()
            .await
            .expect("a PUT answer");
        last = header(response.headers(), "X-Consul-Index")
            .parse()
            .expect("a PUT answers its index");
        signal(c, reader, rustix::process::Signal::CONT);
        let after = format!("?stale&after_index={last}");
        let (plain, waited) = tokio::join!(
            c.try_get(reader, key, "?stale"),
            c.try_get(reader, key, &after)
        );
        let plain = plain.expect("a stale read").0.expect("the key");
        behind += usize::from(plain.value != value.as_bytes());
        let waited = waited.expect("a stale read").0.expect("the key");
        assert_eq!(waited.value, value.as_bytes(), "after {last}");
    }
    eprintln!("read-your-writes: plain stale reads behind in {behind} of 5 resumed rounds");
    let started = std::time::Instant::now();
    let (entry, headers) = c
        .try_get(
            reader,
            key,
            &format!("?stale&after_index={}", last + 1_000_000),
        )
        .await
        .expect("a read waiting for an index never reached");
    assert_eq!(entry.expect("the key").value, b"paused4");
    assert_eq!(
        header(&headers, "X-Consul-LastContact"),
        "0",
        "the leader answered"
    );
    assert!(started.elapsed() >= Duration::from_secs(2));
}

/// Reads through `reader` while a writer bumps `key` through `leader` (see above).
async fn bound_holds(c: &Arc<TestCluster>, leader: usize, reader: usize, key: &str) {
    c.put(leader, key, "0").await;
    let acked: Arc<Mutex<Vec<(u64, u64)>>> = Arc::new(Mutex::new(vec![(0, unix_ms())]));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (c, acked, done) = (c.clone(), acked.clone(), done.clone());
        let key_written = key.to_string();
        tokio::spawn(async move {
            let mut value = 0u64;
            while !done.load(std::sync::atomic::Ordering::Relaxed) && value < 5_000 {
                value += 1;
                c.put(leader, &key_written, &value.to_string()).await;
                acked
                    .lock()
                    .expect("the acknowledgements")
                    .push((value, unix_ms()));
            }
        })
    };
    let mut bounds = Vec::new();
    for _ in 0..400 {
        let started = unix_ms();
        let (seen, bound) = stale_read(c, reader, key).await;
        // The replica may not have the first write yet; only a bound that covers it says it must.
        let due = acked
            .lock()
            .expect("the acknowledgements")
            .iter()
            .rev()
            .find(|(_, at)| *at + bound < started)
            .map(|(value, _)| *value);
        if let Some(due) = due {
            assert!(
                seen.is_some_and(|seen| seen >= due),
                "a stale read begun at {started} with bound {bound} ms saw {seen:?}, but {due} was acknowledged before {}",
                started.saturating_sub(bound)
            );
        }
        bounds.push(bound);
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.await.expect("the writer");
    bounds.sort_unstable();
    let median = bounds[bounds.len() / 2];
    let written = acked.lock().expect("the acknowledgements").len();
    eprintln!(
        "{} stale reads on {} during {written} writes: bound median {median} ms, max {} ms",
        bounds.len(),
        c.name(reader),
        bounds[bounds.len() - 1]
    );
    assert!(written > 20, "the writer kept writing: {written}");
    assert!(
        median < 1_000,
        "a replica that hears from its leader every 50 ms is at most {median} ms behind"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_replica_reports_its_age_and_max_stale_sends_the_read_to_the_leader() {
    let c = TestCluster::start(one_region()).await;
    bounded(Duration::from_secs(90), async {
        let leader = c.expect_all_led(Duration::from_secs(20)).await[0].node;
        let paused = other_than(&c, &[leader]);
        let reader = other_than(&c, &[leader, paused]);
        let key = "bounds/cut-off";
        c.put(leader, key, "1").await;
        poll_until(
            Duration::from_secs(10),
            Duration::from_millis(10),
            || async {
                match stale_read(&c, reader, key).await {
                    (Some(1), _) => Ok(()),
                    other => Err(other),
                }
            },
        )
        .await
        .expect("the follower applies the write");

        // With its leader and the other follower stopped, the reader hears from nobody and
        // cannot elect anyone: its state ages, and the bound must say so.
        signal(&c, leader, rustix::process::Signal::STOP);
        signal(&c, paused, rustix::process::Signal::STOP);
        let cut_at = unix_ms();
        let aged = poll_until(Duration::from_secs(10), Duration::from_millis(50), || async {
            let started = unix_ms();
            let (seen, bound) = stale_read(&c, reader, key).await;
            assert_eq!(seen, Some(1), "a cut-off replica still answers what it has");
            assert!(
                bound + 1 >= started - cut_at,
                "read at {started} reports {bound} ms, but no leader stamp is newer than {cut_at}"
            );
            if bound >= 1_500 { Ok(bound) } else { Err(bound) }
        })
        .await
        .expect("the bound grows while the replica is cut off");
        eprintln!("cut off for {} ms: bound {aged} ms", unix_ms() - cut_at);

        // max_stale below that age: not answered from the replica, but from the leader,
        // which cannot answer now.
        let url = format!("{}?stale&max_stale=500ms", c.node(reader).kv_url(key));
        let http = http_client();
        let refused = http.get(&url).send().await.expect("an answer");
        assert!(
            refused.status().is_server_error(),
            "a replica {aged} ms old answered a read with max_stale=500ms: {}",
            refused.status()
        );
        let bad = http
            .get(format!("{}?max_stale=soon", c.node(reader).kv_url(key)))
            .send()
            .await
            .expect("an answer");
        assert_eq!(bad.status(), 400);
        assert!(bad.text().await.unwrap_or_default().contains("max_stale"));

        signal(&c, leader, rustix::process::Signal::CONT);
        signal(&c, paused, rustix::process::Signal::CONT);
        let fresh = poll_until(
            Duration::from_secs(20),
            Duration::from_millis(50),
            || async {
                match http.get(&url).send().await {
                    Ok(r) if r.status() == 200 => {
                        let bound: u64 = header(r.headers(), "X-Consul-LastContact")
                            .parse()
                            .expect("a number");
                        Ok(bound)
                    }
                    Ok(r) => Err(r.status().to_string()),
                    Err(e) => Err(e.to_string()),
                }
            },
        )
        .await
        .expect("max_stale reads are answered again once the leader is back");
        assert!(fresh <= 500, "answered with a bound of {fresh} ms");
    })
    .await;
}

/// Who holds `shard`'s replicas, as node `via` reports: (voters, learners), by name.
async fn roles(c: &TestCluster, via: usize) -> Vec<(Vec<String>, Vec<String>)> {
    let doc: ShardsDoc = get_json(format!("{}/v1/cluster/shards", c.node(via).http_url())).await;
    doc.shards
        .into_iter()
        .map(|s| {
            let named = |role: &str| {
                s.replicas
                    .iter()
                    .filter(|r| r.role.as_deref() == Some(role))
                    .map(|r| r.name.clone())
                    .collect::<Vec<_>>()
            };
            (named("voter"), named("learner"))
        })
        .collect()
}

/// n1-n3 in `home`, n4 in `west`: the voters stay home, n4 gets a learner of every shard, and
/// with every voter stopped n4 still answers stale reads, with a bound that says how old.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_region_without_voters_holds_a_learner_of_every_shard_that_serves_stale_reads() {
    let c = TestCluster::start(home_and_west()).await;
    bounded(Duration::from_secs(120), async {
        c.expect_all_led(Duration::from_secs(20)).await;
        let placed = until_learners(&c, 0, "n4").await;
        for (voters, _) in &placed {
            let mut voters = voters.clone();
            voters.sort();
            assert_eq!(voters, ["n1", "n2", "n3"], "voters stay in the home region");
        }

        let http = http_client();
        let placement: Placement =
            get_json(format!("{}/v1/cluster/placement", c.node(3).http_url())).await;
        assert_eq!(placement.home_region.as_deref(), Some("home"));
        assert_eq!(placement.survival, "zone");
        // The same through the CLI, and a refusal it names.
        let target = c.node(1).http_url();
        let (ok, out, err) = crate::common::run_program_async(
            crate::common::binary(),
            &["cluster", "placement", "--target", &target],
            Duration::from_secs(30),
        )
        .await;
        assert!(ok, "{err}");
        assert!(out.contains("home region: home"), "{out}");
        assert!(
            out.lines()
                .any(|l| l.starts_with("west") && l.contains("learners") && l.contains("n4")),
            "{out}"
        );
        let (ok, _, err) = crate::common::run_program_async(
            crate::common::binary(),
            &[
                "cluster",
                "placement",
                "--home-region",
                "mars",
                "--target",
                &target,
            ],
            Duration::from_secs(30),
        )
        .await;
        assert!(!ok && err.contains("mars"), "{err}");
        let west = placement
            .regions
            .iter()
            .find(|r| r.region.as_deref() == Some("west"))
            .expect("west is listed");
        assert_eq!(
            (west.home, west.learners, west.nodes.clone()),
            (false, 2, vec!["n4".to_string()])
        );

        // Bad placements are refused and change nothing.
        let put = |body: serde_json::Value| {
            let http = http.clone();
            let url = format!("{}/v1/cluster/placement", c.node(0).http_url());
            async move { http.put(url).json(&body).send().await.expect("an answer") }
        };
        for (body, named) in [
            (serde_json::json!({"home_region": "mars"}), "mars"),
            (serde_json::json!({"survival": "planet"}), "planet"),
            // Two regions cannot hold three voters apart.
            (
                serde_json::json!({"survival": "region"}),
                "in 2 (home, west)",
            ),
        ] {
            let refused = put(body).await;
            assert_eq!(refused.status(), 400);
            assert!(refused.text().await.unwrap_or_default().contains(named));
        }
        let after: Placement =
            get_json(format!("{}/v1/cluster/placement", c.node(0).http_url())).await;
        assert_eq!(
            after.epoch, placement.epoch,
            "a refused change leaves the map alone"
        );

        // A write reaches the learner; with every voter stopped the learner still answers it,
        // and it never stands for election.
        let key = "regions/learner";
        c.put(0, key, "7").await;
        poll_until(
            Duration::from_secs(10),
            Duration::from_millis(10),
            || async {
                match stale_read(&c, 3, key).await {
                    (Some(7), _) => Ok(()),
                    other => Err(other),
                }
            },
        )
        .await
        .expect("the learner applies the write");
        for i in 0..3 {
            signal(&c, i, rustix::process::Signal::STOP);
        }
        let stopped_at = unix_ms();
        let aged = poll_until(
            Duration::from_secs(10),
            Duration::from_millis(50),
            || async {
                let started = unix_ms();
                let (seen, bound) = stale_read(&c, 3, key).await;
                assert_eq!(seen, Some(7));
                assert!(
                    bound + 1 >= started - stopped_at,
                    "bound {bound} ms at {started}"
                );
                if bound >= 1_000 {
                    Ok(bound)
                } else {
                    Err(bound)
                }
            },
        )
        .await
        .expect("the learner keeps answering, older and older");
        let views = c.view(3).await.expect("n4's view");
        assert!(
            views.iter().all(|v| !v.is_leader()),
            "a learner never leads: {views:?}"
        );
        for i in 0..3 {
            signal(&c, i, rustix::process::Signal::CONT);
        }
        eprintln!("the learner answered with every voter stopped, {aged} ms behind");
        c.expect_all_led(Duration::from_secs(20)).await;
    })
    .await;
}

/// Survival `region` on one node per region: the shard's voters spread to r2 and r3 (their
/// learners become voters), the leader stays in r1, and with r1 stopped writes go on through
/// the other regions with nothing acknowledged lost; once r1 is back it leads again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn survival_region_spreads_voters_and_writes_go_on_without_the_home_region() {
    let c = TestCluster::start(three_regions()).await;
    bounded(Duration::from_secs(150), async {
        c.expect_all_led(Duration::from_secs(20)).await;
        until_learners_in(&c, &["n2", "n3"]).await;
        let target = c.node(1).http_url();
        let (ok, out, err) = crate::common::run_program_async(
            crate::common::binary(),
            &[
                "cluster",
                "placement",
                "--survival",
                "region",
                "--target",
                &target,
            ],
            Duration::from_secs(30),
        )
        .await;
        assert!(ok, "{err}");
        assert!(out.contains("survival: region"), "{out}");
        let spread = poll_until(
            Duration::from_secs(40),
            Duration::from_millis(100),
            || async {
                let roles = roles(&c, 2).await;
                let leader = c.leader_of(0).await;
                let (voters, learners) = &roles[0];
                let mut sorted = voters.clone();
                sorted.sort();
                if sorted == ["n1", "n2", "n3"]
                    && voters[0] == "n1"
                    && learners.is_empty()
                    && leader == Some(0)
                {
                    Ok(roles)
                } else {
                    Err((roles, leader))
                }
            },
        )
        .await
        .unwrap_or_else(|e| panic!("the voters never spread over the regions: {e:?}"));
        eprintln!("survival region: {spread:?}");

        let keys: Vec<String> = (0..20).map(|i| format!("survive/{i}")).collect();
        for key in &keys {
            c.put(0, key, "before").await;
        }
        signal(&c, 0, rustix::process::Signal::STOP);
        let cut = std::time::Instant::now();
        poll_until(
            Duration::from_secs(15),
            Duration::from_millis(50),
            || async { c.try_put(1, "survive/after", "", "after").await },
        )
        .await
        .expect("writes go on without the home region");
        let resumed = cut.elapsed();
        eprintln!(
            "writes resumed {} ms after the home region stopped",
            resumed.as_millis()
        );
        for key in &keys {
            let entry = c.get(2, key, "").await.expect("an acknowledged write");
            assert_eq!(entry.value, b"before", "{key}");
        }
        signal(&c, 0, rustix::process::Signal::CONT);
        poll_until(
            Duration::from_secs(30),
            Duration::from_millis(100),
            || async { (c.leader_of(0).await == Some(0)).then_some(()).ok_or(()) },
        )
        .await
        .expect("the home region leads again once it is back");
        let entry = c
            .get(0, "survive/after", "")
            .await
            .expect("the write made meanwhile");
        assert_eq!(entry.value, b"after");
    })
    .await;
}

/// Waits until node 0 shows the one shard's learners on exactly `names`.
async fn until_learners_in(c: &TestCluster, names: &[&str]) {
    poll_until(
        Duration::from_secs(30),
        Duration::from_millis(100),
        || async {
            let roles = roles(c, 0).await;
            let mut learners = roles[0].1.clone();
            learners.sort();
            if learners == names {
                Ok(())
            } else {
                Err(roles)
            }
        },
    )
    .await
    .unwrap_or_else(|roles| panic!("the learners never settled on {names:?}: {roles:?}"));
}
