//! Area 22: the same commands sent to `redis-server` and to a Trireme node, replies compared
//! byte for byte, in RESP2 and in RESP3. Where Redis's behaviour is the specification, Redis
//! itself is the oracle. Expiries are absolute (`EXAT`, `EXPIREAT`), so the replies do not
//! depend on when the commands run.

use crate::common;

use crate::common::clients;
use crate::common::cluster::{ClusterOptions, TestCluster};
use crate::common::redis::{compare_pipelined_with_redis, compare_with_redis};
use crate::common::{RawResp, StartOptions, TestNode};
use std::time::Duration;

/// The string commands a Redis user reaches for first, with their edge cases and errors.
const STRINGS: &[&[&str]] = &[
    &["SET", "s", "hello"],
    &["APPEND", "s", " world"],
    &["APPEND", "fresh-append", "abc"],
    &["STRLEN", "s"],
    &["STRLEN", "missing"],
    &["GETRANGE", "s", "0", "4"],
    &["GETRANGE", "s", "-5", "-1"],
    &["GETRANGE", "s", "5", "2"],
    &["GETRANGE", "s", "-1", "-3"],
    &["GETRANGE", "s", "-100", "100"],
    &["GETRANGE", "missing", "0", "-1"],
    &["GETRANGE", "s", "x", "1"],
    &["SUBSTR", "s", "0", "2"],
    &["SETRANGE", "s", "6", "Redis"],
    &["GET", "s"],
    &["SETRANGE", "padded", "5", "x"],
    &["GET", "padded"],
    &["SETRANGE", "s", "-1", "x"],
    &["SETRANGE", "s", "0", ""],
    &["SETRANGE", "missing", "3", ""],
    &["EXISTS", "missing"],
    &["SETNX", "s", "other"],
    &["SETNX", "nx", "v"],
    &["GETSET", "nx", "v2"],
    &["GETSET", "getset-new", "v"],
    &["GETDEL", "nx"],
    &["GETDEL", "nx"],
    &["SET", "f", "10.50"],
    &["INCRBYFLOAT", "f", "0.1"],
    &["INCRBYFLOAT", "f", "-5"],
    // Redis adds in 80-bit long doubles and can print their residue (5.6 + 5.0e3 gives
    // 5005.60000000000000009 there, 5005.6 here); exponents are compared on exact sums.
    &["SET", "big", "12345678901234567"],
    &["INCRBYFLOAT", "big", "1"],
    &["DEL", "big"],
    &["SET", "g", "3"],
    &["INCRBYFLOAT", "g", "5.0e3"],
    &["INCRBYFLOAT", "g", "-2.5E-1"],
    &["INCRBYFLOAT", "float-new", "3"],
    &["INCRBYFLOAT", "s", "1"],
    &["INCRBYFLOAT", "f", "abc"],
    &["INCRBYFLOAT", "f", "inf"],
    &["GET", "f"],
    &["SETEX", "e", "100", "v"],
    &["SETEX", "e", "0", "v"],
    &["SETEX", "e", "-1", "v"],
    &["PSETEX", "e", "0", "v"],
    &["SETEX", "e", "abc", "v"],
    &["SET", "a", "x", "EXAT", "4000000000"],
    &["EXPIRETIME", "a"],
    &["PEXPIRETIME", "a"],
    &["EXPIRETIME", "s"],
    &["EXPIRETIME", "missing"],
    &["PEXPIRETIME", "missing"],
    &["EXPIREAT", "s", "4100000000"],
    &["EXPIRETIME", "s"],
    &["PEXPIREAT", "s", "4100000000123"],
    &["PEXPIRETIME", "s"],
    &["EXPIREAT", "missing", "4100000000"],
    &["EXPIREAT", "s", "1"],
    &["EXISTS", "s"],
    &["GETEX", "a"],
    &["GETEX", "a", "PERSIST"],
    &["EXPIRETIME", "a"],
    &["GETEX", "a", "EXAT", "4200000000"],
    &["EXPIRETIME", "a"],
    &["GETEX", "a", "PXAT", "4200000000555"],
    &["PEXPIRETIME", "a"],
    &["GETEX", "a", "PX", "0"],
    &["GETEX", "a", "FOO"],
    &["GETEX", "a", "EX"],
    &["GETEX", "missing", "EX", "10"],
    &["APPEND", "s"],
    &["GETRANGE", "s", "0"],
    &["SETNX", "a"],
    &["GETDEL", "a", "b"],
    &["STRLEN"],
    &["NoSuchCommand", "x", "y"],
    // No password configured: the default user takes any password, as in Redis.
    &["AUTH", "secret"],
    &["AUTH", "default", "secret"],
    &["AUTH", "bob", "secret"],
    &["AUTH", "a", "b", "c"],
    // Commands that read, decide and write: keys share a slot, as Redis Cluster requires.
    &["SET", "{k}src", "v1", "EXAT", "4000000000"],
    &["RENAME", "{k}src", "{k}dst"],
    &["EXISTS", "{k}src"],
    &["GET", "{k}dst"],
    &["EXPIRETIME", "{k}dst"],
    &["RENAME", "{k}missing", "{k}x"],
    &["RENAME", "{k}dst", "{k}dst"],
    &["SET", "{k}other", "o"],
    &["RENAMENX", "{k}dst", "{k}other"],
    &["RENAMENX", "{k}dst", "{k}dst"],
    &["RENAMENX", "{k}dst", "{k}fresh"],
    &["GET", "{k}fresh"],
    &["COPY", "{k}fresh", "{k}other"],
    &["COPY", "{k}fresh", "{k}other", "REPLACE"],
    &["GET", "{k}other"],
    &["EXPIRETIME", "{k}other"],
    &["COPY", "{k}missing", "{k}x"],
    &["COPY", "{k}fresh", "{k}c2", "DB", "0"],
    &["COPY", "{k}fresh", "{k}c3", "BOGUS"],
    &["MSETNX", "{k}m1", "a", "{k}m2", "b"],
    &["MSETNX", "{k}m2", "c", "{k}m3", "d"],
    &["MGET", "{k}m1", "{k}m2", "{k}m3"],
    &["MSETNX", "{k}m1"],
    &["SET", "{k}e", "v"],
    &["EXPIREAT", "{k}e", "4000000000", "XX"],
    &["EXPIREAT", "{k}e", "4000000000", "GT"],
    &["EXPIREAT", "{k}e", "4000000000", "NX"],
    &["EXPIRETIME", "{k}e"],
    &["EXPIREAT", "{k}e", "4100000000", "XX"],
    &["EXPIREAT", "{k}e", "4000000000", "GT"],
    &["EXPIREAT", "{k}e", "4200000000", "GT"],
    &["EXPIREAT", "{k}e", "4300000000", "LT"],
    &["EXPIREAT", "{k}e", "4100000000", "LT"],
    &["PEXPIREAT", "{k}e", "4100000000500", "XX", "GT"],
    &["PEXPIRETIME", "{k}e"],
    &["EXPIREAT", "{k}e", "4100000000", "NX", "XX"],
    &["EXPIREAT", "{k}e", "4100000000", "GT", "LT"],
    &["EXPIREAT", "{k}e", "4100000000", "FOO"],
    &["EXPIRE", "{k}missing", "100", "XX"],
    &["PERSIST", "{k}e"],
    &["EXPIREAT", "{k}e", "4100000000", "LT"],
    &["EXPIRETIME", "{k}e"],
    &["SET", "{k}n", "12345"],
    &["OBJECT", "ENCODING", "{k}n"],
    &["OBJECT", "ENCODING", "{k}e"],
    &[
        "SET",
        "{k}long",
        "0123456789012345678901234567890123456789012345",
    ],
    &["OBJECT", "ENCODING", "{k}long"],
    &["OBJECT", "ENCODING", "{k}missing"],
    &[
        "DEL", "{k}dst", "{k}other", "{k}fresh", "{k}c2", "{k}m1", "{k}m2", "{k}e", "{k}n",
        "{k}long",
    ],
    &[
        "DEL",
        "a",
        "padded",
        "fresh-append",
        "getset-new",
        "float-new",
        "f",
        "g",
        "missing",
    ],
];

