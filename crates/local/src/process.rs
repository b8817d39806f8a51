//! One `trireme server` process: spawned from a [`ServerCommand`], watched until it serves,
//! signalled, stopped and restarted by the PID this crate started, and nothing else.

use std::fs::OpenOptions;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Stdio};
use std::time::Duration;

use rustix::process::{Pid, Signal, kill_process};

use crate::command::ServerCommand;
use crate::logs::{RUN_MARKER, log_section, log_tail};
use crate::{Error, Result};

/// How often waits look at a node.
const POLL_EVERY: Duration = Duration::from_millis(20);

/// Where a node's standard output and error go.
#[derive(Debug, Clone)]
pub enum Output {
    /// Both streams appended to one file, each run headed by a [`RUN_MARKER`] line, so the
    /// output of earlier runs stays for whoever investigates.
    Append(PathBuf),
    /// Each stream to its own file, truncated at every start (a harness that numbers its runs
    /// gives each run its own pair).
    Split {
        /// Standard output.
        stdout: PathBuf,
        /// Standard error.
        stderr: PathBuf,
    },
}

impl Output {
    /// The file whose tail says why a node failed: the log, or standard error.
    pub fn diagnostics(&self) -> &Path {
        match self {
            Output::Append(log) => log,
            Output::Split { stderr, .. } => stderr,
        }
    }
}

/// How a node's process stands, as far as its supervisor knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeState {
    /// Running and not paused.
    Up,
    /// Stopped with SIGSTOP.
    Paused,
    /// Not started, killed, stopped or exited (and reaped).
    Down,
}

/// How a [`ServerProcess::stop`] ended.
#[derive(Debug, Clone, Copy)]
pub struct StopOutcome {
    /// The exit status.
    pub status: ExitStatus,
    /// Whether the grace period ran out and the process was SIGKILLed.
    pub killed: bool,
}

impl StopOutcome {
    /// Whether the node stopped as it should: exit 0, or death by the SIGTERM itself, which is
    /// how a node still starting up (before it handles signals) stops.
    pub fn clean(&self) -> bool {
        use std::os::unix::process::ExitStatusExt as _;
        !self.killed
            && (self.status.success() || self.status.signal() == Some(Signal::TERM.as_raw()))
    }
}

/// `<data dir>/endpoints.json`, which a server writes once it listens: its real addresses
/// (port 0 becomes the port it got) and its PID.
pub type Endpoints = trireme_types::admin::EndpointsDoc;

/// Reads `<data_dir>/endpoints.json`; `None` when it is missing or not (yet) whole.
pub fn read_endpoints(data_dir: &Path) -> Option<Endpoints> {
    let text = std::fs::read_to_string(data_dir.join("endpoints.json")).ok()?;
    serde_json::from_str(&text).ok()
}

/// One server node and its process, if one runs. Dropping it SIGKILLs that process (and only
/// it); the data survives, every write the node acknowledged is durable.
#[derive(Debug)]
pub struct ServerProcess {
    command: ServerCommand,
    output: Output,
    own_group: bool,
    child: Option<Child>,
    paused: bool,
}

impl ServerProcess {
    /// A node to be started with `command`, its output going to `output`. Nothing runs yet.
    pub fn new(command: ServerCommand, output: Output) -> Self {
        ServerProcess {
            command,
            output,
            own_group: false,
            child: None,
            paused: false,
        }
    }

    /// Starts the process in a process group of its own, so a Ctrl-C in the terminal reaches
    /// the supervisor alone and it stops the nodes in order instead of the terminal killing
    /// all at once.
    #[must_use]
    pub fn in_own_process_group(mut self) -> Self {
        self.own_group = true;
        self
    }

    /// The command line it runs; change it (e.g. `--join` to `--initial-cluster`) before a
    /// restart with [`ServerProcess::command_mut`].
    pub fn command(&self) -> &ServerCommand {
        &self.command
    }

    /// See [`ServerProcess::command`].
    pub fn command_mut(&mut self) -> &mut ServerCommand {
        &mut self.command
    }

    /// Where its output goes.
    pub fn output(&self) -> &Output {
        &self.output
    }

    /// Changes where the next start's output goes.
    pub fn set_output(&mut self, output: Output) {
        self.output = output;
    }

