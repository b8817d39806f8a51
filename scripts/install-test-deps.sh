#!/usr/bin/env bash
# Installs what the tests and benchmarks use from Debian's packages: redis-server and
# redis-tools (redis-cli, redis-benchmark) as real peers and clients, and etcd-server (the
# `etcd` binary) as the real peer of the bench harness's etcd driver; iproute2 and iptables
# for the chaos runner's namespaces and partitions; chromium and chromium-driver (headless,
# driven over WebDriver) for the web console's browser tests. Idempotent: does nothing
# when everything is already there.
set -euo pipefail

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || need+=(redis-tools)
command -v redis-benchmark >/dev/null 2>&1 || need+=(redis-tools)
command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
command -v curl >/dev/null 2>&1 || need+=(curl)
# The chaos runner: network namespaces (iproute2) and partitions (iptables).
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v iptables >/dev/null 2>&1 || need+=(iptables)
# The web console's tests (t85_console) and bench/console.sh drive a real browser.
[ -x /usr/bin/chromium ] || need+=(chromium)
[ -x /usr/bin/chromedriver ] || need+=(chromium-driver)

python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need+=(python3-venv)

if [ ${#need[@]} -gt 0 ]; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  # shellcheck disable=SC2068
  $SUDO apt-get install -y -qq --no-install-recommends $(printf '%s\n' "${need[@]}" | sort -u) >/dev/null
fi

# Real client libraries the integration tests drive: Consul's Python client (py-consul) and
# redis-py 8 (which speaks RESP3 by default), in a virtualenv of the project's own under
# target/.
venv="$(cd "$(dirname "$0")/.." && pwd)/target/test-venv"
if ! "$venv/bin/python" -c 'import consul, redis; assert redis.__version__ == "8.1.0"' >/dev/null 2>&1; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check 'py-consul==1.8.0' 'redis==8.1.0'
fi
