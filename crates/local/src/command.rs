//! The command line of one `trireme server`: every flag a local node is started with, in one
//! place, so `cluster up`, `cluster add`, the test harness and the chaos runner cannot drift
//! apart in how they name a node, place its data or tell it whom to cluster with.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Command;

/// How a node finds the rest of its cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Membership {
    /// Neither flag: a single-node cluster of its own.
    Alone,
    /// `--initial-cluster ID=PEER,...`: one of the nodes that bootstrap a new cluster.
    Bootstrap(String),
    /// `--join HOST:PEER_PORT`: enters a running cluster through that member. A node that has
    /// joined once restarts from its data directory; the server then ignores the flag.
    Join(String),
}

/// `trireme server` with its flags, optionally behind a wrapper such as `ip netns exec NS`.
#[derive(Debug, Clone)]
pub struct ServerCommand {
    /// Run first, with the program and its arguments after it (`ip netns exec NS` for a node
    /// in a network namespace; that command replaces itself with the server, so the PID
    /// started is the server's). Empty for a plain child process.
    pub wrapper: Vec<String>,
    /// The `trireme` executable.
    pub program: PathBuf,
    /// `--node-id`.
    pub node_id: String,
    /// `--data-dir`.
    pub data_dir: PathBuf,
    /// `--http`, `--resp`, `--peer`: `IP:port`; port 0 lets the server pick (it says which in
    /// `endpoints.json`).
    pub http: String,
    /// See [`ServerCommand::http`].
    pub resp: String,
    /// See [`ServerCommand::http`].
    pub peer: String,
    /// `--initial-cluster`, `--join` or neither.
    pub membership: Membership,
    /// `--shards`; `None` keeps the server's default.
    pub shards: Option<u32>,
    /// `--replication-factor`; `None` keeps the server's default.
    pub replication_factor: Option<u32>,
    /// `--cluster-name`; `None` keeps the server's default.
    pub cluster_name: Option<String>,
    /// `--config`.
    pub config: Option<PathBuf>,
    /// `--log`; `None` keeps the server's default.
    pub log: Option<String>,
    /// Anything else, appended last.
    pub extra: Vec<String>,
}

impl ServerCommand {
    /// A node named `node_id` with its data in `data_dir`, on loopback ports the server picks,
    /// alone, with the server's defaults otherwise.
    pub fn new(
        program: impl Into<PathBuf>,
        node_id: impl Into<String>,
        data_dir: impl Into<PathBuf>,
    ) -> Self {
        ServerCommand {
            wrapper: Vec::new(),
            program: program.into(),
            node_id: node_id.into(),
            data_dir: data_dir.into(),
            http: "127.0.0.1:0".into(),
            resp: "127.0.0.1:0".into(),
            peer: "127.0.0.1:0".into(),
            membership: Membership::Alone,
            shards: None,
            replication_factor: None,
            cluster_name: None,
            config: None,
            log: None,
            extra: Vec::new(),
        }
    }

    /// The arguments after the program: `server --node-id ...`.
    pub fn server_args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec!["server".into(), "--node-id".into()];
        args.push(self.node_id.clone().into());
        args.push("--data-dir".into());
        args.push(self.data_dir.clone().into());
        for (flag, addr) in [
            ("--http", &self.http),
            ("--resp", &self.resp),
            ("--peer", &self.peer),
        ] {
            args.push(flag.into());
            args.push(addr.into());
        }
        match &self.membership {
            Membership::Alone => {}
            Membership::Bootstrap(members) => {
                args.push("--initial-cluster".into());
                args.push(members.into());
            }
            Membership::Join(peer) => {
                args.push("--join".into());
                args.push(peer.into());
            }
        }
        let numbers = [
            ("--shards", self.shards),
            ("--replication-factor", self.replication_factor),
        ];
        for (flag, value) in numbers {
            if let Some(value) = value {
                args.push(flag.into());
                args.push(value.to_string().into());
            }
        }
        if let Some(name) = &self.cluster_name {
            args.push("--cluster-name".into());
            args.push(name.into());
        }
        if let Some(config) = &self.config {
            args.push("--config".into());
            args.push(config.into());
        }
        if let Some(log) = &self.log {
            args.push("--log".into());
            args.push(log.into());
        }
        args.extend(self.extra.iter().map(OsString::from));
        args
    }

    /// The whole command line, wrapper first, for messages.
    pub fn display(&self) -> String {
        self.wrapper
            .iter()
            .map(String::as_str)
            .map(std::borrow::Cow::Borrowed)
            .chain(std::iter::once(self.program.to_string_lossy()))
            .chain(
                self.server_args()
                    .iter()
                    .map(|a| std::borrow::Cow::Owned(a.to_string_lossy().into_owned())),
            )
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The process to spawn, without its standard streams set.
    pub(crate) fn command(&self) -> Command {
        let mut command = match self.wrapper.split_first() {
            Some((first, rest)) => {
                let mut command = Command::new(first);
                command.args(rest).arg(&self.program);
                command
            }
            None => Command::new(&self.program),
        };
        command.args(self.server_args());
        command
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: &[OsString]) -> Vec<String> {
        args.iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn flags_follow_the_fields() {
        let mut cmd = ServerCommand::new("/bin/trireme", "n4", "/d/n4");
        cmd.http = "127.0.0.1:7730".into();
        cmd.membership = Membership::Join("127.0.0.1:7702".into());
        cmd.replication_factor = Some(3);
        cmd.log = Some("warn".into());
        let args = strings(&cmd.server_args());
        assert_eq!(
            args,
            [
                "server",
                "--node-id",
                "n4",
                "--data-dir",
                "/d/n4",
                "--http",
                "127.0.0.1:7730",
                "--resp",
                "127.0.0.1:0",
                "--peer",
                "127.0.0.1:0",
                "--join",
                "127.0.0.1:7702",
                "--replication-factor",
                "3",
                "--log",
                "warn"
            ]
        );
        assert!(!args.contains(&"--initial-cluster".to_string()));
    }

    #[test]
    fn a_wrapper_runs_first_with_the_program_after_it() {
        let mut cmd = ServerCommand::new("/bin/trireme", "n1", "/d/n1");
        cmd.wrapper = vec!["ip".into(), "netns".into(), "exec".into(), "ns1".into()];
        let command = cmd.command();
        assert_eq!(command.get_program(), "ip");
        let args: Vec<String> = command
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            &args[..5],
            ["netns", "exec", "ns1", "/bin/trireme", "server"]
        );
        assert!(
            cmd.display()
                .starts_with("ip netns exec ns1 /bin/trireme server")
        );
    }
}
