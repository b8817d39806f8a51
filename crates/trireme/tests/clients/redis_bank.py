"""redis-py 8 with its defaults (RESP3): a bank whose total must never change, read while it
moves.

Usage: redis_bank.py HOST PORT SECONDS [MIN_TRANSFERS MIN_MGETS MAX_SECONDS]

Runs SECONDS, and on a slow machine on until MIN_TRANSFERS transfers and MIN_MGETS MGETs
have run (never past MAX_SECONDS).

Two accounts in one slot, `{b}x` and `{b}y`, start at 1000 each. Three threads move random
amounts between them with `MULTI; DECRBY; INCRBY; EXEC` (`pipeline(transaction=True)`), and
three others read both with one `MGET`. A transaction is applied whole or not at all, so
every MGET must add up to 2000, as it does against Redis. Prints one JSON line: the
protocol negotiated, how many transfers and MGETs ran, how many MGETs did not add up (and a
few of them), and the final balances.
"""

import json
import random
import sys
import threading
import time

import redis

host, port, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
min_transfers, min_mgets, max_seconds = (
    (int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6])) if len(sys.argv) > 6 else (0, 0, seconds)
)
X, Y, TOTAL = "{b}x", "{b}y", 2000
client = redis.Redis(host=host, port=port)
client.mset({X: TOTAL // 2, Y: TOTAL // 2})
start = time.monotonic()
lock = threading.Lock()
counts = {"transfers": 0, "mgets": 0, "torn": 0}
examples = []


def going():
    """Whether to go on: before SECONDS, or short of the minimums before MAX_SECONDS."""
    elapsed = time.monotonic() - start
    if elapsed < seconds:
        return True
    with lock:
        short = counts["transfers"] < min_transfers or counts["mgets"] < min_mgets
    return short and elapsed < max_seconds


def mover(seed):
    draw = random.Random(seed)
    while going():
        amount = draw.randint(1, 50)
        source, target = (X, Y) if draw.random() < 0.5 else (Y, X)
        with client.pipeline(transaction=True) as pipe:
            pipe.decrby(source, amount)
            pipe.incrby(target, amount)
            pipe.execute()
        with lock:
            counts["transfers"] += 1


def reader():
    while going():
        x, y = client.mget(X, Y)
        with lock:
            counts["mgets"] += 1
            if int(x) + int(y) != TOTAL:
                counts["torn"] += 1
                if len(examples) < 5:
                    examples.append([int(x), int(y)])


threads = [threading.Thread(target=mover, args=(i,)) for i in range(3)]
threads += [threading.Thread(target=reader) for _ in range(3)]
for t in threads:
    t.start()
for t in threads:
    t.join()
x, y = (int(v) for v in client.mget(X, Y))
connection = client.connection_pool.get_connection()
protocol = connection.protocol
client.connection_pool.release(connection)
print(json.dumps({"protocol": protocol, **counts, "examples": examples, "final": [x, y]}))