/// The hash commands, their errors, and how other commands see a hash. Fields are written in
/// field order: Redis lists a small hash's fields in the order they were added, Trireme in
/// field order, and either is a valid Redis answer.
const HASHES: &[&[&str]] = &[
    &["HSET", "h", "a", "1", "b", "2"],
    &["HSET", "h", "b", "two", "c", "3"],
    &["HGET", "h", "b"],
    &["HGET", "h", "zz"],
    &["HGET", "missing", "a"],
    &["HMGET", "h", "a", "zz", "c"],
    &["HMGET", "missing", "a"],
    &["HGETALL", "h"],
    // A string write that reads the old value refuses a hash and keeps it.
    &["SET", "h", "x", "GET"],
    &["SET", "h", "x", "XX", "GET"],
    &["SET", "h", "x", "NX", "GET"],
    &["GETSET", "h", "x"],
    &["TYPE", "h"],
    &["HLEN", "h"],
    &["HGETALL", "missing"],
    &["HKEYS", "h"],
    &["HVALS", "h"],
    &["HLEN", "h"],
    &["HLEN", "missing"],
    &["HEXISTS", "h", "a"],
    &["HEXISTS", "h", "zz"],
    &["HSTRLEN", "h", "b"],
    &["HSTRLEN", "h", "zz"],
    &["HSETNX", "h", "a", "other"],
    &["HSETNX", "h", "d", "4"],
    &["HMSET", "h", "e", "5", "f", "6"],
    &["HDEL", "h", "e", "f", "zz"],
    &["HDEL", "missing", "a"],
    &["HINCRBY", "h", "a", "10"],
    &["HINCRBY", "h", "n", "-3"],
    &["HINCRBY", "h", "b", "1"],
    &["HINCRBY", "h", "a", "x"],
    &["HSET", "h", "p", "9223372036854775807"],
    &["HINCRBY", "h", "p", "1"],
    &["HINCRBYFLOAT", "h", "c", "0.5"],
    &["HINCRBYFLOAT", "h", "q", "2.5e2"],
    &["HINCRBYFLOAT", "h", "b", "1"],
    &["HINCRBYFLOAT", "h", "c", "abc"],
    &["HINCRBYFLOAT", "h", "c", "inf"],
    &["HSCAN", "h", "0"],
    &["HSCAN", "h", "0", "MATCH", "p*"],
    &["HSCAN", "h", "0", "COUNT", "100"],
    &["HSCAN", "missing", "0"],
    &["TYPE", "h"],
    &["OBJECT", "ENCODING", "h"],
    &["EXISTS", "h"],
    &["EXPIREAT", "h", "4000000000"],
    &["EXPIRETIME", "h"],
    &["PERSIST", "h"],
    &["TTL", "h"],
    // A hash is not a string, and a string not a hash.
    &["GET", "h"],
    &["STRLEN", "h"],
    &["APPEND", "h", "x"],
    &["INCR", "h"],
    &["GETRANGE", "h", "0", "1"],
    &["GETDEL", "h"],
    &["MGET", "h", "missing"],
    &["SET", "s", "v"],
    &["HSET", "s", "a", "1"],
    &["HGET", "s", "a"],
    &["HGETALL", "s"],
    &["HLEN", "s"],
    &["HDEL", "s", "a"],
    &["HINCRBY", "s", "a", "1"],
    &["TYPE", "s"],
    // The last field taken, the hash is gone.
    &["HSET", "one", "f", "v"],
    &["HRANDFIELD", "one"],
    &["HRANDFIELD", "one", "3"],
    &["HRANDFIELD", "one", "-2"],
    &["HRANDFIELD", "one", "1", "WITHVALUES"],
    &["HRANDFIELD", "missing"],
    &["HRANDFIELD", "missing", "2"],
    &["HDEL", "one", "f"],
    &["EXISTS", "one"],
    &["TYPE", "one"],
    // SET replaces a hash whole; a new hash under the name has none of the old fields.
    &["HSET", "r", "old", "1"],
    &["SET", "r", "string"],
    &["GET", "r"],
    &["DEL", "r"],
    &["HSET", "r", "new", "2"],
    &["HGETALL", "r"],
    // RENAME and COPY take the fields and the expiry along.
    &["HSET", "{k}hs", "a", "1", "b", "2"],
    &["EXPIREAT", "{k}hs", "4000000000"],
    &["RENAME", "{k}hs", "{k}hd"],
    &["EXISTS", "{k}hs"],
    &["HGETALL", "{k}hd"],
    &["EXPIRETIME", "{k}hd"],
    &["COPY", "{k}hd", "{k}hc"],
    &["HSET", "{k}hc", "c", "3"],
    &["HGETALL", "{k}hc"],
    &["HLEN", "{k}hd"],
    &["SET", "{k}str", "x"],
    &["COPY", "{k}hd", "{k}str", "REPLACE"],
    &["TYPE", "{k}str"],
    &["HGETALL", "{k}str"],
    &["RENAME", "{k}hc", "{k}str"],
    &["HGETALL", "{k}str"],
    &["DEL", "{k}hd", "{k}str"],
    &["DEL", "h", "r", "s"],
    &["HGETALL", "h"],
    // Wrong arity.
    &["HSET", "h", "a"],
    &["HSET", "h", "a", "1", "b"],
    &["HGET", "h"],
    &["HMGET", "h"],
    &["HDEL", "h"],
    &["HSETNX", "h", "a"],
    &["HINCRBY", "h", "a"],
    &["HLEN"],
    // In a transaction, a hash command sees the ones before it.
    &["MULTI"],
    &["HSET", "{t}h", "a", "1"],
    &["HINCRBY", "{t}h", "a", "2"],
    &["HGETALL", "{t}h"],
    &["GET", "{t}h"],
    &["TYPE", "{t}h"],
    &["HDEL", "{t}h", "a"],
    &["EXISTS", "{t}h"],
    &["EXEC"],
];

/// The set commands, their errors, and how other commands see a set. Members are small
/// integers: Redis keeps such a set sorted (an `intset`), as Trireme keeps every set, so the
/// orders agree.
const SETS: &[&[&str]] = &[
    &["SADD", "{s}a", "3", "1", "2", "2"],
    &["SADD", "{s}a", "4"],
    &["SMEMBERS", "{s}a"],
    &["SMEMBERS", "{s}missing"],
    &["SCARD", "{s}a"],
    &["SCARD", "{s}missing"],
    &["SISMEMBER", "{s}a", "2"],
    &["SISMEMBER", "{s}a", "9"],
    &["SMISMEMBER", "{s}a", "1", "9", "4"],
    &["SREM", "{s}a", "4", "9"],
    &["SADD", "{s}b", "2", "3", "5"],
    &["SINTER", "{s}a", "{s}b"],
    &["SINTER", "{s}a", "{s}missing"],
    &["SUNION", "{s}a", "{s}b"],
    &["SDIFF", "{s}a", "{s}b"],
    &["SDIFF", "{s}b", "{s}a", "{s}missing"],
    &["SINTERSTORE", "{s}i", "{s}a", "{s}b"],
    &["SMEMBERS", "{s}i"],
    &["SUNIONSTORE", "{s}u", "{s}a", "{s}b"],
    &["SMEMBERS", "{s}u"],
    &["SDIFFSTORE", "{s}d", "{s}a", "{s}b"],
    &["SMEMBERS", "{s}d"],
    &["SINTERSTORE", "{s}d", "{s}a", "{s}missing"],
    &["EXISTS", "{s}d"],
    &["SMOVE", "{s}a", "{s}b", "1"],
    &["SMOVE", "{s}a", "{s}b", "9"],
    &["SMEMBERS", "{s}b"],
    &["SMOVE", "{s}a", "{s}a", "2"],
    &["SSCAN", "{s}b", "0"],
    &["SSCAN", "{s}b", "0", "MATCH", "[12]"],
    &["SSCAN", "{s}missing", "0"],
    &["SADD", "{s}one", "7"],
    &["SRANDMEMBER", "{s}one"],
    &["SRANDMEMBER", "{s}one", "3"],
    &["SRANDMEMBER", "{s}one", "-2"],
    &["SRANDMEMBER", "{s}missing"],
    &["SRANDMEMBER", "{s}missing", "2"],
    &["SPOP", "{s}one"],
    &["EXISTS", "{s}one"],
    &["SPOP", "{s}missing"],
    &["SPOP", "{s}missing", "2"],
    &["SPOP", "{s}u", "10"],
    &["EXISTS", "{s}u"],
    &["SPOP", "{s}b", "-1"],
    &["SPOP", "{s}b", "0"],
    &["TYPE", "{s}b"],
    &["EXPIREAT", "{s}b", "4000000000"],
    &["EXPIRETIME", "{s}b"],
    &["COPY", "{s}b", "{s}c"],
    &["SMEMBERS", "{s}c"],
    &["EXPIRETIME", "{s}c"],
    &["RENAME", "{s}c", "{s}r"],
    &["SMEMBERS", "{s}r"],
    // Types.
    &["SET", "{s}str", "x"],
    &["SADD", "{s}str", "1"],
    &["SMEMBERS", "{s}str"],
    &["SINTER", "{s}b", "{s}str"],
    &["SMOVE", "{s}b", "{s}str", "1"],
    &["GET", "{s}b"],
    &["HGET", "{s}b", "f"],
    &["SUNIONSTORE", "{s}str", "{s}b"],
    &["TYPE", "{s}str"],
    // Wrong arity.
    &["SADD", "{s}a"],
    &["SREM", "{s}a"],
    &["SCARD"],
    &["SISMEMBER", "{s}a"],
    &["SMOVE", "{s}a", "{s}b"],
    &["SINTERSTORE", "{s}a"],
    // In a transaction.
    &["MULTI"],
    &["SADD", "{s}t", "1", "2"],
    &["SISMEMBER", "{s}t", "2"],
    &["SREM", "{s}t", "1"],
    &["SMEMBERS", "{s}t"],
    &["SCARD", "{s}t"],
    &["EXEC"],
    &["DEL", "{s}a", "{s}b", "{s}i", "{s}r", "{s}str", "{s}t"],
];

