#!/usr/bin/env python3
"""The JSON side of bench/scale.sh: asks a local cluster's nodes for their state, decides
when a grown cluster has settled, and turns counters taken before and after each stage into
the per-node tables and the summary.

    scale_report.py settle CLUSTER_DIR NODES TIMEOUT_S LEADER_TIMEOUT_S
    scale_report.py snapshot CLUSTER_DIR OUT.json
    scale_report.py stage NODES BEFORE.json AFTER.json RUN_DIR SETTLE.json OUT.json
    scale_report.py report RESULTS_DIR COMMAND

Only the standard library; every request goes straight to 127.0.0.1, never through a proxy.
"""
import json
import os
import re
import sys
import time
import urllib.request

OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
SAMPLE = re.compile(r'^([a-z_]+)(?:\{shard="(\d+)"[^}]*\})?\s+([0-9.eE+-]+)$')


def get(url, timeout=5.0):
    with OPENER.open(url, timeout=timeout) as response:
        return response.read().decode()


def manifest(cluster_dir):
    with open(os.path.join(cluster_dir, "cluster.json")) as f:
        return json.load(f)


def node_http(cluster_dir):
    """Node name -> HTTP address, from cluster.json (the bootstrapping nodes, then added)."""
    return {n["name"]: n["http"] for n in manifest(cluster_dir)["nodes"]}


def cluster_status(cluster_dir):
    """`GET /v1/cluster/status` from the first node that answers."""
    last = None
    for http in node_http(cluster_dir).values():
        try:
            return json.loads(get(f"http://{http}/v1/cluster/status"))
        except (OSError, ValueError) as e:
            last = e
    raise RuntimeError(f"no node answered /v1/cluster/status: {last}")


def metrics(http):
    """The counters of one node's /metrics that the scale test uses."""
    out = {"resp_commands": 0, "writes_proposed": 0, "leaders": 0,
           "keys": None, "bytes": None}
    for line in get(f"http://{http}/metrics").splitlines():
        m = SAMPLE.match(line)
        if not m:
            continue
        name, shard, value = m.group(1), m.group(2), float(m.group(3))
        if name == "trireme_resp_commands_total":
            out["resp_commands"] = int(value)
        elif name == "trireme_raft_writers_proposed_total":
            out["writes_proposed"] = int(value)
        elif name == "trireme_shard_is_leader" and shard is not None:
            out["leaders"] += int(value)
        elif name == "trireme_shard_keys" and shard is not None:
            out["keys"] = (out["keys"] or 0) + int(value)
        elif name == "trireme_shard_bytes" and shard is not None:
            out["bytes"] = (out["bytes"] or 0) + int(value)
    return out


def snapshot(cluster_dir):
    """Every node's counters, replicas and preferred leaders, at one moment."""
    status = cluster_status(cluster_dir)
    nodes = {}
    for n in status["nodes"]:
        if n["state"] == "removed":
            continue
        entry = {"state": n["state"], "replicas": n["replicas"],
                 "preferred_leaders": n["preferred_leaders"], "http": n["http"]}
        try:
            entry.update(metrics(n["http"]))
        except OSError as e:
            entry["error"] = str(e)
        nodes[n["name"]] = entry
    return {"time": time.time(), "epoch": status["epoch"], "moves": len(status["moves"]),
            "shards": len(status["shards"]), "nodes": nodes}