    /// Starts the server; returns its PID. Restarting after a kill or stop is calling this
    /// again: same flags, same data directory. Does nothing when it already runs.
    pub fn spawn(&mut self) -> Result<u32> {
        if let Some(child) = &self.child {
            return Ok(child.id());
        }
        let (stdout, stderr) = match &self.output {
            Output::Append(log) => {
                let mut out = OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(log)
                    .map_err(|e| Error::io(format!("cannot open {}", log.display()), e))?;
                writeln!(
                    out,
                    "{RUN_MARKER} {} at {} ====",
                    self.command.node_id,
                    humantime::format_rfc3339_seconds(std::time::SystemTime::now())
                )
                .map_err(|e| Error::io(format!("cannot write {}", log.display()), e))?;
                let err = out
                    .try_clone()
                    .map_err(|e| Error::io(format!("cannot open {}", log.display()), e))?;
                (out, err)
            }
            Output::Split { stdout, stderr } => {
                let create = |path: &Path| {
                    std::fs::File::create(path)
                        .map_err(|e| Error::io(format!("cannot create {}", path.display()), e))
                };
                (create(stdout)?, create(stderr)?)
            }
        };
        let mut command = self.command.command();
        command
            // The output goes to a file: no colour codes in it.
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr);
        if self.own_group {
            use std::os::unix::process::CommandExt as _;
            command.process_group(0);
        }
        let child = command.spawn().map_err(|source| Error::Spawn {
            command: self.command.display(),
            source,
        })?;
        let pid = child.id();
        self.child = Some(child);
        self.paused = false;
        Ok(pid)
    }

    /// The PID of the running process.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether a process started here has not been reaped yet.
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Up, paused or down.
    pub fn state(&self) -> NodeState {
        match (&self.child, self.paused) {
            (None, _) => NodeState::Down,
            (Some(_), true) => NodeState::Paused,
            (Some(_), false) => NodeState::Up,
        }
    }

    /// The exit status, if the process has exited since the last look (it is then reaped).
    pub fn try_reap(&mut self) -> Option<ExitStatus> {
        let child = self.child.as_mut()?;
        // An error means the child cannot be waited for now; a later look deals with it.
        let status = child.try_wait().ok().flatten()?;
        self.child = None;
        self.paused = false;
        Some(status)
    }

    /// Sends `signal` to the process, by the PID started here (not yet reaped, so it cannot
    /// belong to another process). Does nothing when none runs.
    pub fn signal(&self, signal: Signal) -> Result<()> {
        let Some(child) = &self.child else {
            return Ok(());
        };
        kill_process(Pid::from_child(child), signal).map_err(|e| Error::Signal {
            signal: format!("{signal:?}"),
            pid: child.id(),
            source: e.into(),
        })
    }

    /// SIGSTOP: the process freezes, its sockets stay open.
    pub fn pause(&mut self) -> Result<()> {
        if self.child.is_some() && !self.paused {
            self.signal(Signal::STOP)?;
            self.paused = true;
        }
        Ok(())
    }

    /// SIGCONT after [`ServerProcess::pause`].
    pub fn resume(&mut self) -> Result<()> {
        if self.paused {
            self.signal(Signal::CONT)?;
            self.paused = false;
        }
        Ok(())
    }

    /// `kill -9` and reap; the exit status, or `None` when nothing ran.
    pub fn kill(&mut self) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        self.paused = false;
        // An error means it has exited already; the wait reaps it either way.
        let _ = child.kill();
        child.wait().ok()
    }

    /// Waits up to `timeout` for the process to exit on its own and reaps it.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_reap() {
                return Some(status);
            }
            if self.child.is_none() || tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(POLL_EVERY).await;
        }
    }

    /// SIGTERM, then SIGKILL if it still runs after `grace`; `None` when nothing ran. A paused
    /// process is continued so that it can handle the SIGTERM.
    pub async fn stop(&mut self, grace: Duration) -> Result<Option<StopOutcome>> {
        if self.child.is_none() {
            return Ok(None);
        }
        self.send_stop()?;
        self.finish_stop(grace).await
    }

    /// The first half of [`ServerProcess::stop`], for a supervisor that signals every node
    /// before it waits for any: SIGTERM (and SIGCONT for a paused process).
    pub fn send_stop(&mut self) -> Result<()> {
        self.signal(Signal::TERM)?;
        if self.paused {
            self.resume()?;
        }
        Ok(())
    }

    /// The second half of [`ServerProcess::stop`]: waits up to `grace`, then SIGKILLs.
    pub async fn finish_stop(&mut self, grace: Duration) -> Result<Option<StopOutcome>> {
        if self.child.is_none() {
            return Ok(None);
        }
        if let Some(status) = self.wait_exit(grace).await {
            return Ok(Some(StopOutcome {
                status,
                killed: false,
            }));
        }
        Ok(self.kill().map(|status| StopOutcome {
            status,
            killed: true,
        }))
    }

    /// Forgets the process without stopping it and returns its PID: for `cluster add`, whose
    /// node outlives it and is stopped later by the `cluster up` that adopts it.
    pub fn detach(mut self) -> Option<u32> {
        // Dropping a `Child` neither kills nor waits.
        self.child.take().map(|child| child.id())
    }

    /// Waits until the server has written `endpoints.json` with this process's PID, and
    /// returns it. Fails at once when the process exits, and at `timeout`; either way with
    /// the tail of its output.
    pub async fn wait_endpoints(&mut self, timeout: Duration) -> Result<Endpoints> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let pid = self.running_pid()?;
            if let Some(e) = read_endpoints(&self.command.data_dir).filter(|e| e.pid == pid) {
                return Ok(e);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(self.not_ready(&format!(
                    "wrote no endpoints.json with pid {pid} within {}",
                    humantime::format_duration(timeout)
                )));
            }
            tokio::time::sleep(POLL_EVERY).await;
        }
    }

    /// Waits until `GET http://<http>/v1/health` answers 200 (the node serves), failing at
    /// once when the process exits, and at `timeout`; either way with the tail of its output.
    pub async fn wait_healthy(
        &mut self,
        client: &reqwest::Client,
        http: &str,
        timeout: Duration,
    ) -> Result<()> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            self.running_pid()?;
            // A starting node accepts connections before it answers them: the deadline cuts
            // a look short.
            if let Ok(true) = tokio::time::timeout_at(deadline, healthy(client, http)).await {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(self.not_ready(&format!(
                    "did not answer GET {http}/v1/health with 200 within {}",
                    humantime::format_duration(timeout)
                )));
            }
            tokio::time::sleep(POLL_EVERY).await;
        }
    }

    /// [`ServerProcess::wait_endpoints`], then [`ServerProcess::wait_healthy`] on the HTTP
    /// address it names, within `timeout` in all: the node serves.
    pub async fn wait_serving(
        &mut self,
        client: &reqwest::Client,
        timeout: Duration,
    ) -> Result<Endpoints> {
        let start = tokio::time::Instant::now();
        let endpoints = self.wait_endpoints(timeout).await?;
        let left = timeout.saturating_sub(start.elapsed());
        let http = if endpoints.tls {
            format!("https://{}", endpoints.http)
        } else {
            endpoints.http.clone()
        };
        self.wait_healthy(client, &http, left).await?;
        Ok(endpoints)
    }

    /// The PID, or an error with the output's tail when the process has exited.
    fn running_pid(&mut self) -> Result<u32> {
        let pid = self.pid();
        match (self.try_reap(), pid) {
            (Some(status), _) => Err(self.not_ready(&format!(
                "(pid {}) exited during start-up with {status}",
                pid.unwrap_or_default()
            ))),
            (None, Some(pid)) => Ok(pid),
            (None, None) => Err(self.not_ready("is not running")),
        }
    }

    fn not_ready(&self, what: &str) -> Error {
        Error::NotReady(format!(
            "node {} {what}{}",
            self.command.node_id,
            log_section(&self.command.node_id, self.output.diagnostics())
        ))
    }

    /// The last `lines` lines of its output (of this run, for an appended log).
    pub fn log_tail(&self, lines: usize) -> String {
        log_tail(self.output.diagnostics(), lines)
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        // SIGKILL ends a paused process too; no server outlives its supervisor by accident.
        let _ = self.kill();
    }
}

