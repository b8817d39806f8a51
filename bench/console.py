#!/usr/bin/env python3
"""The web console's figures, measured in Debian's headless chromium over WebDriver.

Run by bench/console.sh (which starts the 3-node cluster); standard library only.

  load     the overview's page load on the real cluster: from navigation start to the
           page's `overview-rendered` mark (every node's row filled), N fresh loads
  shards   the shards view of 1,000 shards on 50 nodes: the page's files come from the real
           node, the JSON from synthesized fixtures served on 50 loopback ports (one per
           fixture node, so the page gathers them across origins as it would), N loads
  cpu      each node's CPU (user + system ticks from /proc/PID/stat) over SECONDS with no page
           open, with the overview open and with the live figures open, ROUNDS times; the
           nodes of --control-pid (a cluster with `[ui] enabled = false`) measured in the
           same windows, and the difference: what the console costs a node
"""

import argparse
import base64
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0", "--window-size=1400,1000",
]


def request(method, url, body=None, timeout=60):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read() or b"null")


class Browser:
    """chromium and a chromedriver session attached to it, both stopped by PID.

    Whatever fails while they start (no DevTools port, no driver) stops what was started.
    """

    def __init__(self, driver_port):
        self.dir = tempfile.TemporaryDirectory()
        self.chromium = None
        self.driver = None
        try:
            self._start(driver_port)
        except BaseException:
            self.close()
            raise

    def _start(self, driver_port):
        profile = os.path.join(self.dir.name, "profile")
        self.chromium = subprocess.Popen(
            ["/usr/bin/chromium", *FLAGS, f"--user-data-dir={profile}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = os.path.join(profile, "DevToolsActivePort")
        deadline = time.time() + 30
        while not os.path.exists(port_file) or not open(port_file).read().strip():
            if time.time() > deadline:
                raise SystemExit("chromium gave no DevTools port")
            time.sleep(0.05)
        devtools = open(port_file).read().split()[0]
        self.driver = subprocess.Popen(
            ["/usr/bin/chromedriver", f"--port={driver_port}"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        base = f"http://127.0.0.1:{driver_port}"
        deadline = time.time() + 30
        while True:
            try:
                if request("GET", f"{base}/status")["value"]["ready"]:
                    break
            except OSError:
                pass
            if time.time() > deadline:
                raise SystemExit("chromedriver did not become ready")
            time.sleep(0.05)
        caps = {"capabilities": {"alwaysMatch": {
            "goog:chromeOptions": {"debuggerAddress": f"127.0.0.1:{devtools}"}}}}
        self.session = f"{base}/session/{request('POST', f'{base}/session', caps)['value']['sessionId']}"

    def goto(self, url):
        request("POST", f"{self.session}/url", {"url": url})

    def eval(self, script):
        return request("POST", f"{self.session}/execute/sync",
                       {"script": script, "args": []})["value"]

    def wait(self, script, seconds=30):
        deadline = time.time() + seconds
        while True:
            value = self.eval(script)
            if value:
                return value
            if time.time() > deadline:
                raise SystemExit(f"the page never answered {script!r}")
            time.sleep(0.02)

    def screenshot(self, path):
        png = request("GET", f"{self.session}/screenshot")["value"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(png))

    def close(self):
        if self.driver is not None:
            self.driver.kill()
            self.driver.wait()
        if self.chromium is not None:
            self.chromium.terminate()
            try:
                self.chromium.wait(5)
            except subprocess.TimeoutExpired:
                self.chromium.kill()
                self.chromium.wait()
        self.dir.cleanup()


def mark(browser, name):
    return browser.wait(
        f"const m = performance.getEntriesByName('{name}'); return m.length ? m[0].startTime : null")


def fresh_load(browser, url, name):
    # A new document each time: leave for a blank page first, so a hash-only change of the
    # address does not count as a load.
    browser.goto("about:blank")
    browser.goto(url)
    return mark(browser, name)


def summary(values):
    values = sorted(values)
    return (f"median {statistics.median(values):.0f} ms, min {values[0]:.0f}, "
            f"max {values[-1]:.0f} over {len(values)} loads")


# ---- the 1,000-shard fixture ----

def fixture(nodes, shards, base_port):
    names = [f"n{i + 1}" for i in range(nodes)]
    http = {n: f"127.0.0.1:{base_port + i}" for i, n in enumerate(names)}
    per = 16384 // shards
    shard_docs, roles = [], {n: [] for n in names}
    lag = {n: [] for n in names}
    for s in range(shards):
        lo = s * per
        hi = 16383 if s == shards - 1 else lo + per - 1
        replicas = [names[(s + k) % nodes] for k in range(3)]
        shard_docs.append({"shard": s, "slots": [lo, hi], "replicas": replicas,
                           "leader": replicas[0]})
        roles[replicas[0]].append([s, "Leader"])
        for r in replicas[1:]:
            roles[r].append([s, "Follower"])
        lag[replicas[0]].append({"shard": s, "followers": [[r, s % 7] for r in replicas[1:]]})
    node_status = [{"name": n, "state": "active", "peer": http[n], "http": http[n],
                    "resp": http[n], "replicas": sum(n in d["replicas"] for d in shard_docs),
                    "preferred_leaders": len(lag[n]), "meta": "voter" if i < 5 else "learner",
                    "linked": True, "version": {"protocol": 3, "build": "0.1.0"}}
                   for i, n in enumerate(names)]
    moves = [{"shard": 10 * k, "from": names[k], "to": names[(k + 4) % nodes],
              "phase": "learner", "started_ms": int(time.time() * 1000) - 5000,
              "progress": [1000, 400 + 100 * k]} for k in range(2)]
    status = {"epoch": 4242, "node": names[0], "meta_leader": names[0],
              "replication_factor": 3, "max_moves": 2, "nodes": node_status,
              "shards": shard_docs, "moves": moves,
              "splits": [{"shard": 7, "child": shards, "at_slot": 7 * per + per // 2,
                          "slots": [7 * per, 7 * per + per - 1], "started_ms": 0, "epoch": 0}],
              "cluster_version": 3}
    summaries = {n: {"node": n, "cluster": "fixture", "http": http[n],
                     "version": {"protocol": 3, "build": "0.1.0"}, "uptime_secs": 3600,
                     "healthy": True, "all_shards_led": True, "storage_ok": True,
                     "region": None, "zone": f"z{i % 3}", "rack": f"r{i % 5}",
                     "disk_free_bytes": 50 << 30, "disk_min_free_bytes": 256 << 20,
                     "log_bytes": 1 << 28, "table_bytes": 1 << 30,
                     "memory_rss_bytes": 1 << 29, "replicas": len(roles[n]),
                     "leaders": len(lag[n]), "roles": roles[n], "lag": lag[n]}
                 for i, n in enumerate(names)}
    return names, http, status, summaries


def serve_fixture(nodes, shards, base_port, real):
    names, http, status, summaries = fixture(nodes, shards, base_port)
    assets = {}
    access = {"acl": False, "anonymous": False, "accessor_id": None, "operator_read": True,
              "operator_write": True, "acl_read": True, "key_list": True}

    def handler_for(name):
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def send(self, code, body, kind="application/json"):
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                origin = self.headers.get("Origin")
                if origin:
                    self.send_header("Access-Control-Allow-Origin", origin)
                    self.send_header("Access-Control-Allow-Headers", "X-Consul-Token")
                self.end_headers()
                self.wfile.write(body)

            def do_OPTIONS(self):
                self.send(204, b"")

            def do_GET(self):
                path = self.path.split("?")[0]
                if path.startswith("/ui"):
                    if path not in assets:
                        with urllib.request.urlopen(real + path) as r:
                            assets[path] = (r.read(), r.headers["Content-Type"])
                    body, kind = assets[path]
                    return self.send(200, body, kind)
                answers = {"/v1/cluster/status": status, "/v1/ui/node": summaries[name],
                           "/v1/ui/access": access,
                           "/v1/ui/figures": {"node": name, "boot_ms": 1, "every_ms": 1000,
                                              "samples": []}}
                if path in answers:
                    return self.send(200, json.dumps(answers[path]).encode())
                return self.send(404, b'{"error":"not in the fixture","code":"not_found"}')
        return Handler

    servers = []
    for i, name in enumerate(names):
        server = ThreadingHTTPServer(("127.0.0.1", base_port + i), handler_for(name))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
    return servers


# ---- CPU ----

def ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def cpu_percent(pids, seconds):
    """Each PID's CPU over the same window, in % of one core."""
    hz = os.sysconf("SC_CLK_TCK")
    start = time.monotonic()
    before = [ticks(p) for p in pids]
    time.sleep(seconds)  # the measurement window itself, not a wait for a condition
    after = [ticks(p) for p in pids]
    took = time.monotonic() - start
    return [100.0 * (a - b) / hz / took for a, b in zip(after, before)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--node", action="append", required=True, help="HTTP URL of a node")
    ap.add_argument("--pid", action="append", type=int, default=[], help="a node's PID")
    ap.add_argument("--control-pid", action="append", type=int, default=[],
                    help="a PID of a node of a cluster with the console off, measured alongside")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--loads", type=int, default=10)
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--fixture-port", type=int, default=18100)
    ap.add_argument("--driver-port", type=int, default=18090)
    ap.add_argument("--shots", default="target/console-screenshots")
    ap.add_argument("--what", default="load,shards,cpu")
    args = ap.parse_args()
    what = set(args.what.split(","))
    os.makedirs(args.shots, exist_ok=True)
    browser = Browser(args.driver_port)
    try:
        if "load" in what:
            url = f"{args.node[0]}/ui#/overview"
            fresh_load(browser, url, "overview-rendered")  # warm: chromium's own first start
            times = [fresh_load(browser, url, "overview-rendered") for _ in range(args.loads)]
            browser.screenshot(os.path.join(args.shots, "bench-overview.png"))
            print(f"overview page load, 3 nodes: {summary(times)}", flush=True)
        if "shards" in what:
            servers = serve_fixture(50, 1000, args.fixture_port, args.node[0])
            url = f"http://127.0.0.1:{args.fixture_port}/ui#/shards"
            fresh_load(browser, url, "shards-rendered")
            times, renders = [], []
            for _ in range(max(3, args.loads // 2)):
                times.append(fresh_load(browser, url, "shards-rendered"))
                renders.append(browser.eval("return window.consoleTimings.shardsRenderMs"))
            rows = browser.eval("return document.querySelectorAll('#shard-table tbody tr').length")
            browser.screenshot(os.path.join(args.shots, "bench-shards-1000.png"))
            print(f"shards view, 1,000 shards on 50 nodes (fixture, {rows} rows): "
                  f"navigation to rendered {summary(times)}; the render alone "
                  f"median {statistics.median(renders):.0f} ms", flush=True)
            for s in servers:
                s.shutdown()
        if "cpu" in what and args.pid:
            browser.goto("about:blank")
            pids = args.pid + args.control_pid
            windows = {}
            for r in range(args.rounds):
                for label, url in [("no page open", None),
                                   ("overview open", f"{args.node[0]}/ui#/overview"),
                                   ("live figures open", f"{args.node[0]}/ui#/figures")]:
                    if url:
                        browser.goto(url)
                        browser.wait("return document.querySelector('table') !== null")
                    cpu = cpu_percent(pids, args.seconds)
                    on, off = cpu[:len(args.pid)], cpu[len(args.pid):]
                    windows.setdefault(label, []).append((on, off))
                    shown = ", ".join(f"n{i + 1} {c:.2f}%" for i, c in enumerate(on))
                    line = f"round {r + 1}, CPU over {args.seconds} s, {label}: console on: {shown}"
                    if off:
                        control = ", ".join(f"n{i + 1} {c:.2f}%" for i, c in enumerate(off))
                        line += (f"; console off: {control}; mean difference "
                                 f"{statistics.mean(on) - statistics.mean(off):+.2f} points")
                    print(line + " (of one core)", flush=True)
                    browser.goto("about:blank")
            if args.control_pid:
                for label, runs in windows.items():
                    diffs = [statistics.mean(on) - statistics.mean(off) for on, off in runs]
                    print(f"{label}: console on minus off, per node, mean over {len(runs)} "
                          f"round(s): {statistics.mean(diffs):+.2f} points of one core "
                          f"(rounds: {', '.join(f'{d:+.2f}' for d in diffs)})", flush=True)
    finally:
        browser.close()


if __name__ == "__main__":
    sys.exit(main())