def cmd_settle(cluster_dir, want, timeout, leader_timeout):
    """Waits until `want` nodes are active, no move is in progress and every active node
    holds within one replica of the others; then until each node leads the shards that
    prefer it. Both waits are bounded; prints one JSON line saying what happened."""
    want, timeout, leader_timeout = int(want), float(timeout), float(leader_timeout)
    start = time.time()
    result = {"nodes": want, "replicas_settled": False, "leaders_settled": False}
    why = ""
    while time.time() - start < timeout:
        try:
            status = cluster_status(cluster_dir)
        except RuntimeError as e:
            why = str(e)
            time.sleep(1)
            continue
        active = [n for n in status["nodes"] if n["state"] == "active"]
        counts = [n["replicas"] for n in active]
        why = (f"{len(active)}/{want} active, {len(status['moves'])} moves, "
               f"replicas {min(counts, default=0)}..{max(counts, default=0)}")
        if len(active) == want and not status["moves"] and max(counts) - min(counts) <= 1:
            result["replicas_settled"] = True
            break
        time.sleep(1)
    result["replicas_wait_s"] = round(time.time() - start, 1)
    result["replicas_last"] = why
    if result["replicas_settled"]:
        lstart = time.time()
        while time.time() - lstart < leader_timeout:
            snap = snapshot(cluster_dir)
            off = {k: (v.get("leaders"), v["preferred_leaders"])
                   for k, v in snap["nodes"].items()
                   if v["state"] == "active" and v.get("leaders") != v["preferred_leaders"]}
            why = "leaders/preferred off on " + ", ".join(
                f"{k} {a}/{b}" for k, (a, b) in sorted(off.items()))
            if not off:
                result["leaders_settled"] = True
                why = ""
                break
            time.sleep(1)
        result["leaders_wait_s"] = round(time.time() - lstart, 1)
        result["leaders_last"] = why
    print(json.dumps(result))
    return 0 if result["leaders_settled"] else 2


def ratio(values):
    """Largest over mean, for the balance targets (1.0 is perfect)."""
    values = [v for v in values if v is not None]
    if not values or sum(values) == 0:
        return None
    return max(values) / (sum(values) / len(values))


def cmd_stage(nodes, before_path, after_path, run_dir, settle_path, out_path):
    with open(before_path) as f:
        before = json.load(f)
    with open(after_path) as f:
        after = json.load(f)
    with open(os.path.join(run_dir, "result.json")) as f:
        run = json.load(f)["result"]
    with open(settle_path) as f:
        settle = json.load(f)
    total = run["total"]
    rows = []
    names = sorted(after["nodes"], key=lambda n: (len(n), n))
    d_cmd = {n: after["nodes"][n]["resp_commands"] - before["nodes"].get(n, {}).get(
        "resp_commands", 0) for n in names}
    d_wr = {n: after["nodes"][n]["writes_proposed"] - before["nodes"].get(n, {}).get(
        "writes_proposed", 0) for n in names}
    all_cmd, all_wr = sum(d_cmd.values()) or 1, sum(d_wr.values()) or 1
    have_bytes = all(after["nodes"][n].get("bytes") is not None for n in names)
    for n in names:
        a = after["nodes"][n]
        rows.append({
            "node": n, "state": a["state"],
            "entry_share": d_cmd[n] / all_cmd, "served_share": d_wr[n] / all_wr,
            "resp_commands": d_cmd[n], "writes_led": d_wr[n],
            "leaders": a["leaders"], "preferred_leaders": a["preferred_leaders"],
            "replicas": a["replicas"], "keys": a.get("keys"), "bytes": a.get("bytes"),
        })
    stage = {
        "nodes": int(nodes),
        "ops_per_sec": total["ops_per_sec"],
        "ops_per_sec_per_node": total["ops_per_sec"] / int(nodes),
        "p50_ms": total["p50_us"] / 1000, "p99_ms": total["p99_us"] / 1000,
        "mean_ms": total["mean_us"] / 1000,
        "failed": total["errors"], "errors": run.get("errors", {}),
        "settle": settle,
        "balance": {
            "served_max_over_mean": ratio([r["served_share"] for r in rows]),
            "entry_max_over_mean": ratio([r["entry_share"] for r in rows]),
            "leaders_max_over_mean": ratio([r["leaders"] for r in rows]),
            "replicas_max_over_mean": ratio([r["replicas"] for r in rows]),
            "bytes_max_over_mean": ratio([r["bytes"] for r in rows]) if have_bytes else None,
        },
        "run_dir": run_dir,
        "per_node": rows,
    }
    with open(out_path, "w") as f:
        json.dump(stage, f, indent=2)
    print(stage_text(stage))


def fmt(x, spec):
    return "-" if x is None else format(x, spec)


