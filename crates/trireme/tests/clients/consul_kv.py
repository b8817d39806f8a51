"""Drives a Trireme node through py-consul, Consul's Python client, unchanged.

Usage: consul_kv.py HOST PORT. Exits non-zero with a message on the first mismatch; prints
"ok" when every check passed.
"""
import sys
import threading
import time

import consul


def check(what, got, want):
    if got != want:
        sys.exit(f"{what}: got {got!r}, want {want!r}")


def main():
    host, port = sys.argv[1], int(sys.argv[2])
    c = consul.Consul(host=host, port=port)
    kv = c.kv

    check("put", kv.put("app/config/db", "postgres://db", flags=7), True)
    index, entry = kv.get("app/config/db")
    check("value", entry["Value"], b"postgres://db")
    check("flags", entry["Flags"], 7)
    check("index header", int(index) >= entry["ModifyIndex"], True)

    # Check-and-set: only the writer that read the current ModifyIndex wins.
    modify = entry["ModifyIndex"]
    check("cas with the current index", kv.put("app/config/db", "v2", cas=modify), True)
    check("cas with a stale index", kv.put("app/config/db", "v3", cas=modify), False)
    check("cas=0 on an existing key", kv.put("app/config/db", "v4", cas=0), False)
    check("cas=0 on a new key", kv.put("app/config/cache", "redis://c", cas=0), True)

    for mode in ("default", "consistent", "stale"):
        _, entry = kv.get("app/config/db", consistency=mode)
        check(f"read {mode}", entry["Value"], b"v2")

    kv.put("app/flags/beta", "on")
    _, entries = kv.get("app/", recurse=True)
    check("recurse keys", [e["Key"] for e in entries],
          ["app/config/cache", "app/config/db", "app/flags/beta"])
    _, keys = kv.get("app/", keys=True, separator="/")
    check("keys with separator", keys, ["app/config/", "app/flags/"])

    _, missing = kv.get("app/nope")
    check("missing key", missing, None)

    check("delete with cas", kv.delete("app/flags/beta", cas=1), False)
    check("delete tree", kv.delete("app/config/", recurse=True), True)
    _, entries = kv.get("app/", recurse=True)
    check("after delete", [e["Key"] for e in entries], ["app/flags/beta"])

    # Blocking queries: a watcher holding the index it read is woken by a write from
    # another thread, with the new value and a higher index; with nothing changing it
    # holds for its wait and answers with the same index.
    index, entry = kv.get("app/watched")
    woke = {}

    def watch():
        woke["index"], woke["entry"] = kv.get("app/watched", index=index, wait="20s")

    watcher = threading.Thread(target=watch)
    started = time.monotonic()
    watcher.start()
    kv.put("app/watched", "changed")
    watcher.join(30)
    check("watcher woken", watcher.is_alive(), False)
    check("woken with the new value", woke["entry"]["Value"], b"changed")
    check("woken with a higher index", int(woke["index"]) > int(index), True)
    check("woken before the wait", time.monotonic() - started < 10, True)
    started = time.monotonic()
    same, _ = kv.get("app/watched", index=woke["index"], wait="1s")
    check("held for the wait", time.monotonic() - started >= 1, True)
    check("same index when nothing changed", same, woke["index"])

    check("status leader", bool(c.status.leader()), True)
    check("status peers", len(c.status.peers()), 1)
    print("ok")


if __name__ == "__main__":
    main()