/// A client for loopback and LAN nodes: never through a proxy, never waiting long.
pub fn http_client(timeout: Duration) -> Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .no_proxy()
        .connect_timeout(timeout)
        .timeout(timeout)
        .build()?)
}

/// Whether the node at `http` (`IP:port`) answers `GET /v1/health` with 200.
pub async fn healthy(client: &reqwest::Client, http: &str) -> bool {
    matches!(
        client.get(format!("{}/v1/health", base_url(http))).send().await,
        Ok(r) if r.status() == reqwest::StatusCode::OK
    )
}

/// The base URL of a node's HTTP address: a bare `host:port` is plain HTTP; a node with TLS
/// is given with its scheme.
pub(crate) fn base_url(http: &str) -> String {
    if http.contains("://") {
        http.to_string()
    } else {
        format!("http://{http}")
    }
}

/// Whether process `pid` exists and has not exited: a zombie (exited, not yet reaped by a
/// parent that is not us) counts as gone.
pub fn process_alive(pid: u32) -> bool {
    let Some(raw) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
        return false;
    };
    let exists = match rustix::process::test_kill_process(raw) {
        Ok(()) => true,
        // It exists but belongs to someone else.
        Err(e) => e == rustix::io::Errno::PERM,
    };
    exists && !is_zombie(pid)
}

