"""redis-py 8 with its defaults (RESP3) against nodes with `[redis] cross_slot_transactions`:
MSET, MSETNX and MULTI/EXEC (with WATCH) over keys in different shards.

Usage: redis_cross_slot.py HOST PORT SHARDS

Picks four account keys in four different shards (the cluster's first SHARDS shards, equal
slot ranges), runs each command once and checks nothing by itself: it prints one JSON line
of what the server answered, for the test to judge. Then four threads move units between
the accounts with `Redis.transaction` (WATCH both, read, MULTI, SET both, EXEC, retried on a
watch that broke), and the line carries the final balances.
"""

import json
import random
import sys
import threading

import redis
from redis.crc import key_slot

host, port, shards = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
per_shard = 16384 // shards


def shard_of(name):
    return key_slot(name.encode()) // per_shard


def keys_in_other_shards(prefix, count, avoid=()):
    found, seen, i = [], set(avoid), 0
    while len(found) < count:
        name = f"{prefix}{i}"
        i += 1
        if shard_of(name) not in seen:
            seen.add(shard_of(name))
            found.append(name)
    return found


accounts = keys_in_other_shards("acct:", 4)
fresh = keys_in_other_shards("new:", 3)
client = redis.Redis(host=host, port=port)
connection = client.connection_pool.get_connection()
out = {"protocol": connection.protocol, "shards": sorted({shard_of(k) for k in accounts})}
client.connection_pool.release(connection)

client.mset({k: 100 for k in accounts})
out["mset"] = [int(v) for v in client.mget(accounts)]

out["msetnx_first"] = client.msetnx({fresh[0]: 1, fresh[1]: 1})
out["msetnx_second"] = client.msetnx({fresh[1]: 2, fresh[2]: 2})
out["msetnx_after"] = [v and v.decode() for v in client.mget(fresh)]

pipe = client.pipeline(transaction=True)
pipe.set(accounts[0], 5)
pipe.incrby(accounts[1], 7)
pipe.get(accounts[2])
pipe.delete(accounts[3], fresh[0])
pipe.get(accounts[0])
out["exec"] = [v.decode() if isinstance(v, bytes) else v for v in pipe.execute()]

# A hash in another shard than the string: the transaction is refused whole.
(hash_key,) = keys_in_other_shards("h:", 1, avoid=[shard_of(accounts[0])])
pipe = client.pipeline(transaction=True)
pipe.set(accounts[0], 1)
pipe.hset(hash_key, "f", "v")
try:
    pipe.execute()
    out["hash_refused"] = None
except redis.ResponseError as e:
    out["hash_refused"] = str(e)
out["after_refusal"] = client.get(accounts[0]).decode()

# A watched key in another shard written behind the transaction's back undoes it.
with client.pipeline(True) as pipe:
    pipe.watch(accounts[0], accounts[1])
    client.set(accounts[1], 999)
    pipe.multi()
    pipe.set(accounts[0], 1)
    try:
        pipe.execute()
        out["watch_broken"] = False
    except redis.WatchError:
        out["watch_broken"] = True
out["after_watch"] = client.get(accounts[0]).decode()

client.mset({k: 100 for k in accounts})
aborted = 0
lock = threading.Lock()


def worker(seed):
    global aborted
    draw = random.Random(seed)
    for _ in range(15):
        a, b = draw.sample(accounts, 2)
        while True:
            with client.pipeline(True) as pipe:
                try:
                    pipe.watch(a, b)
                    va, vb = int(pipe.get(a)), int(pipe.get(b))
                    pipe.multi()
                    pipe.set(a, va - 1)
                    pipe.set(b, vb + 1)
                    pipe.execute()
                    break
                except redis.WatchError:
                    with lock:
                        aborted += 1


threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
out["final"] = [int(v) for v in client.mget(accounts)]
out["aborted"] = aborted
print(json.dumps(out))
