#!/usr/bin/env bash
# What ACLs and TLS cost: Consul's PUT and default GET (trireme bench presets consul-put and
# consul-get-default, 64 clients, one key) against a three-node cluster started three ways,
# each run in turn, ROUNDS times:
#   plain   no ACL, no TLS (the defaults)
#   acl     [acl] enabled with default deny; the bench sends a management token
#   tls     [acl] as above, [tls] on the client ports and [peer_tls] between nodes, with a CA
#           and a node certificate made by openssl (so any CA tooling is shown to work)
#
#   bench/secure-overhead.sh [DURATION] [ROUNDS]     (defaults 15s and 2)
#
# Prints each run's total operations per second and the server processes' CPU per operation
# (user + system of the three nodes over the run, from /proc). Release builds, loopback ports
# 27800-27822; everything it starts is stopped by PID on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${1:-15s}
ROUNDS=${2:-2}
cargo build --release --quiet -p trireme
bin=target/release/trireme
work=$(mktemp -d)
pids=()
stop_nodes() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do while kill -0 "$p" 2>/dev/null; do sleep 0.1; done; done
  pids=()
}
cleanup() { stop_nodes; rm -rf "$work"; }
trap cleanup EXIT

# A CA and one certificate for every node (they all listen on 127.0.0.1), naming each node
# as peers require (DNS:node-<node id>.trireme).
tls="$work/tls"
mkdir -p "$tls"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
  -subj /CN=overhead-ca -keyout "$tls/ca-key.pem" -out "$tls/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=node \
  -keyout "$tls/node-key.pem" -out "$tls/node.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:node-n1.trireme,DNS:node-n2.trireme,DNS:node-n3.trireme\nextendedKeyUsage=serverAuth,clientAuth\n' \
  >"$tls/ext.cnf"
openssl x509 -req -in "$tls/node.csr" -CA "$tls/ca.pem" -CAkey "$tls/ca-key.pem" \
  -CAcreateserial -days 2 -extfile "$tls/ext.cnf" -out "$tls/node.pem" 2>/dev/null
token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
acl_toml="[acl]
enabled = true
default_policy = \"deny\"
initial_management_token = \"$token\"
"
tls_toml="[tls]
cert_file = \"$tls/node.pem\"
key_file = \"$tls/node-key.pem\"
ca_file = \"$tls/ca.pem\"
[peer_tls]
cert_file = \"$tls/node.pem\"
key_file = \"$tls/node-key.pem\"
ca_file = \"$tls/ca.pem\"
"

# Starts three nodes with config $1 (may be empty) in a fresh directory; waits until a write
# with the token goes through.
start_cluster() {
  local mode=$1 config="$work/$1.toml" dir="$work/run-$1-$RANDOM"
  case $mode in
    plain) : >"$config" ;;
    acl) printf '%s' "$acl_toml" >"$config" ;;
    tls) printf '%s%s' "$acl_toml" "$tls_toml" >"$config" ;;
  esac
  local initial="n1=127.0.0.1:27802,n2=127.0.0.1:27812,n3=127.0.0.1:27822"
  for k in 1 2 3; do
    local base=$((27800 + 10 * (k - 1)))
    "$bin" server --node-id "n$k" --data-dir "$dir/n$k" --http "127.0.0.1:$base" \
      --resp "127.0.0.1:$((base + 1))" --peer "127.0.0.1:$((base + 2))" \
      --initial-cluster "$initial" --config "$config" --log warn >"$dir-n$k.log" 2>&1 &
    pids+=($!)
  done
  local url=http://127.0.0.1:27800 curl_tls=()
  if [ "$mode" = tls ]; then url=https://127.0.0.1:27800; curl_tls=(--cacert "$tls/ca.pem"); fi
  for _ in $(seq 600); do
    if curl -sf "${curl_tls[@]}" -H "X-Consul-Token: $token" -X PUT -d x "$url/v1/kv/ready" \
      >/dev/null 2>&1; then return 0; fi
    sleep 0.1
  done
  echo "the $mode cluster did not start; logs in $dir-n*.log" >&2
  exit 1
}

# CPU ticks (user + system) of the running nodes.
node_ticks() {
  local sum=0
  for p in "${pids[@]}"; do
    read -r -a f <"/proc/$p/stat"
    sum=$((sum + f[13] + f[14]))
  done
  echo "$sum"
}

hz=$(getconf CLK_TCK)
printf '%-6s %-20s %12s %14s\n' mode preset ops/s "server µs/op"
for round in $(seq "$ROUNDS"); do
  for mode in plain acl tls; do
    start_cluster "$mode"
    case $mode in
      plain) target=http://127.0.0.1:27800 ;;
      acl) target="http://:$token@127.0.0.1:27800" ;;
      tls) target="https://:$token@127.0.0.1:27800" ;;
    esac
    for preset in consul-put consul-get-default; do
      before=$(node_ticks)
      out=$("$bin" bench --preset "$preset" --target "$target" --duration "$DURATION" \
        --ca-file "$tls/ca.pem" --no-results --quiet 2>&1)
      after=$(node_ticks)
      total=$(awk '$1 == "total" { print $2, $3 }' <<<"$out")
      read -r count rate <<<"$total"
      cpu_us=$(awk -v t=$((after - before)) -v hz="$hz" -v n="$count" \
        'BEGIN { if (n > 0) printf "%.1f", t / hz * 1e6 / n; else print "-" }')
      printf '%-6s %-20s %12s %14s   (round %s)\n' "$mode" "$preset" "$rate" "$cpu_us" "$round"
    done
    stop_nodes
  done
done
