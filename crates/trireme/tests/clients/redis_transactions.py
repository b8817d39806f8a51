"""redis-py 8 with its defaults (RESP3): optimistic transactions (WATCH, MULTI, EXEC) from
several threads, as applications write them with `Redis.transaction`.

Usage: redis_transactions.py HOST PORT

Four threads each move 25 units from `{acct}a` to `{acct}b` with `transaction()`, which
watches both keys, reads them, and retries when EXEC reports a watched key changed. Prints
one JSON line (the protocol negotiated, the final balances, how many EXECs were aborted)
and exits 0 only if the total is unchanged and every transfer landed exactly once.
"""

import json
import sys
import threading

import redis

host, port = sys.argv[1], int(sys.argv[2])
client = redis.Redis(host=host, port=port)
client.mset({"{acct}a": 100, "{acct}b": 0})
aborted = 0
lock = threading.Lock()


def move_one(pipe):
    a = int(pipe.get("{acct}a"))
    b = int(pipe.get("{acct}b"))
    pipe.multi()
    pipe.set("{acct}a", a - 1)
    pipe.set("{acct}b", b + 1)


def worker():
    for _ in range(25):
        client.transaction(move_one, "{acct}a", "{acct}b")


# Redis.transaction retries on WatchError by itself; this one counts the retries.
def counting_transaction(func, *watches, **kwargs):
    global aborted
    while True:
        with client.pipeline(True) as pipe:
            try:
                pipe.watch(*watches)
                func(pipe)
                pipe.execute()
                return
            except redis.WatchError:
                with lock:
                    aborted += 1


client.transaction = counting_transaction
threads = [threading.Thread(target=worker) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
a = int(client.get("{acct}a"))
b = int(client.get("{acct}b"))
connection = client.connection_pool.get_connection()
protocol = connection.protocol
client.connection_pool.release(connection)
print(json.dumps({"protocol": protocol, "a": a, "b": b, "aborted": aborted}))
sys.exit(0 if (a, b) == (0, 100) else 1)
