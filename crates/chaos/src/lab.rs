//! The network of one run: a hub namespace holding a bridge, and one namespace per node joined
//! to the bridge by a veth pair. Nothing is created outside these namespaces (the veth pairs
//! are made inside the hub with their peer end moved straight into the node's namespace), and
//! dropping the [`Lab`] deletes them all, which also removes their interfaces and rules.
//!
//! The clients run in the hub namespace (see [`Lab::enter_hub`]); faults are iptables rules in
//! the node namespaces that match only node addresses, so a partitioned node still answers its
//! clients, as a partitioned server would in a real network.

use std::net::Ipv4Addr;
use std::os::fd::AsFd;
use std::process::Command;

use crate::ChaosError;

/// The subnet of every lab: private, and only ever configured inside the lab's namespaces.
const SUBNET: [u8; 3] = [10, 213, 0];
/// The hub's (clients') address on the bridge.
const HUB_HOST: u8 = 254;

/// One node's place in the lab.
#[derive(Debug, Clone)]
pub struct LabNode {
    /// Node name, `n1`, `n2`, ...
    pub name: String,
    /// Its network namespace.
    pub netns: String,
    /// Its address on the bridge.
    pub ip: Ipv4Addr,
}

/// The namespaces of one run. Created by [`Lab::create`], removed on drop.
#[derive(Debug)]
pub struct Lab {
    hub: String,
    nodes: Vec<LabNode>,
}

/// Runs `ip`/`iptables` and turns a non-zero exit into an error carrying stderr.
fn sh(args: &[&str]) -> Result<(), ChaosError> {
    let command = args.join(" ");
    let (program, rest) = args.split_first().ok_or_else(|| ChaosError::Command {
        command: command.clone(),
        message: "empty command".into(),
    })?;
    let output = Command::new(program)
        .args(rest)
        .output()
        .map_err(|e| ChaosError::Command {
            command: command.clone(),
            message: e.to_string(),
        })?;
    if output.status.success() {
        Ok(())
    } else {
        Err(ChaosError::Command {
            command,
            message: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        })
    }
}

fn ns_exec(netns: &str, args: &[&str]) -> Result<(), ChaosError> {
    let mut full = vec!["ip", "netns", "exec", netns];
    full.extend_from_slice(args);
    sh(&full)
}

impl Lab {
    /// Creates the hub and `nodes` node namespaces, named after `tag` (keep it short and unique
    /// per concurrent run, e.g. the runner's PID): `tc<tag>h`, `tc<tag>n1`, ...
    pub fn create(tag: &str, nodes: u32) -> Result<Lab, ChaosError> {
        if !(1..=9).contains(&nodes) {
            return Err(ChaosError::Config(format!(
                "a lab holds 1 to 9 nodes, not {nodes}"
            )));
        }
        let hub = format!("tc{tag}h");
        let mut lab = Lab {
            hub: hub.clone(),
            nodes: Vec::new(),
        };
        sh(&["ip", "netns", "add", &hub])?;
        ns_exec(&hub, &["ip", "link", "set", "lo", "up"])?;
        ns_exec(&hub, &["ip", "link", "add", "br0", "type", "bridge"])?;
        let hub_cidr = format!("{}/24", Self::addr(HUB_HOST));
        ns_exec(&hub, &["ip", "addr", "add", &hub_cidr, "dev", "br0"])?;
        ns_exec(&hub, &["ip", "link", "set", "br0", "up"])?;
        for i in 1..=nodes {
            let host = u8::try_from(i).map_err(|_| ChaosError::Config("too many nodes".into()))?;
            let node = LabNode {
                name: format!("n{i}"),
                netns: format!("tc{tag}n{i}"),
                ip: Self::addr(host),
            };
            sh(&["ip", "netns", "add", &node.netns])?;
            // Registered before it is wired, so a failure below still removes it on drop.
            lab.nodes.push(node.clone());
            let port = format!("v{i}");
            sh(&[
                "ip",
                "-n",
                &hub,
                "link",
                "add",
                &port,
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "netns",
                &node.netns,
            ])?;
            ns_exec(&hub, &["ip", "link", "set", &port, "master", "br0"])?;
            ns_exec(&hub, &["ip", "link", "set", &port, "up"])?;
            let cidr = format!("{}/24", node.ip);
            ns_exec(&node.netns, &["ip", "addr", "add", &cidr, "dev", "eth0"])?;
            ns_exec(&node.netns, &["ip", "link", "set", "eth0", "up"])?;
            ns_exec(&node.netns, &["ip", "link", "set", "lo", "up"])?;
        }
        Ok(lab)
    }