/// The list commands, their errors, and how other commands see a list.
const LISTS: &[&[&str]] = &[
    &["RPUSH", "{l}a", "c", "d"],
    &["LPUSH", "{l}a", "b", "a"],
    &["RPUSH", "{l}a", "e"],
    &["LRANGE", "{l}a", "0", "-1"],
    &["LRANGE", "{l}a", "1", "2"],
    &["LRANGE", "{l}a", "-2", "100"],
    &["LRANGE", "{l}a", "3", "1"],
    &["LRANGE", "{l}missing", "0", "-1"],
    &["LLEN", "{l}a"],
    &["LLEN", "{l}missing"],
    &["LINDEX", "{l}a", "0"],
    &["LINDEX", "{l}a", "-1"],
    &["LINDEX", "{l}a", "99"],
    &["LSET", "{l}a", "1", "B"],
    &["LSET", "{l}a", "-1", "E"],
    &["LSET", "{l}a", "9", "x"],
    &["LSET", "{l}missing", "0", "x"],
    &["LPUSHX", "{l}missing", "x"],
    &["RPUSHX", "{l}a", "f"],
    &["LINSERT", "{l}a", "BEFORE", "c", "c0"],
    &["LINSERT", "{l}a", "AFTER", "f", "g"],
    &["LINSERT", "{l}a", "AFTER", "zz", "x"],
    &["LINSERT", "{l}missing", "AFTER", "a", "x"],
    &["LINSERT", "{l}a", "MIDDLE", "a", "x"],
    &["LRANGE", "{l}a", "0", "-1"],
    &["RPUSH", "{l}r", "x", "y", "x", "z", "x"],
    &["LPOS", "{l}r", "x"],
    &["LPOS", "{l}r", "x", "RANK", "2"],
    &["LPOS", "{l}r", "x", "RANK", "-1"],
    &["LPOS", "{l}r", "x", "COUNT", "0"],
    &["LPOS", "{l}r", "x", "COUNT", "2", "RANK", "-1"],
    &["LPOS", "{l}r", "x", "MAXLEN", "2", "COUNT", "0"],
    &["LPOS", "{l}r", "nope"],
    &["LPOS", "{l}r", "x", "RANK", "0"],
    &["LREM", "{l}r", "-2", "x"],
    &["LRANGE", "{l}r", "0", "-1"],
    &["LREM", "{l}r", "0", "y"],
    &["LREM", "{l}r", "1", "nope"],
    &["LRANGE", "{l}r", "0", "-1"],
    &["LTRIM", "{l}a", "1", "-2"],
    &["LRANGE", "{l}a", "0", "-1"],
    &["LPOP", "{l}a"],
    &["RPOP", "{l}a", "2"],
    &["LPOP", "{l}a", "0"],
    &["LPOP", "{l}missing"],
    &["LPOP", "{l}missing", "2"],
    &["LPOP", "{l}a", "-1"],
    &["LMOVE", "{l}a", "{l}b", "LEFT", "RIGHT"],
    &["LMOVE", "{l}a", "{l}a", "RIGHT", "LEFT"],
    &["RPOPLPUSH", "{l}b", "{l}a"],
    &["LMOVE", "{l}missing", "{l}a", "LEFT", "LEFT"],
    &["LMOVE", "{l}a", "{l}b", "UP", "LEFT"],
    &["LRANGE", "{l}a", "0", "-1"],
    &["EXISTS", "{l}b"],
    &["LTRIM", "{l}r", "5", "10"],
    &["EXISTS", "{l}r"],
    // Blocking commands find an element, or wait out a short timeout.
    &["BLPOP", "{l}missing", "{l}a", "0.01"],
    &["BRPOP", "{l}missing", "0.01"],
    &["BLMOVE", "{l}a", "{l}b", "LEFT", "LEFT", "0.01"],
    &["BLMOVE", "{l}missing", "{l}b", "LEFT", "LEFT", "0.01"],
    &["BRPOPLPUSH", "{l}missing", "{l}b", "0.01"],
    &["BLPOP", "{l}a", "-1"],
    &["BLPOP", "{l}a", "soon"],
    &["TYPE", "{l}a"],
    &["EXPIREAT", "{l}a", "4000000000"],
    &["COPY", "{l}a", "{l}c"],
    &["LRANGE", "{l}c", "0", "-1"],
    &["EXPIRETIME", "{l}c"],
    // Types.
    &["SET", "{l}s", "v"],
    &["LPUSH", "{l}s", "x"],
    &["LRANGE", "{l}s", "0", "-1"],
    &["LMOVE", "{l}a", "{l}s", "LEFT", "LEFT"],
    &["GET", "{l}a"],
    &["SADD", "{l}a", "x"],
    // Wrong arity.
    &["LPUSH", "{l}a"],
    &["LRANGE", "{l}a", "0"],
    &["LINDEX", "{l}a"],
    &["BLPOP", "{l}a"],
    &["LPOP"],
    // In a transaction; a blocking command does not block there.
    &["MULTI"],
    &["RPUSH", "{l}t", "1", "2", "3"],
    &["LPOP", "{l}t"],
    &["LRANGE", "{l}t", "0", "-1"],
    &["BRPOP", "{l}t", "{l}missing", "0"],
    &["BLPOP", "{l}missing", "0"],
    &["LLEN", "{l}t"],
    &["EXEC"],
    &["DEL", "{l}a", "{l}b", "{l}c", "{l}s", "{l}t"],
];

