"""redis-py 8 with its defaults (RESP3) using hashes, sets and lists as applications do,
through its cluster client: a record per hash (`hset(mapping=...)`, `hgetall`), counters in
fields, a transactional pipeline, `hscan_iter` over a hash larger than one page, tags as sets
(`smembers` as a Python set, intersections in one slot, `sscan_iter`), a work queue
(`rpush`, `blpop`, `lmove`), a leaderboard as a sorted set (scores as floats, ranges with
scores, `zscan_iter`, pops), and the errors.

Usage: redis_collections.py HOST PORT

Prints one JSON line of what it saw and exits 0 only if every check held.
"""

import json
import sys

import redis
from redis.cluster import RedisCluster

host, port = sys.argv[1], int(sys.argv[2])
client = RedisCluster(host=host, port=port)
failures = []


def check(what, ok, detail=""):
    if not ok:
        failures.append(f"{what}: {detail!r}")


user = {"name": "Alice", "email": "alice@example.com", "visits": "0"}
check("hset mapping", client.hset("user:1", mapping=user) == 3)
check("hgetall is a dict", client.hgetall("user:1") == {k.encode(): v.encode() for k, v in user.items()}, client.hgetall("user:1"))
check("hincrby", client.hincrby("user:1", "visits", 5) == 5)
check("hincrbyfloat", client.hincrbyfloat("user:1", "score", 2.5) == 2.5)
check("hmget", client.hmget("user:1", ["name", "nope"]) == [b"Alice", None])
check("hexists", client.hexists("user:1", "email") and not client.hexists("user:1", "x"))
check("hlen", client.hlen("user:1") == 4, client.hlen("user:1"))
check("type", client.type("user:1") == b"hash", client.type("user:1"))
check("hdel", client.hdel("user:1", "email", "x") == 1)
check("hkeys", sorted(client.hkeys("user:1")) == [b"name", b"score", b"visits"])
check("hrandfield", client.hrandfield("user:1") in (b"name", b"score", b"visits"))
check("hrandfield withvalues", len(client.hrandfield("user:1", 2, withvalues=True)) in (2, 4))

# A transactional pipeline (MULTI/EXEC) on one hash.
with client.pipeline(transaction=True) as pipe:
    pipe.hset("{cart}:7", "apples", 3)
    pipe.hincrby("{cart}:7", "apples", 2)
    pipe.hget("{cart}:7", "apples")
    answers = pipe.execute()
check("transactional pipeline", answers == [1, 5, b"5"], answers)

# A hash of 2,500 fields walked with HSCAN: every field once.
big = {f"f{i}": str(i) for i in range(2500)}
for start in range(0, 2500, 500):
    chunk = dict(list(big.items())[start:start + 500])
    client.hset("big", mapping=chunk)
seen = dict(client.hscan_iter("big", count=300))
check("hscan_iter sees every field once", len(seen) == 2500 and seen[b"f1234"] == b"1234", len(seen))

# Wrong types are Redis's errors.
client.set("plain", "x")
try:
    client.hget("plain", "f")
    check("hget on a string raises", False)
except redis.ResponseError as e:
    check("WRONGTYPE", str(e).startswith("WRONGTYPE"), str(e))
try:
    client.hincrby("user:1", "name", 1)
    check("hincrby on text raises", False)
except redis.ResponseError as e:
    check("not an integer", "not an integer" in str(e), str(e))