    fn addr(host: u8) -> Ipv4Addr {
        Ipv4Addr::new(SUBNET[0], SUBNET[1], SUBNET[2], host)
    }

    /// The nodes, in order n1, n2, ...
    #[must_use]
    pub fn nodes(&self) -> &[LabNode] {
        &self.nodes
    }

    /// Moves the calling thread into the hub namespace. Threads it creates afterwards (a tokio
    /// runtime built on it) inherit the namespace; the rest of the process stays where it was.
    pub fn enter_hub(&self) -> Result<(), ChaosError> {
        Self::enter(&self.hub)
    }

    /// Moves the calling thread into the network namespace `netns` (see [`Lab::enter_hub`]).
    pub fn enter(netns: &str) -> Result<(), ChaosError> {
        let path = format!("/run/netns/{netns}");
        let file = std::fs::File::open(&path).map_err(|e| ChaosError::io(&path, e))?;
        rustix::thread::move_into_link_name_space(
            file.as_fd(),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )
        .map_err(|e| ChaosError::Command {
            command: format!("setns {path}"),
            message: e.to_string(),
        })
    }

    /// Sends new TCP connections that arrive at `node` for port `from` to port `to` instead
    /// (a NAT rule, untouched by [`Lab::heal`]).
    pub fn redirect_peer_port(&self, node: &LabNode, from: u16, to: u16) -> Result<(), ChaosError> {
        let (from, to) = (from.to_string(), to.to_string());
        ns_exec(
            &node.netns,
            &[
                "iptables",
                "-t",
                "nat",
                "-A",
                "PREROUTING",
                "-p",
                "tcp",
                "--dport",
                &from,
                "-j",
                "REDIRECT",
                "--to-ports",
                &to,
            ],
        )
    }

    /// Drops every packet that `at` receives from `from` (both directions of any TCP
    /// connection between them stall, as with a one-way drop in Jepsen).
    pub fn drop_from(&self, at: &LabNode, from: &LabNode) -> Result<(), ChaosError> {
        let src = from.ip.to_string();
        ns_exec(
            &at.netns,
            &["iptables", "-A", "INPUT", "-s", &src, "-j", "DROP"],
        )
    }

    /// Cuts every link between the two sides, in both directions.
    pub fn partition(&self, side_a: &[LabNode], side_b: &[LabNode]) -> Result<(), ChaosError> {
        for a in side_a {
            for b in side_b {
                self.drop_from(a, b)?;
                self.drop_from(b, a)?;
            }
        }
        Ok(())
    }

    /// Drops each packet between nodes with probability `percent`/100 (clients unaffected).
    pub fn lossy(&self, percent: u32) -> Result<(), ChaosError> {
        let probability = format!("{:.2}", f64::from(percent) / 100.0);
        for at in &self.nodes {
            for from in self.nodes.iter().filter(|n| n.name != at.name) {
                let src = from.ip.to_string();
                ns_exec(
                    &at.netns,
                    &[
                        "iptables",
                        "-A",
                        "INPUT",
                        "-s",
                        &src,
                        "-m",
                        "statistic",
                        "--mode",
                        "random",
                        "--probability",
                        &probability,
                        "-j",
                        "DROP",
                    ],
                )?;
            }
        }
        Ok(())
    }

    /// Removes every fault rule: all links work again.
    pub fn heal(&self) -> Result<(), ChaosError> {
        for node in &self.nodes {
            ns_exec(&node.netns, &["iptables", "-F", "INPUT"])?;
        }
        Ok(())
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for node in &self.nodes {
            let _ = sh(&["ip", "netns", "del", &node.netns]);
        }
        let _ = sh(&["ip", "netns", "del", &self.hub]);
    }
}