const SORTED_SETS: &[&[&str]] = &[
    &["ZADD", "{z}a", "1", "one", "2", "two", "3", "three"],
    &[
        "ZADD", "{z}a", "1.1", "x", "1e20", "big", "-inf", "low", "+inf", "high",
    ],
    &[
        "ZADD", "{z}a", "3e-5", "tiny", "0.5", "half", "-2.5", "neg", "0", "zero",
    ],
    &["ZADD", "{z}a", "1", "one"],
    &["ZADD", "{z}a", "CH", "5", "one", "2", "two", "7", "new"],
    &["ZADD", "{z}a", "NX", "9", "one", "9", "nx"],
    &["ZADD", "{z}a", "XX", "CH", "6", "one", "9", "absent"],
    &["ZADD", "{z}a", "GT", "CH", "1", "one", "10", "two"],
    &["ZADD", "{z}a", "LT", "CH", "1", "one", "100", "two"],
    &["ZADD", "{z}a", "INCR", "2", "one"],
    &["ZADD", "{z}a", "NX", "INCR", "2", "one"],
    &["ZADD", "{z}a", "GT", "INCR", "-1", "one"],
    &["ZINCRBY", "{z}a", "1.5", "two"],
    &["ZINCRBY", "{z}a", "2", "fresh"],
    &["ZINCRBY", "{z}a", "-inf", "high"],
    &["ZSCORE", "{z}a", "x"],
    &["ZSCORE", "{z}a", "big"],
    &["ZSCORE", "{z}a", "tiny"],
    &["ZSCORE", "{z}a", "high"],
    &["ZSCORE", "{z}a", "nobody"],
    &["ZSCORE", "{z}missing", "x"],
    &["ZMSCORE", "{z}a", "x", "nobody", "low"],
    &["ZMSCORE", "{z}missing", "x"],
    &["ZCARD", "{z}a"],
    &["ZCARD", "{z}missing"],
    &["ZRANGE", "{z}a", "0", "-1"],
    &["ZRANGE", "{z}a", "0", "-1", "WITHSCORES"],
    &["ZRANGE", "{z}a", "2", "4", "WITHSCORES"],
    &["ZRANGE", "{z}a", "-3", "-1"],
    &["ZRANGE", "{z}a", "5", "2"],
    &["ZRANGE", "{z}a", "0", "1", "REV", "WITHSCORES"],
    &["ZRANGE", "{z}a", "(1", "5", "BYSCORE"],
    &["ZRANGE", "{z}a", "5", "(1", "BYSCORE", "REV", "WITHSCORES"],
    &[
        "ZRANGE", "{z}a", "-inf", "+inf", "BYSCORE", "LIMIT", "2", "3",
    ],
    &[
        "ZRANGE", "{z}a", "-inf", "+inf", "BYSCORE", "LIMIT", "-1", "3",
    ],
    &[
        "ZRANGE", "{z}a", "-inf", "+inf", "BYSCORE", "LIMIT", "1", "-1",
    ],
    &["ZRANGE", "{z}a", "0", "1", "LIMIT", "0", "1"],
    &["ZRANGE", "{z}a", "0", "-1", "LIMIT", "2", "-1"],
    &[
        "ZREVRANGE",
        "{z}a",
        "0",
        "-1",
        "LIMIT",
        "1",
        "-1",
        "WITHSCORES",
    ],
    &["ZRANGEBYSCORE", "{z}a", "", "5"],
    &["ZRANGEBYSCORE", "{z}a", " 0", "(5"],
    &["ZRANGE", "{z}a", "-", "+", "BYLEX", "WITHSCORES"],
    &["ZRANGE", "{z}a", "a", "1", "BYSCORE"],
    &["ZRANGE", "{z}a", "0", "x"],
    &["ZRANGE", "{z}a", "0", "1", "BOGUS"],
    &["ZRANGE", "{z}missing", "0", "-1"],
    &["ZREVRANGE", "{z}a", "0", "2", "WITHSCORES"],
    &["ZRANGEBYSCORE", "{z}a", "0", "(3", "WITHSCORES"],
    &["ZRANGEBYSCORE", "{z}a", "-inf", "inf", "LIMIT", "0", "2"],
    &["ZRANGEBYSCORE", "{z}a", "5", "1"],
    &["ZRANGEBYSCORE", "{z}a", "(1", "(1"],
    &["ZRANGEBYSCORE", "{z}a", "0", "1", "REV"],
    &[
        "ZREVRANGEBYSCORE",
        "{z}a",
        "+inf",
        "0",
        "WITHSCORES",
        "LIMIT",
        "1",
        "2",
    ],
    &["ZCOUNT", "{z}a", "-inf", "+inf"],
    &["ZCOUNT", "{z}a", "(0", "2"],
    &["ZCOUNT", "{z}a", "x", "2"],
    &["ZRANK", "{z}a", "low"],
    &["ZRANK", "{z}a", "x"],
    &["ZREVRANK", "{z}a", "x"],
    &["ZRANK", "{z}a", "nobody"],
    &["ZRANK", "{z}missing", "x"],
    // Members of one score, by member.
    &[
        "ZADD", "{z}lex", "0", "a", "0", "b", "0", "c", "0", "d", "0", "e",
    ],
    &["ZRANGEBYLEX", "{z}lex", "-", "+"],
    &["ZRANGEBYLEX", "{z}lex", "[b", "(d"],
    &["ZRANGEBYLEX", "{z}lex", "(b", "+", "LIMIT", "1", "2"],
    &["ZREVRANGEBYLEX", "{z}lex", "+", "[c"],
    &["ZRANGEBYLEX", "{z}lex", "+", "-"],
    &["ZRANGEBYLEX", "{z}lex", "+", "+"],
    &["ZRANGEBYLEX", "{z}lex", "+", "[b"],
    &["ZRANGEBYLEX", "{z}lex", "-", "-"],
    &["ZRANGE", "{z}lex", "+", "[c", "BYLEX"],
    &["ZLEXCOUNT", "{z}lex", "+", "+"],
    &["ZREMRANGEBYLEX", "{z}lex", "+", "+"],
    &["ZREMRANGEBYLEX", "{z}lex", "-", "-"],
    &["ZRANGEBYLEX", "{z}lex", "[d", "[b"],
    &["ZRANGEBYLEX", "{z}lex", "b", "+"],
    &["ZLEXCOUNT", "{z}lex", "[b", "[d"],
    &["ZLEXCOUNT", "{z}lex", "-", "+"],
    &["ZREMRANGEBYLEX", "{z}lex", "[a", "(c"],
    &["ZRANGE", "{z}lex", "0", "-1"],
    // Removals and pops.
    &["ZREM", "{z}a", "x", "nobody", "x"],
    &["ZREMRANGEBYSCORE", "{z}a", "(0", "1"],
    &["ZREMRANGEBYRANK", "{z}a", "-2", "-1"],
    &["ZRANGE", "{z}a", "0", "-1", "WITHSCORES"],
    &["ZPOPMIN", "{z}a"],
    &["ZPOPMAX", "{z}a", "2"],
    &["ZPOPMIN", "{z}a", "0"],
    &["ZPOPMIN", "{z}a", "-1"],
    &["ZPOPMIN", "{z}missing"],
    &["ZPOPMAX", "{z}missing", "3"],
    // Blocking pops find a member at once, or wait out a short timeout.
    &["BZPOPMIN", "{z}a", "1"],
    &["BZPOPMAX", "{z}missing", "{z}a", "1"],
    &["BZPOPMIN", "{z}missing", "{z}a", "0"],
    &["BZPOPMIN", "{z}nothing", "0.05"],
    &["BZPOPMAX", "{z}nothing", "{z}missing", "0.05"],
    &["BZPOPMIN", "{z}a", "-1"],
    &["BZPOPMAX", "{z}a", "soon"],
    &["BZPOPMIN", "{z}a"],
    &["ZRANGE", "{z}a", "0", "-1", "WITHSCORES"],
    &["ZSCAN", "{z}lex", "0"],
    &["ZREM", "{z}lex", "c", "d", "e"],
    &["EXISTS", "{z}lex"],
    &["TYPE", "{z}a"],
    &["OBJECT", "ENCODING", "{z}a"],
    &["EXPIREAT", "{z}a", "4000000000"],
    &["COPY", "{z}a", "{z}c"],
    &["ZRANGE", "{z}c", "0", "-1", "WITHSCORES"],
    &["EXPIRETIME", "{z}c"],
    // Bad scores and options.
    &["ZADD", "{z}a", "nan", "x"],
    &["ZADD", "{z}a", "abc", "x"],
    &["ZADD", "{z}a", "1e400", "x"],
    &["ZADD", "{z}a", "-1e400", "x"],
    &["ZADD", "{z}a", "1e-400", "x"],
    &["ZADD", "{z}a", "Infinity", "x"],
    &["ZSCORE", "{z}a", "x"],
    &["ZREM", "{z}a", "x"],
    &["ZADD", "{z}a", "1", "x", "2"],
    &["ZADD", "{z}a", "NX", "XX", "1", "x"],
    &["ZADD", "{z}a", "GT", "LT", "1", "x"],
    &["ZADD", "{z}a", "NX", "GT", "1", "x"],
    &["ZADD", "{z}a", "INCR", "1", "x", "2", "y"],
    &["ZINCRBY", "{z}a", "x", "one"],
    &["ZADD", "{z}inf", "inf", "m"],
    &["ZINCRBY", "{z}inf", "-inf", "m"],
    &["ZSCORE", "{z}inf", "m"],
    // Types.
    &["SET", "{z}s", "v"],
    &["ZADD", "{z}s", "1", "x"],
    &["ZRANGE", "{z}s", "0", "-1"],
    &["ZSCORE", "{z}s", "x"],
    &["BZPOPMIN", "{z}s", "1"],
    &["BZPOPMAX", "{z}missing", "{z}s", "1"],
    &["GET", "{z}a"],
    &["SADD", "{z}a", "x"],
    // Wrong arity.
    &["ZADD", "{z}a", "1"],
    &["ZSCORE", "{z}a"],
    &["ZRANGE", "{z}a", "0"],
    &["ZRANK", "{z}a", "x", "y"],
    &["ZCARD"],
    // In a transaction.
    &["MULTI"],
    &["ZADD", "{z}t", "1", "a", "2", "b"],
    &["ZINCRBY", "{z}t", "5", "a"],
    &["ZRANGE", "{z}t", "0", "-1", "WITHSCORES"],
    &["ZPOPMIN", "{z}t"],
    &["BZPOPMAX", "{z}t", "0"],
    &["BZPOPMIN", "{z}missing", "0"],
    &["ZADD", "{z}t", "3", "c"],
    &["BZPOPMIN", "{z}missing", "{z}t", "0"],
    &["ZCARD", "{z}t"],
    &["EXEC"],
    &["DEL", "{z}a", "{z}c", "{z}s", "{z}t", "{z}inf"],
];