# Sets: tags, their intersection, a member moved, members drawn.
check("sadd", client.sadd("{tags}:a", "x", "y", "z") == 3)
client.sadd("{tags}:b", "y", "z", "w")
check("smembers is a set", client.smembers("{tags}:a") == {b"x", b"y", b"z"}, client.smembers("{tags}:a"))
check("sinter", client.sinter("{tags}:a", "{tags}:b") == {b"y", b"z"})
check("sunionstore", client.sunionstore("{tags}:all", "{tags}:a", "{tags}:b") == 4)
check("smove", client.smove("{tags}:a", "{tags}:b", "x") and client.sismember("{tags}:b", "x"))
check("smismember", client.smismember("{tags}:a", ["x", "y"]) == [0, 1], client.smismember("{tags}:a", ["x", "y"]))
popped = client.spop("{tags}:all", 2)
check("spop count", len(popped) == 2 and client.scard("{tags}:all") == 2, popped)
check("srandmember", client.srandmember("{tags}:b") in {b"w", b"x", b"y", b"z"})
client.sadd("many", *[f"m{i}" for i in range(1500)])
check("sscan_iter", len(set(client.sscan_iter("many", count=200))) == 1500)
try:
    client.sadd("plain", "m")
    check("sadd on a string raises", False)
except redis.ResponseError as e:
    check("WRONGTYPE on sadd", str(e).startswith("WRONGTYPE"), str(e))
client.delete("{tags}:a", "{tags}:b", "{tags}:all", "many")

# Lists: a work queue, pushed on one side and popped (blocking) on the other.
check("rpush", client.rpush("queue", "a", "b", "c") == 3)
check("lrange", client.lrange("queue", 0, -1) == [b"a", b"b", b"c"])
popped = client.blpop(["queue"], timeout=1)
check("blpop", list(popped) == [b"queue", b"a"], popped)
check("lmove round", client.lmove("queue", "queue", "LEFT", "RIGHT") == b"b")
check("after the round", client.lrange("queue", 0, -1) == [b"c", b"b"], client.lrange("queue", 0, -1))
check("blpop timeout", client.blpop(["empty-queue"], timeout=0.1) is None)
client.delete("queue")

# Sorted sets: a leaderboard, read back with scores as Python floats.
check("zadd", client.zadd("board", {"alice": 10, "bob": 7.5, "carol": 12, "dave": -1}) == 4)
check("zincrby", client.zincrby("board", 2.25, "bob") == 9.75)
check("zscore", client.zscore("board", "carol") == 12.0, client.zscore("board", "carol"))
check("zscore missing", client.zscore("board", "nobody") is None)
top = client.zrange("board", 0, 1, desc=True, withscores=True)
check("top two with scores", top == [(b"carol", 12.0), (b"alice", 10.0)], top)
check("zrevrank", client.zrevrank("board", "bob") == 2)
check("zrangebyscore", client.zrangebyscore("board", 0, 10) == [b"bob", b"alice"])
check("zcount", client.zcount("board", "(0", "+inf") == 3)
check("zadd gt ch", client.zadd("board", {"dave": 5, "alice": 1}, gt=True, ch=True) == 1)
check("zmscore", client.zmscore("board", ["dave", "x"]) == [5.0, None], client.zmscore("board", ["dave", "x"]))
popped = client.zpopmin("board", 2)
check("zpopmin", popped == [(b"dave", 5.0), (b"bob", 9.75)], popped)
client.zadd("wide", {f"p{i}": i for i in range(1200)})
scanned = dict(client.zscan_iter("wide", count=250))
check("zscan_iter", len(scanned) == 1200 and scanned[b"p77"] == 77.0, len(scanned))
check("zremrangebyrank", client.zremrangebyrank("wide", 0, 199) == 200 and client.zcard("wide") == 1000)
check("zset type", client.type("board") == b"zset")
try:
    client.zadd("plain", {"m": 1})
    check("zadd on a string raises", False)
except redis.ResponseError as e:
    check("WRONGTYPE on zadd", str(e).startswith("WRONGTYPE"), str(e))
client.delete("board", "wide")

client.delete("user:1", "big", "plain", "{cart}:7")
check("deleted", client.exists("user:1", "big") == 0)
protocol = client.get_default_node().redis_connection.connection_pool.connection_kwargs.get("protocol")
print(json.dumps({"failures": failures, "protocol": protocol}))
sys.exit(1 if failures else 0)