def stage_text(s):
    st = s["settle"]
    lines = [f"== {s['nodes']} nodes: {s['ops_per_sec']:.0f} ops/s "
             f"({s['ops_per_sec_per_node']:.0f} per node), p50 {s['p50_ms']:.2f} ms, "
             f"p99 {s['p99_ms']:.2f} ms, failed {s['failed']}"]
    settled = "settled" if st.get("replicas_settled") else "NOT settled"
    lines.append(f"   replicas {settled} after {st.get('replicas_wait_s')} s"
                 + ("" if st.get("replicas_settled") else f" ({st.get('replicas_last')})")
                 + (f"; leaders at preferred after {st.get('leaders_wait_s')} s"
                    if st.get("leaders_settled") else
                    f"; leaders NOT at preferred ({st.get('leaders_last', 'not waited')})"))
    have_bytes = s["balance"]["bytes_max_over_mean"] is not None
    head = ["node", "served%", "entry%", "leaders", "pref", "replicas"]
    head += ["keys", "MB"] if have_bytes else []
    lines.append("   " + "".join(f"{h:>9}" for h in head))
    for r in s["per_node"]:
        cells = [r["node"], f"{100 * r['served_share']:.1f}", f"{100 * r['entry_share']:.1f}",
                 str(r["leaders"]), str(r["preferred_leaders"]), str(r["replicas"])]
        if have_bytes:
            cells += [str(r["keys"]), f"{r['bytes'] / 1e6:.1f}"]
        lines.append("   " + "".join(f"{c:>9}" for c in cells))
    b = s["balance"]
    lines.append(
        f"   busiest/mean: served {fmt(b['served_max_over_mean'], '.2f')}, "
        f"entry {fmt(b['entry_max_over_mean'], '.2f')}, "
        f"leaders {fmt(b['leaders_max_over_mean'], '.2f')}, "
        f"replicas {fmt(b['replicas_max_over_mean'], '.2f')}, "
        f"bytes {fmt(b['bytes_max_over_mean'], '.2f')}")
    return "\n".join(lines)


def cmd_report(results_dir, command):
    stages = []
    for name in sorted(os.listdir(results_dir)):
        m = re.match(r"stage-(\d+)\.json$", name)
        if m:
            with open(os.path.join(results_dir, name)) as f:
                stages.append(json.load(f))
    stages.sort(key=lambda s: s["nodes"])
    out = [f"Scale test (Dynomite 80/20 over RESP): {command}",
           f"run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on "
           f"{os.uname().nodename}, {os.cpu_count()} cores", ""]
    for s in stages:
        out += [stage_text(s), ""]
    out.append("Summary (targets: busiest/mean served share and leaders <= 1.25)")
    out.append("".join(f"{h:>10}" for h in
                       ["nodes", "ops/s", "x first", "per node", "p50 ms", "p99 ms",
                        "failed", "served", "leaders", "bytes", "settled"]))
    first = stages[0]["ops_per_sec"] if stages else 0
    for s in stages:
        b = s["balance"]
        ok = s["settle"].get("replicas_settled") and s["settle"].get("leaders_settled")
        out.append("".join(f"{c:>10}" for c in [
            s["nodes"], f"{s['ops_per_sec']:.0f}",
            f"{s['ops_per_sec'] / first:.2f}" if first else "-",
            f"{s['ops_per_sec_per_node']:.0f}", f"{s['p50_ms']:.2f}", f"{s['p99_ms']:.2f}",
            s["failed"], fmt(b["served_max_over_mean"], ".2f"),
            fmt(b["leaders_max_over_mean"], ".2f"),
            fmt(b["bytes_max_over_mean"] or b["replicas_max_over_mean"], ".2f"),
            "yes" if ok else "no"]))
    if stages and stages[0]["balance"]["bytes_max_over_mean"] is None:
        out.append("(bytes: /metrics has no trireme_shard_bytes here; replicas instead)")
    text = "\n".join(out) + "\n"
    with open(os.path.join(results_dir, "summary.txt"), "w") as f:
        f.write(text)
    with open(os.path.join(results_dir, "scale.json"), "w") as f:
        json.dump({"command": command, "host": os.uname().nodename,
                   "cores": os.cpu_count(), "stages": stages}, f, indent=2)
    print(text, end="")


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "settle":
        return cmd_settle(*args)
    if cmd == "snapshot":
        with open(args[1], "w") as f:
            json.dump(snapshot(args[0]), f, indent=2)
        return 0
    if cmd == "stage":
        cmd_stage(*args)
        return 0
    if cmd == "report":
        cmd_report(*args)
        return 0
    sys.stderr.write(__doc__)
    return 64


if __name__ == "__main__":
    sys.exit(main())