/// Sends every command of `script` to both servers over one connection each and asserts
/// the replies are the same bytes.
async fn compare(script: &[&[&str]], resp3: bool) {
    let steps: Vec<(usize, &[&str])> = script.iter().map(|c| (0, *c)).collect();
    compare_with_redis(&steps, resp3).await;
}

/// Transactions on keys of one slot: queued, applied together, refused, discarded, and
/// aborted by a change to a watched key (from another client or from the same one).
const TRANSACTIONS: &[(usize, &[&str])] = &[
    (0, &["MULTI"]),
    (0, &["SET", "{t}a", "1"]),
    (0, &["INCR", "{t}a"]),
    (0, &["GET", "{t}a"]),
    (0, &["APPEND", "{t}b", "xy"]),
    (0, &["MGET", "{t}a", "{t}b", "{t}c"]),
    (0, &["EXISTS", "{t}a", "{t}c"]),
    (0, &["PING"]),
    (0, &["DEL", "{t}b"]),
    (0, &["TTL", "{t}a"]),
    (0, &["EXEC"]),
    (0, &["MULTI"]),
    (0, &["MULTI"]),
    (0, &["DISCARD"]),
    (0, &["DISCARD"]),
    (0, &["EXEC"]),
    (0, &["MULTI"]),
    (0, &["SET", "{t}a"]),
    (0, &["GET", "{t}a"]),
    (0, &["EXEC"]),
    (0, &["GET", "{t}a"]),
    (0, &["MULTI"]),
    (0, &["NOSUCHCOMMAND", "x"]),
    (0, &["EXEC"]),
    (0, &["SET", "{t}a", "not-a-number"]),
    (0, &["MULTI"]),
    (0, &["SET", "{t}a", "x", "BADOPTION"]),
    (0, &["INCR", "{t}a"]),
    (0, &["SET", "{t}c", "written"]),
    (0, &["GET", "{t}a"]),
    (0, &["EXEC"]),
    (0, &["GET", "{t}c"]),
    (0, &["MULTI"]),
    (0, &["EXEC"]),
    // A watched key changed by another client aborts EXEC with a null.
    (0, &["WATCH", "{t}w"]),
    (0, &["MULTI"]),
    (0, &["WATCH", "{t}w"]),
    (0, &["SET", "{t}w", "from-a"]),
    (1, &["SET", "{t}w", "from-b"]),
    (0, &["EXEC"]),
    (0, &["GET", "{t}w"]),
    // Unchanged: applied.
    (0, &["WATCH", "{t}w"]),
    (0, &["MULTI"]),
    (0, &["SET", "{t}w", "3"]),
    (0, &["EXEC"]),
    // A watched key that did not exist and was created meanwhile.
    (0, &["WATCH", "{t}missing"]),
    (1, &["SET", "{t}missing", "x"]),
    (0, &["MULTI"]),
    (0, &["GET", "{t}w"]),
    (0, &["EXEC"]),
    // UNWATCH and DISCARD forget the watches.
    (0, &["WATCH", "{t}w"]),
    (0, &["UNWATCH"]),
    (1, &["SET", "{t}w", "4"]),
    (0, &["MULTI"]),
    (0, &["GET", "{t}w"]),
    (0, &["EXEC"]),
    (0, &["WATCH", "{t}w"]),
    (0, &["MULTI"]),
    (0, &["DISCARD"]),
    (1, &["SET", "{t}w", "5"]),
    (0, &["MULTI"]),
    (0, &["GET", "{t}w"]),
    (0, &["EXEC"]),
    // The watching client's own write counts as a change too.
    (0, &["WATCH", "{t}w"]),
    (0, &["SET", "{t}w", "6"]),
    (0, &["MULTI"]),
    (0, &["GET", "{t}w"]),
    (0, &["EXEC"]),
    // GETEX PERSIST on a key without expiry changes nothing, so the watch holds.
    (0, &["SET", "{t}p", "v"]),
    (0, &["WATCH", "{t}p"]),
    (1, &["GETEX", "{t}p", "PERSIST"]),
    (0, &["MULTI"]),
    (0, &["GET", "{t}p"]),
    (0, &["EXEC"]),
    (0, &["WATCH"]),
    (0, &["DEL", "{t}a", "{t}c", "{t}w", "{t}missing", "{t}p"]),
];

#[tokio::test]
async fn transactions_answer_as_redis_does_in_resp2() {
    compare_with_redis(TRANSACTIONS, false).await;
}

#[tokio::test]
async fn transactions_answer_as_redis_does_in_resp3() {
    compare_with_redis(TRANSACTIONS, true).await;
}

/// What Redis Cluster refuses and Trireme refuses the same way, and what Trireme cannot queue.
#[tokio::test]
async fn transactions_across_slots_are_refused_with_crossslot() {
    let node = TestNode::start(StartOptions::default()).await;
    let mut c = RawResp::connect(node.resp_addr()).await;
    let crossslot = b"-CROSSSLOT Keys in request don't hash to the same slot\r\n";
    assert_eq!(c.cmd(&[b"MULTI"]).await, b"+OK\r\n");
    assert_eq!(c.cmd(&[b"SET", b"a", b"1"]).await, b"+QUEUED\r\n");
    assert_eq!(c.cmd(&[b"SET", b"b", b"2"]).await, crossslot);
    assert_eq!(
        c.cmd(&[b"EXEC"]).await,
        b"-EXECABORT Transaction discarded because of previous errors.\r\n"
    );
    assert_eq!(c.cmd(&[b"EXISTS", b"a", b"b"]).await, b":0\r\n");
    assert_eq!(c.cmd(&[b"WATCH", b"a", b"b"]).await, crossslot);
    for two_slots in [
        &[&b"RENAME"[..], b"a", b"b"][..],
        &[b"COPY", b"a", b"b"],
        &[b"MSETNX", b"a", b"1", b"b", b"2"],
    ] {
        assert_eq!(c.cmd(two_slots).await, crossslot);
    }
    // Watched keys must share the transaction's slot.
    assert_eq!(c.cmd(&[b"WATCH", b"a"]).await, b"+OK\r\n");
    assert_eq!(c.cmd(&[b"MULTI"]).await, b"+OK\r\n");
    assert_eq!(c.cmd(&[b"SET", b"b", b"2"]).await, b"+QUEUED\r\n");
    assert_eq!(c.cmd(&[b"EXEC"]).await, crossslot);
    assert_eq!(c.cmd(&[b"EXISTS", b"b"]).await, b":0\r\n");
    // A command without a log command of its own cannot be queued; the transaction is off.
    assert_eq!(c.cmd(&[b"MULTI"]).await, b"+OK\r\n");
    let refused = String::from_utf8(c.cmd(&[b"KEYS", b"*"]).await).expect("utf-8");
    assert!(
        refused.starts_with("-ERR 'keys' cannot be queued"),
        "{refused:?}"
    );
    assert!(c.cmd(&[b"EXEC"]).await.starts_with(b"-EXECABORT"));
}