fn is_zombie(pid: u32) -> bool {
    // `/proc/PID/stat`: `pid (comm) S ...`; comm may hold spaces and parentheses.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let state = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .next()?
                .to_string();
            Some(state == "Z" || state == "X")
        })
        .unwrap_or(false)
}

/// Whether process `pid` is a `trireme server` with `--data-dir data_dir`, from its
/// `/proc/PID/cmdline`: the check that a PID read from a file still names the node it was
/// recorded for, and not a process that got the number since.
pub fn runs_server_for(pid: u32, data_dir: &Path) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
    let data_dir = data_dir.as_os_str().as_encoded_bytes();
    args.contains(&&b"server"[..])
        && args
            .windows(2)
            .any(|w| w[0] == b"--data-dir" && w[1] == data_dir)
        && process_alive(pid)
}

/// Sends `signal` to `pid`. Only for a PID [`runs_server_for`] has just vouched for: this
/// crate signals no process it cannot tie to a node it or `cluster add` started.
pub(crate) fn signal_pid(pid: u32, signal: Signal) -> Result<()> {
    let raw = i32::try_from(pid)
        .ok()
        .and_then(Pid::from_raw)
        .ok_or_else(|| Error::Refused(format!("{pid} is not a process id")))?;
    kill_process(raw, signal).map_err(|e| Error::Signal {
        signal: format!("{signal:?}"),
        pid,
        source: e.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_not_a_server() {
        let me = std::process::id();
        assert!(process_alive(me));
        assert!(!runs_server_for(me, Path::new("/nowhere")));
        assert!(!process_alive(0));
    }

    #[tokio::test]
    async fn a_process_that_exits_at_start_up_is_reported_with_its_output() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("n1.log");
        // `sh -c 'echo ...; exit 3' server ...`: the server flags become the script's $0, $1...
        let mut cmd = ServerCommand::new("script", "n1", dir.path().join("n1"));
        cmd.wrapper = vec!["sh".into(), "-c".into()];
        cmd.program = "echo refusing to start >&2; exit 3".into();
        let mut node = ServerProcess::new(cmd, Output::Append(log.clone()));
        node.spawn().unwrap();
        let err = node
            .wait_endpoints(Duration::from_secs(20))
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("exited during start-up"), "{err}");
        assert!(err.contains("refusing to start"), "{err}");
        assert_eq!(node.state(), NodeState::Down);
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(text.starts_with(RUN_MARKER), "{text}");
    }

    #[tokio::test]
    async fn stop_pause_and_kill_act_on_the_process_started() {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = ServerCommand::new("script", "n1", dir.path().join("n1"));
        cmd.wrapper = vec!["sh".into(), "-c".into()];
        cmd.program = "exec sleep 30".into();
        let output = Output::Split {
            stdout: dir.path().join("out"),
            stderr: dir.path().join("err"),
        };
        let mut node = ServerProcess::new(cmd, output);
        let pid = node.spawn().unwrap();
        assert!(process_alive(pid));
        node.pause().unwrap();
        assert_eq!(node.state(), NodeState::Paused);
        // A paused process still stops on SIGTERM: it is continued after the signal.
        let outcome = node.stop(Duration::from_secs(20)).await.unwrap().unwrap();
        assert!(outcome.clean(), "{outcome:?}");
        assert!(!process_alive(pid));
        assert_eq!(node.state(), NodeState::Down);

        let pid = node.spawn().unwrap();
        let status = node.kill().unwrap();
        assert!(!status.success());
        assert!(!process_alive(pid));
        assert!(node.kill().is_none());
    }
}
