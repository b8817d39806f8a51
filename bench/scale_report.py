#!/usr/bin/env python3
"""The JSON side of bench/scale.sh: asks a local cluster's nodes for their state, decides
when a grown cluster has settled, and turns counters taken before and after each stage into
the per-node tables and the summary. `watch` samples the whole test once a second (commands
served per second, and the cluster's joins, moves and splits as events), and `timeline`
draws it as one SVG with the events marked.

    scale_report.py settle CLUSTER_DIR NODES TIMEOUT_S LEADER_TIMEOUT_S
    scale_report.py snapshot CLUSTER_DIR OUT.json
    scale_report.py stage NODES BEFORE.json AFTER.json RUN_DIR SETTLE.json OUT.json
    scale_report.py report RESULTS_DIR COMMAND
    scale_report.py watch CLUSTER_DIR OUT.jsonl      (until killed)
    scale_report.py timeline OUT.jsonl MARKS.jsonl OUT.svg

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
    timeline = os.path.join(results_dir, "timeline.jsonl")
    if os.path.exists(timeline):
        counts = {}
        for line in open(timeline):
            for kind, _ in json.loads(line).get("events", []) if line.strip() else []:
                counts[kind] = counts.get(kind, 0) + 1
        out.append("cluster events over the test (timeline.svg): "
                   + (", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none"))
    text = "\n".join(out) + "\n"
    with open(os.path.join(results_dir, "summary.txt"), "w") as f:
        f.write(text)
    with open(os.path.join(results_dir, "scale.json"), "w") as f:
        json.dump({"command": command, "host": os.uname().nodename,
                   "cores": os.cpu_count(), "stages": stages}, f, indent=2)
    print(text, end="")


def event_diff(before, after):
    """The cluster events between two `/v1/cluster/status` documents, as short texts by kind:
    nodes that became active, moves that started or finished, splits that started or
    finished. Leader changes are not events (there are too many)."""
    events = []
    if before is None:
        return events
    states = {n["name"]: n["state"] for n in before["nodes"]}
    for n in after["nodes"]:
        was = states.get(n["name"])
        if n["state"] != was and n["state"] in ("active", "draining", "removed"):
            kind = {"active": "join", "draining": "drain", "removed": "remove"}[n["state"]]
            events.append((kind, f"{n['name']} {n['state']}"))
    moves = lambda s: {(m["shard"], m["to"]): m for m in s["moves"]}
    old, new = moves(before), moves(after)
    for key in new.keys() - old.keys():
        m = new[key]
        events.append(("move", f"shard {m['shard']}: {m.get('from') or 'new'} -> {m['to']}"))
    for key in old.keys() - new.keys():
        events.append(("moved", f"shard {key[0]} now on {key[1]}"))
    shards = lambda s: {x["shard"] for x in s["shards"]}
    for shard in sorted(shards(after) - shards(before)):
        events.append(("split", f"shard {shard} split off"))
    return events


def cmd_watch(cluster_dir, out_path):
    """Once a second: RESP commands served per second over every node, active nodes, and
    the cluster events since the last look; one JSON line each, until killed."""
    previous_status, previous_total, previous_time = None, None, None
    start = time.time()
    with open(out_path, "a") as out:
        while True:
            now = time.time()
            line = {"t": round(now - start, 2), "unix": round(now, 3)}
            try:
                status = cluster_status(cluster_dir)
                total = 0
                for n in status["nodes"]:
                    if n["state"] in ("active", "draining"):
                        try:
                            total += metrics(n["http"])["resp_commands"]
                        except OSError:
                            pass
                if previous_total is not None and total >= previous_total:
                    line["ops_per_sec"] = round((total - previous_total) / (now - previous_time))
                previous_total, previous_time = total, now
                line["active"] = sum(1 for n in status["nodes"] if n["state"] == "active")
                line["moves"] = len(status["moves"])
                line["shards"] = len(status["shards"])
                line["events"] = event_diff(previous_status, status)
                previous_status = status
            except (OSError, ValueError, RuntimeError) as e:
                line["error"] = str(e)
            out.write(json.dumps(line) + "\n")
            out.flush()
            time.sleep(max(0.0, 1.0 - (time.time() - now)))


COLORS = {"join": "#1f77b4", "drain": "#8c564b", "remove": "#7f7f7f", "move": "#ff7f0e",
          "moved": "#2ca02c", "split": "#9467bd"}


def cmd_timeline(samples_path, marks_path, svg_path):
    """Commands per second over the whole test, stage load windows shaded, and a marker per
    second in which cluster events happened (coloured by kind, with a count), as SVG."""
    samples = [json.loads(l) for l in open(samples_path) if l.strip()]
    marks = [json.loads(l) for l in open(marks_path) if l.strip()] if os.path.exists(marks_path) else []
    if not samples:
        return
    t0 = samples[0]["unix"] - samples[0]["t"]
    width, height, left, top, bottom = 1000, 360, 60, 20, 60
    span = max(s["t"] for s in samples) or 1.0
    peak = max([s.get("ops_per_sec", 0) for s in samples] + [1])
    x = lambda t: left + (width - left - 20) * t / span
    y = lambda v: top + (height - top - bottom) * (1 - v / peak)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="11">',
           f'<text x="{left}" y="14">commands/s over every node; shaded: measured stages; '
           f'ticks: cluster events</text>']
    for m in marks:
        a, b = m["start"] - t0, m["end"] - t0
        out.append(f'<rect x="{x(a):.1f}" y="{top}" width="{max(1.0, x(b) - x(a)):.1f}" '
                   f'height="{height - top - bottom}" fill="#eeeeee"/>')
        out.append(f'<text x="{x(a):.1f}" y="{height - bottom + 28}">{m["nodes"]} nodes</text>')
    points = " ".join(f"{x(s['t']):.1f},{y(s['ops_per_sec']):.1f}"
                      for s in samples if "ops_per_sec" in s)
    out.append(f'<polyline fill="none" stroke="#333" stroke-width="1.2" points="{points}"/>')
    counts = {}
    for s in samples:
        kinds = {}
        for kind, _ in s.get("events", []):
            kinds[kind] = kinds.get(kind, 0) + 1
            counts[kind] = counts.get(kind, 0) + 1
        for i, (kind, n) in enumerate(sorted(kinds.items())):
            px = x(s["t"])
            out.append(f'<line x1="{px:.1f}" x2="{px:.1f}" y1="{top}" y2="{height - bottom}" '
                       f'stroke="{COLORS.get(kind, "#000")}" stroke-width="1" opacity="0.6"/>')
            out.append(f'<text x="{px + 2:.1f}" y="{top + 12 + 12 * i}" '
                       f'fill="{COLORS.get(kind, "#000")}">{kind}{"" if n == 1 else f" x{n}"}</text>')
    out.append(f'<line x1="{left}" x2="{width - 20}" y1="{height - bottom}" '
               f'y2="{height - bottom}" stroke="#000"/>')
    for v in (0, peak / 2, peak):
        out.append(f'<text x="4" y="{y(v) + 4:.1f}">{v:.0f}</text>')
    for t in range(0, int(span) + 1, max(1, int(span) // 10 or 1)):
        out.append(f'<text x="{x(t):.1f}" y="{height - bottom + 14}">{t}s</text>')
    legend = ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())) or "no events"
    out.append(f'<text x="{left}" y="{height - 8}">events: {legend}</text>')
    out.append("</svg>")
    with open(svg_path, "w") as f:
        f.write("\n".join(out) + "\n")



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
    if cmd == "watch":
        cmd_watch(*args)
        return 0
    if cmd == "timeline":
        cmd_timeline(*args)
        return 0
    sys.stderr.write(__doc__)
    return 64


if __name__ == "__main__":
    sys.exit(main())