/// A transaction is one log entry: many clients incrementing two keys of one slot together
/// never see them differ, and nothing is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_from_many_clients_apply_whole() {
    let node = TestNode::start(StartOptions::default()).await;
    let addr = node.resp_addr();
    let clients: Vec<_> = (0..8)
        .map(|_| {
            tokio::spawn(async move {
                let mut c = RawResp::connect(addr).await;
                for _ in 0..25 {
                    // MULTI, two INCRs and a read, in one write, as a pipelining client sends it.
                    let mut batch = Vec::new();
                    for cmd in [
                        &[&b"MULTI"[..]][..],
                        &[b"INCR", b"{pair}x"],
                        &[b"INCR", b"{pair}y"],
                        &[b"MGET", b"{pair}x", b"{pair}y"],
                        &[b"EXEC"],
                    ] {
                        batch.extend(common::encode_cmd(cmd));
                    }
                    c.send(&batch).await;
                    for _ in 0..4 {
                        c.read_reply().await;
                    }
                    let exec = String::from_utf8(c.read_reply().await).expect("utf-8");
                    let parts: Vec<&str> = exec.split("\r\n").collect();
                    // *3, :x, :y, *2, $len, x, $len, y
                    assert_eq!(parts[0], "*3", "{exec:?}");
                    assert_eq!(parts[1], format!(":{}", &parts[2][1..]), "{exec:?}");
                    assert_eq!(parts[5], parts[7], "{exec:?}");
                }
            })
        })
        .collect();
    for client in clients {
        client.await.expect("client");
    }
    let mut c = RawResp::connect(addr).await;
    assert_eq!(
        c.cmd(&[b"MGET", b"{pair}x", b"{pair}y"]).await,
        b"*2\r\n$3\r\n200\r\n$3\r\n200\r\n"
    );
}

#[tokio::test]
async fn string_commands_answer_as_redis_does_in_resp2() {
    compare(STRINGS, false).await;
}

#[tokio::test]
async fn string_commands_answer_as_redis_does_in_resp3() {
    compare(STRINGS, true).await;
}

#[tokio::test]
async fn list_commands_answer_as_redis_does_in_resp2() {
    compare(LISTS, false).await;
}

#[tokio::test]
async fn list_commands_answer_as_redis_does_in_resp3() {
    compare(LISTS, true).await;
}

#[tokio::test]
async fn set_commands_answer_as_redis_does_in_resp2() {
    compare(SETS, false).await;
}

#[tokio::test]
async fn set_commands_answer_as_redis_does_in_resp3() {
    compare(SETS, true).await;
}

/// The scripts above sent as one pipeline each: a pipeline runs commands on different keys
/// side by side and commands on one key as one log command, and every reply must still be
/// the one Redis gives, in order.
#[tokio::test]
async fn pipelined_commands_answer_as_redis_does() {
    for (script, resp3) in [
        (STRINGS, false),
        (HASHES, false),
        (SETS, true),
        (LISTS, false),
        (SORTED_SETS, true),
    ] {
        compare_pipelined_with_redis(script, resp3).await;
    }
}

#[tokio::test]
async fn sorted_set_commands_answer_as_redis_does_in_resp2() {
    compare(SORTED_SETS, false).await;
}

#[tokio::test]
async fn sorted_set_commands_answer_as_redis_does_in_resp3() {
    compare(SORTED_SETS, true).await;
}

#[tokio::test]
async fn hash_commands_answer_as_redis_does_in_resp2() {
    compare(HASHES, false).await;
}

#[tokio::test]
async fn hash_commands_answer_as_redis_does_in_resp3() {
    compare(HASHES, true).await;
}

/// `TIME`, `WAIT` and `KEYS` cannot be compared byte for byte; their shapes can.
#[tokio::test]
async fn time_wait_keys_and_flushdb_have_redis_shapes() {
    let node = TestNode::start(StartOptions::default()).await;
    let mut c = RawResp::connect(node.resp_addr()).await;
    let time = String::from_utf8(c.cmd(&[b"TIME"]).await).expect("utf-8");
    let parts: Vec<&str> = time.split("\r\n").collect();
    assert_eq!(parts[0], "*2", "{time:?}");
    let seconds: u64 = parts[2].parse().expect("seconds");
    let micros: u64 = parts[4].parse().expect("microseconds");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    assert!(seconds.abs_diff(now) < 60 && micros < 1_000_000, "{time:?}");

    // One node: a quorum is the node itself, so no replica besides it.
    assert_eq!(c.cmd(&[b"WAIT", b"1", b"0"]).await, b":0\r\n");
    assert_eq!(
        c.cmd(&[b"WAIT", b"1", b"-1"]).await,
        b"-ERR timeout is negative\r\n"
    );

    for key in ["user:1", "user:2", "order:1"] {
        assert_eq!(c.cmd(&[b"SET", key.as_bytes(), b"v"]).await, b"+OK\r\n");
    }
    let keys = String::from_utf8(c.cmd(&[b"KEYS", b"user:*"]).await).expect("utf-8");
    assert!(keys.starts_with("*2\r\n"), "{keys:?}");
    assert!(
        keys.contains("user:1") && keys.contains("user:2"),
        "{keys:?}"
    );
    // HELLO with AUTH as the default user switches the protocol; another user is refused.
    let hello = c
        .cmd(&[
            b"HELLO", b"3", b"AUTH", b"default", b"pw", b"SETNAME", b"me",
        ])
        .await;
    assert!(
        hello.starts_with(b"%"),
        "{:?}",
        String::from_utf8_lossy(&hello)
    );
    assert_eq!(
        c.cmd(&[b"HELLO", b"2", b"AUTH", b"bob", b"pw"]).await,
        b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"
    );
    assert_eq!(c.cmd(&[b"HELLO", b"2"]).await.first(), Some(&b'*'));
    // Cluster-mode commands (a standalone redis-server refuses them, so no comparison).
    assert_eq!(c.cmd(&[b"READONLY"]).await, b"+OK\r\n");
    assert_eq!(c.cmd(&[b"GET", b"user:1"]).await, b"$1\r\nv\r\n");
    assert_eq!(c.cmd(&[b"READWRITE"]).await, b"+OK\r\n");
    assert_eq!(c.cmd(&[b"ASKING"]).await, b"+OK\r\n");
    let random = c.cmd(&[b"RANDOMKEY"]).await;
    assert!(
        [
            &b"$6\r\nuser:1\r\n"[..],
            b"$6\r\nuser:2\r\n",
            b"$7\r\norder:1\r\n"
        ]
        .contains(&random.as_slice()),
        "{:?}",
        String::from_utf8_lossy(&random)
    );
    assert_eq!(c.cmd(&[b"MEMORY", b"USAGE", b"user:1"]).await, b":55\r\n");
    assert_eq!(c.cmd(&[b"MEMORY", b"USAGE", b"nope"]).await, b"$-1\r\n");
    assert_eq!(
        c.cmd(&[b"FLUSHDB", b"BOGUS"]).await,
        b"-ERR syntax error\r\n"
    );
    assert_eq!(c.cmd(&[b"FLUSHALL", b"ASYNC"]).await, b"+OK\r\n");
    assert_eq!(c.cmd(&[b"DBSIZE"]).await, b":0\r\n");
    assert_eq!(c.cmd(&[b"KEYS", b"*"]).await, b"*0\r\n");
    assert_eq!(c.cmd(&[b"RANDOMKEY"]).await, b"$-1\r\n");
}

