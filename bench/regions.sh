#!/usr/bin/env bash
# One cluster across regions, measured in `trireme lab` (nodes in network namespaces, every
# peer link between two regions held DELAY one way, default 40ms, by the lab's proxies):
#
#   zone      6 nodes in 3 regions (r1 home: n1, n4), survival zone: voters in r1, a learner
#             of every shard in r2 and in r3
#     - write latency: Consul PUTs at RATE/s through n1 and n4 (SECONDS_EACH, default 20)
#     - replication delay: `trireme bench probe` writes on n1 and polls n3 (r3) with stale
#       reads, SAMPLES samples (default 500), while the same PUT load runs in the background
#     - remote stale reads: Consul GET ?stale at RATE/s through n3 and n6 (r3)
#   single    3 nodes, no regions: the same write latency, for comparison
#   region    6 nodes in 3 regions, survival region (each shard's voters in r1, r2 and r3,
#             leaders in r1): the same write latency
#
# Every run is bench's own rate mode (latencies from the intended send time), 32 workers,
# 36-byte values over 1,000 keys. Prints one line per figure; the raw JSON stays in OUT
# (default /tmp/trireme-regions-<pid>). Needs root and iproute2 (the lab's namespaces).
#
#   bench/regions.sh [BINARY]            default target/release/trireme
#   DELAY=40ms RATE=200 SECONDS_EACH=20 SAMPLES=500 bench/regions.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="$(realpath "${1:-target/release/trireme}")"
DELAY="${DELAY:-40ms}"
RATE="${RATE:-200}"
SECS="${SECONDS_EACH:-20}"
SAMPLES="${SAMPLES:-500}"
OUT="${OUT:-/tmp/trireme-regions-$$}"
mkdir -p "$OUT"

scenario() { # NAME OP CONSISTENCY
  cat >"$OUT/$1.toml" <<TOML
name = "$1"
rate = $RATE
duration = "${SECS}s"
warmup = "2s"
concurrent = 32
driver = "consul"
consistency = "$3"
seed = 42

[key_generator]
kind = "uniform"
keys = 1000

[value_generator]
kind = "fixed"
size = 36

[operations]
$2 = 1

[load]
keys = 1000
TOML
}
scenario put put default
scenario get_stale get stale
# The background load of the probe: no load phase of its own.
sed '/^\[load\]/,$d' "$OUT/put.toml" | sed 's/^name = .*/name = "background"/' >"$OUT/background.toml"

# Runs inside the lab: PHASE picks what it measures; the nodes come from TRIREME_LAB_*.
cat >"$OUT/inside.sh" <<'SH'
#!/usr/bin/env bash
set -euo pipefail
phase="$1"; bin="$2"; out="$3"
run() { # NAME SCENARIO TARGET...
  local name="$1" file="$2"; shift 2
  local targets=()
  for t in "$@"; do targets+=(--target "$t"); done
  "$bin" bench "$out/$file.toml" "${targets[@]}" --json --quiet --no-results >"$out/$name.out"
}
case "$phase" in
  zone)
    run zone-put put "$TRIREME_LAB_N1_HTTP" "$TRIREME_LAB_N4_HTTP"
    SECONDS_LOAD=$(( ${SAMPLES:-500} / 10 + 30 ))
    sed "s/^duration = .*/duration = \"${SECONDS_LOAD}s\"/" "$out/background.toml" >"$out/background-long.toml"
    "$bin" bench "$out/background-long.toml" --target "$TRIREME_LAB_N1_HTTP" --target "$TRIREME_LAB_N4_HTTP" \
      --json --quiet --no-results >"$out/zone-background.out" &
    load=$!
    sleep 3
    "$bin" bench probe --driver consul --write-target "$TRIREME_LAB_N1_HTTP" \
      --read-target "$TRIREME_LAB_N3_HTTP" --samples "${SAMPLES:-500}" --json >"$out/zone-probe.json" 2>"$out/zone-probe.txt"
    kill "$load" 2>/dev/null || true
    wait "$load" 2>/dev/null || true
    run zone-stale get_stale "$TRIREME_LAB_N3_HTTP" "$TRIREME_LAB_N6_HTTP"
    ;;
  single) run single-put put "$TRIREME_LAB_N1_HTTP" "$TRIREME_LAB_N2_HTTP" ;;
  region) run region-put put "$TRIREME_LAB_N1_HTTP" "$TRIREME_LAB_N4_HTTP" ;;
esac
SH
chmod +x "$OUT/inside.sh"

lab() { # PHASE LAB-ARGS...
  local phase="$1"; shift
  SAMPLES="$SAMPLES" "$BIN" lab "$@" --region-delay "$DELAY" --out "$OUT/lab-$phase" -- \
    "$OUT/inside.sh" "$phase" "$BIN" "$OUT" 2>"$OUT/lab-$phase.log" \
    || { echo "lab $phase failed: see $OUT/lab-$phase.log" >&2; exit 1; }
}
lab zone --nodes 6 --regions 3
lab single --nodes 3
lab region --nodes 6 --regions 3 --survival region

python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
def bench(name, op):
    text = open(f"{out}/{name}.out").read()
    doc = json.loads(text[text.index("\n{") + 1:] if not text.startswith("{") else text)
    def find(node):
        if isinstance(node, dict):
            if "per_op" in node and op in node["per_op"]:
                return node["per_op"][op]
            for value in node.values():
                found = find(value)
                if found:
                    return found
        return None
    return find(doc)
def ms(us):
    return f"{us / 1000:.1f} ms"
for name, op, what in [
    ("single-put", "put", "single region, write"),
    ("zone-put", "put", "survival zone, write from the home region"),
    ("region-put", "put", "survival region, write from the home region"),
    ("zone-stale", "get", "survival zone, stale read in a remote region"),
]:
    s = bench(name, op)
    print(f"{what:48} p50 {ms(s['p50_us']):>9}  p99 {ms(s['p99_us']):>9}  "
          f"{s['ops_per_sec']:.0f} ops/s, {s['errors']} errors")
probe = json.load(open(f"{out}/zone-probe.json"))
def delays(node):
    if isinstance(node, dict):
        if "mean_us" in node and "p99_us" in node:
            return node
        for value in node.values():
            found = delays(value)
            if found:
                return found
    return None
d = delays(probe)
print(f"{'survival zone, r1 write seen in r3 (probe, load)':48} mean {ms(d['mean_us']):>8}  "
      f"p50 {ms(d['p50_us'])}  p99 {ms(d['p99_us'])}  ({d['count']} samples)")
PY
echo "raw results: $OUT"
