"""redis-py 8 with its defaults (RESP3) and RedisCluster, writing and reading while a shard
splits under it.

Usage: redis_cluster_split.py HOST PORT DIR

Writes `py{n}` = `v{n}` in a loop through RedisCluster, reading back an earlier key every tenth
write, and writes DIR/started once 100 writes were acknowledged. It stops once DIR/stop
exists and 100 more writes were acknowledged after it; then reads every acknowledged key back,
fetches CLUSTER SHARDS, prints one JSON line with what it saw, and exits 0 only if nothing
acknowledged was lost or read back wrong.
"""

import json
import os
import sys
import time

from redis.cluster import RedisCluster

host, port, folder = sys.argv[1], int(sys.argv[2]), sys.argv[3]
client = RedisCluster(host=host, port=port)
pool = client.get_default_node().redis_connection.connection_pool
connection = pool.get_connection()
protocol = connection.protocol  # what HELLO negotiated: 3 with redis-py 8's defaults
pool.release(connection)

acked = []
errors = []
wrong = []
after_stop = None
deadline = time.time() + 120
n = 0
while time.time() < deadline:
    key, value = f"py{n}", f"v{n}"
    n += 1
    try:
        if client.set(key, value):
            acked.append(key)
    except Exception as e:  # a failed write is allowed; a lost acknowledged one is not
        errors.append(f"{key}: {e!r}")
    if len(acked) == 100 and not os.path.exists(os.path.join(folder, "started")):
        open(os.path.join(folder, "started"), "w").close()
    if n % 10 == 0 and acked:
        probe = acked[len(acked) // 2]
        try:
            got = client.get(probe)
            if got != ("v" + probe[2:]).encode():
                wrong.append(f"{probe}: {got!r}")
        except Exception as e:
            errors.append(f"read {probe}: {e!r}")
    if after_stop is None and os.path.exists(os.path.join(folder, "stop")):
        after_stop = len(acked)
    if after_stop is not None and len(acked) >= after_stop + 100:
        break

lost = []
for key in acked:
    got = client.get(key)
    if got != ("v" + key[2:]).encode():
        lost.append(f"{key}: {got!r}")
shards = client.execute_command("CLUSTER SHARDS", target_nodes=RedisCluster.RANDOM)
ranges = []
for shard in shards:
    # RESP3 answers a map per shard; RESP2 a flat list of pairs.
    if isinstance(shard, dict):
        slots = shard.get(b"slots") or shard.get("slots")
    else:
        slots = shard[shard.index(b"slots") + 1]
    ranges.append([int(slots[0]), int(slots[1])])
print(
    json.dumps(
        {
            "protocol": protocol,
            "acked": len(acked),
            "errors": errors[:20],
            "wrong": wrong,
            "lost": lost[:20],
            "stopped": after_stop is not None,
            "ranges": sorted(ranges),
        }
    )
)
sys.exit(0 if not lost and not wrong and after_stop is not None else 1)