/// `APPEND` and `SETRANGE` past the node's value limit are refused and change nothing.
#[tokio::test]
async fn growing_a_value_past_the_limit_is_refused() {
    let node = TestNode::start(StartOptions::default()).await;
    let mut c = RawResp::connect(node.resp_addr()).await;
    let half = vec![b'x'; 300 * 1024];
    assert_eq!(c.cmd(&[b"SET", b"big", &half]).await, b"+OK\r\n");
    let too_long = b"-ERR string exceeds maximum allowed size (proto-max-bulk-len)\r\n";
    assert_eq!(c.cmd(&[b"APPEND", b"big", &half]).await, too_long);
    assert_eq!(
        c.cmd(&[b"SETRANGE", b"big", b"600000", b"y"]).await,
        too_long
    );
    assert_eq!(
        c.cmd(&[b"STRLEN", b"big"]).await,
        format!(":{}\r\n", half.len()).into_bytes()
    );
}

/// A pipeline's commands on one key run as one log command; one of them past a limit is
/// refused alone, and the others apply as they would have one by one.
#[tokio::test]
async fn a_pipelined_command_past_a_limit_fails_alone() {
    let node = TestNode::start(StartOptions::default()).await;
    let mut c = RawResp::connect(node.resp_addr()).await;
    let long_field = vec![b'f'; 9 * 1024];
    let mut pipeline = Vec::new();
    for command in [
        &[&b"SET"[..], b"k", b"small"][..],
        &[b"SETRANGE", b"k", b"600000", b"y"],
        &[b"APPEND", b"k", b"!"],
        &[b"HSET", b"h", b"a", b"1"],
        &[b"HSET", b"h", &long_field, b"2"],
        &[b"HINCRBY", b"h", b"a", b"5"],
    ] {
        pipeline.extend(common::encode_cmd(command));
    }
    c.send(&pipeline).await;
    let mut replies = Vec::new();
    for _ in 0..6 {
        replies.push(String::from_utf8_lossy(&c.read_reply().await).into_owned());
    }
    assert_eq!(replies[0], "+OK\r\n");
    assert!(replies[1].starts_with("-ERR"), "{replies:?}");
    assert_eq!(replies[2], ":6\r\n", "{replies:?}");
    assert_eq!(replies[3], ":1\r\n");
    assert!(replies[4].starts_with("-ERR"), "{replies:?}");
    assert_eq!(replies[5], ":6\r\n", "{replies:?}");
    assert_eq!(c.cmd(&[b"GET", b"k"]).await, b"$6\r\nsmall!\r\n");
}

/// The command names in the first column of `docs/redis-compatibility.md`'s command table.
fn documented_commands() -> std::collections::BTreeSet<String> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/redis-compatibility.md"
    );
    let text = std::fs::read_to_string(path).expect("docs/redis-compatibility.md");
    let table = text
        .split("\n## Commands\n")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("a Commands section");
    let mut names = std::collections::BTreeSet::new();
    for row in table.lines().filter(|l| l.starts_with("| `")) {
        let first_cell = row.split(" | ").next().unwrap_or_default();
        for span in first_cell.split('`').skip(1).step_by(2) {
            let word = span.split_whitespace().next().unwrap_or_default();
            if !word.is_empty() && word.chars().all(|c| c.is_ascii_uppercase()) {
                names.insert(word.to_ascii_lowercase());
            }
        }
    }
    names
}

/// The compatibility table and the server's own command table (what `COMMAND` lists, which
/// is what the server dispatches) name the same commands, and every one of them is known
/// to the dispatcher.
#[tokio::test]
async fn the_compatibility_table_lists_exactly_the_commands_the_server_has() {
    use common::{Reply, ReplyExt};
    let node = TestNode::start(StartOptions::default()).await;
    let mut c = RawResp::connect(node.resp_addr()).await;
    let listed = Reply::parse(&c.cmd(&[b"COMMAND"]).await);
    let served: std::collections::BTreeSet<String> = listed
        .array()
        .iter()
        .map(|entry| String::from_utf8_lossy(entry.array()[0].bulk()).into_owned())
        .collect();
    let documented = documented_commands();
    let undocumented: Vec<&String> = served.difference(&documented).collect();
    let unserved: Vec<&String> = documented.difference(&served).collect();
    assert!(
        undocumented.is_empty() && unserved.is_empty(),
        "COMMAND lists {undocumented:?} that docs/redis-compatibility.md does not; the docs name {unserved:?} that COMMAND does not list"
    );
    for name in &served {
        if name == "quit" {
            continue;
        }
        let reply = c.cmd(&[name.as_bytes()]).await;
        assert!(
            !String::from_utf8_lossy(&reply).contains("unknown command"),
            "{name} is listed but not dispatched: {:?}",
            String::from_utf8_lossy(&reply)
        );
    }
}

/// redis-py 8 with its defaults (RESP3) runs the optimistic-locking pattern applications use
/// (`Redis.transaction`: WATCH, read, MULTI, write, EXEC, retry on `WatchError`) from four
/// threads through one node of a 3-node cluster; every transfer lands exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_py_transactions_with_watch_lose_nothing_on_a_cluster() {
    let c = TestCluster::start(ClusterOptions::default()).await;
    let python = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../target/test-venv/bin/python"
    );
    let mut client = tokio::process::Command::new(python);
    client
        .arg(clients::source("redis_transactions.py"))
        .args(["127.0.0.1", &c.node(0).resp_addr().port().to_string()]);
    let output = clients::run_bounded(client, Duration::from_secs(120), "redis-py").await;
    let seen = clients::json_line(&output, &c.logs());
    assert_eq!(seen["protocol"], 3, "{seen}");
    assert_eq!(
        (seen["a"].as_i64(), seen["b"].as_i64()),
        (Some(0), Some(100))
    );
}

/// `BLPOP` and `BLMOVE` wait for a push through any node of a 3-node cluster; each waiting
/// client gets its own element; a client that hangs up while it waits takes none; a timeout
/// answers a null after at least its time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_pops_wait_for_pushes_on_a_cluster() {
    use common::{Reply, ReplyExt, until_blocking_queries};
    let c = TestCluster::start(ClusterOptions::default()).await;
    let (waiting_node, pushing_node) = (c.node(1), c.node(2));

    // Three waiters on one list, served as pushes arrive: one element each.
    let mut waiters = Vec::new();
    for _ in 0..3 {
        let mut conn = RawResp::connect(waiting_node.resp_addr()).await;
        conn.send_cmd(&[b"BLPOP", b"{q}jobs", b"30"]).await;
        waiters.push(conn);
    }
    until_blocking_queries(waiting_node, 3).await;
    let mut pusher = RawResp::connect(pushing_node.resp_addr()).await;
    for job in [&b"j1"[..], b"j2", b"j3"] {
        let pushed = Reply::parse(&pusher.cmd(&[b"RPUSH", b"{q}jobs", job]).await);
        assert!(pushed.int() >= 1);
    }
    let mut got = Vec::new();
    for conn in &mut waiters {
        let reply = Reply::parse(&conn.read_reply().await);
        let pair = reply.array();
        assert_eq!(pair[0].bulk(), b"{q}jobs");
        got.push(String::from_utf8_lossy(pair[1].bulk()).into_owned());
    }
    got.sort();
    assert_eq!(got, ["j1", "j2", "j3"]);
    assert_eq!(pusher.cmd(&[b"LLEN", b"{q}jobs"]).await, b":0\r\n");

    // BLMOVE hands the element on to another list of the slot.
    let mut mover = RawResp::connect(waiting_node.resp_addr()).await;
    mover
        .send_cmd(&[b"BLMOVE", b"{q}in", b"{q}done", b"LEFT", b"RIGHT", b"30"])
        .await;
    until_blocking_queries(waiting_node, 1).await;
    pusher.cmd(&[b"LPUSH", b"{q}in", b"task"]).await;
    assert_eq!(mover.read_reply().await, b"$4\r\ntask\r\n");
    assert_eq!(
        pusher.cmd(&[b"LRANGE", b"{q}done", b"0", b"-1"]).await,
        b"*1\r\n$4\r\ntask\r\n"
    );

    // Replies pipelined before a blocking command are not held back by its wait.
    let mut pipelined = RawResp::connect(waiting_node.resp_addr()).await;
    pipelined.send(b"PING\r\nBLPOP {q}later 30\r\n").await;
    assert_eq!(pipelined.read_reply().await, b"+PONG\r\n");
    until_blocking_queries(waiting_node, 1).await;
    pusher.cmd(&[b"RPUSH", b"{q}later", b"x"]).await;
    assert_eq!(
        pipelined.read_reply().await,
        b"*2\r\n$8\r\n{q}later\r\n$1\r\nx\r\n"
    );

    // A client that hangs up stops waiting; the next push stays in the list.
    let mut quitter = RawResp::connect(waiting_node.resp_addr()).await;
    quitter.send_cmd(&[b"BRPOP", b"{q}left", b"0"]).await;
    until_blocking_queries(waiting_node, 1).await;
    drop(quitter);
    until_blocking_queries(waiting_node, 0).await;
    pusher.cmd(&[b"RPUSH", b"{q}left", b"kept"]).await;
    assert_eq!(pusher.cmd(&[b"LLEN", b"{q}left"]).await, b":1\r\n");

    // A timeout answers a null array, no sooner than asked.
    let started = std::time::Instant::now();
    let timed_out = mover.cmd(&[b"BLPOP", b"{q}never", b"0.3"]).await;
    assert_eq!(timed_out, b"*-1\r\n");
    assert!(started.elapsed() >= Duration::from_millis(300));
}

/// redis-py 8's cluster client with its defaults (RESP3) using hashes, sets and lists through
/// a 3-node cluster: `hset(mapping=...)`, `hgetall` as a dict, counters, a transactional
/// pipeline, `hscan_iter` over 2,500 fields, sets as Python sets, `sscan_iter`, a queue with
/// `blpop`, `WRONGTYPE`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_py_uses_hashes_sets_lists_and_sorted_sets_on_a_cluster() {
    let c = TestCluster::start(ClusterOptions::default()).await;
    let python = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../target/test-venv/bin/python"
    );
    let mut client = tokio::process::Command::new(python);
    client
        .arg(clients::source("redis_collections.py"))
        .args(["127.0.0.1", &c.node(0).resp_addr().port().to_string()]);
    let output = clients::run_bounded(client, Duration::from_secs(120), "redis-py").await;
    let seen = clients::json_line(&output, &c.logs());
    assert_eq!(seen["failures"], serde_json::json!([]), "{seen}");
}

/// go-redis v9 with its defaults (RESP3; the cluster client finds slots with CLUSTER SLOTS
/// and splits pipelines by node) against a 3-node cluster: strings, expiry options, a
/// pipeline, a sorted set, and optimistic transactions with WATCH from four goroutines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_redis_with_its_defaults_works_against_a_cluster() {
    let out = tempfile::tempdir().expect("temp dir");
    let binary = clients::go_build("goredis", out.path()).await;
    let c = TestCluster::start(ClusterOptions::default()).await;
    let mut client = tokio::process::Command::new(&binary);
    client.arg(c.node(0).resp_addr().to_string());
    let output = clients::run_bounded(client, Duration::from_secs(120), "go-redis").await;
    let seen = clients::json_line(&output, &c.logs());
    assert_eq!(
        (seen["a"].as_i64(), seen["b"].as_i64()),
        (Some(0), Some(100))
    );
}

/// node-redis 5 with its defaults (its cluster client) against a 3-node cluster: strings,
/// 200 commands in flight at once, MULTI/EXEC on keys of one slot, and a sorted set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_redis_with_its_defaults_works_against_a_cluster() {
    let source = clients::source("noderedis");
    let mut install = tokio::process::Command::new("npm");
    install
        .args(["ci", "--no-audit", "--no-fund", "--silent"])
        .current_dir(&source);
    let installed = clients::run_bounded(install, Duration::from_secs(300), "npm ci").await;
    assert!(
        installed.status.success(),
        "npm ci: {}",
        String::from_utf8_lossy(&installed.stderr)
    );
    let c = TestCluster::start(ClusterOptions::default()).await;
    let mut client = tokio::process::Command::new("node");
    client
        .arg("client.js")
        .arg(c.node(0).resp_addr().to_string())
        .current_dir(&source);
    let output = clients::run_bounded(client, Duration::from_secs(120), "node-redis").await;
    let seen = clients::json_line(&output, &c.logs());
    assert_eq!(seen["failures"], serde_json::json!([]), "{seen}");
}

/// `MULTI` queues at most `[limits] max_multi_commands`; the one past it is refused and the
/// transaction discarded, and the connection goes on.
#[tokio::test]
async fn a_transaction_past_the_configured_size_is_refused() {
    let node =
        TestNode::start(StartOptions::default().config("[limits]\nmax_multi_commands = 3\n")).await;
    let mut c = RawResp::connect(node.resp_addr()).await;
    assert_eq!(c.cmd(&[b"MULTI"]).await, b"+OK\r\n");
    for _ in 0..3 {
        assert_eq!(c.cmd(&[b"INCR", b"n"]).await, b"+QUEUED\r\n");
    }
    assert_eq!(
        c.cmd(&[b"INCR", b"n"]).await,
        b"-ERR a transaction holds at most 3 commands ([limits] max_multi_commands)\r\n"
    );
    assert!(c.cmd(&[b"EXEC"]).await.starts_with(b"-EXECABORT"));
    assert_eq!(c.cmd(&[b"GET", b"n"]).await, b"$-1\r\n");
    assert_eq!(c.cmd(&[b"MULTI"]).await, b"+OK\r\n");
    assert_eq!(c.cmd(&[b"INCR", b"n"]).await, b"+QUEUED\r\n");
    assert_eq!(c.cmd(&[b"EXEC"]).await, b"*1\r\n:1\r\n");
}

/// A transaction, or an MSET, that would make one log entry of more than 64 MiB is refused
/// before it reaches the log (followers could not take such an entry over the peer link).
#[tokio::test]
async fn writes_too_large_for_one_log_entry_are_refused() {
    let node = TestNode::start(StartOptions::default()).await;
    let mut c = RawResp::connect(node.resp_addr()).await;
    let value = vec![b'v'; 512 * 1024];
    assert_eq!(c.cmd(&[b"MULTI"]).await, b"+OK\r\n");
    let mut refused = None;
    for i in 0..140 {
        let key = format!("{{big}}{i}");
        let reply = c.cmd(&[b"SET", key.as_bytes(), &value]).await;
        if reply != b"+QUEUED\r\n" {
            refused = Some((i, String::from_utf8_lossy(&reply).into_owned()));
            break;
        }
    }
    let (at, reply) = refused.expect("a 70 MiB transaction was queued whole");
    assert_eq!(at, 127, "{reply}");
    assert_eq!(reply, "-ERR a transaction carries at most 64 MiB\r\n");
    assert!(c.cmd(&[b"EXEC"]).await.starts_with(b"-EXECABORT"));
    let mut mset: Vec<Vec<u8>> = vec![b"MSET".to_vec()];
    for i in 0..130 {
        mset.push(format!("m{i}").into_bytes());
        mset.push(value.clone());
    }
    let args: Vec<&[u8]> = mset.iter().map(Vec::as_slice).collect();
    let reply = String::from_utf8_lossy(&c.cmd(&args).await).into_owned();
    assert!(
        reply.starts_with("-ERR one write may carry at most 64 MiB"),
        "{reply}"
    );
    assert_eq!(c.cmd(&[b"DBSIZE"]).await, b":0\r\n");
}
