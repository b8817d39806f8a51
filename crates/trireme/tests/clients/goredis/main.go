// go-redis v9 with its defaults (RESP3, cluster client discovering slots with CLUSTER
// SLOTS) against a Trireme cluster: strings, expiry, optimistic transactions with WATCH,
// and a pipeline, as a Go service would use them.
//
// Usage: goredis HOST:PORT
//
// Prints one JSON line of what it saw and exits 0 only if every check held.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

func main() {
	ctx := context.Background()
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{os.Args[1]}})
	defer client.Close()
	var failures []string
	check := func(what string, ok bool, detail any) {
		if !ok {
			failures = append(failures, fmt.Sprintf("%s: %v", what, detail))
		}
	}

	// Strings and expiry.
	check("set", client.Set(ctx, "go:k", "v", 0).Err() == nil, "")
	got, err := client.Get(ctx, "go:k").Result()
	check("get", err == nil && got == "v", got)
	_, err = client.Get(ctx, "go:missing").Result()
	check("get missing is redis.Nil", errors.Is(err, redis.Nil), err)
	n, err := client.Append(ctx, "go:k", "w").Result()
	check("append", err == nil && n == 2, n)
	ok, err := client.SetNX(ctx, "go:k", "x", 0).Result()
	check("setnx on an existing key", err == nil && !ok, ok)
	f, err := client.IncrByFloat(ctx, "go:f", 1.5).Result()
	check("incrbyfloat", err == nil && f == 1.5, f)
	set, err := client.ExpireNX(ctx, "go:k", time.Hour).Result()
	check("expire nx", err == nil && set, set)
	ttl, err := client.TTL(ctx, "go:k").Result()
	check("ttl", err == nil && ttl > 59*time.Minute, ttl)
	check("rename", client.Rename(ctx, "{go}a-missing", "{go}b").Err() != nil, "a missing key renames")

	// Hashes: a record per key, counters in fields, the whole record back as a map.
	added, err := client.HSet(ctx, "go:user", "name", "Ann", "visits", 1).Result()
	check("hset", err == nil && added == 2, added)
	visits, err := client.HIncrBy(ctx, "go:user", "visits", 2).Result()
	check("hincrby", err == nil && visits == 3, visits)
	all, err := client.HGetAll(ctx, "go:user").Result()
	check("hgetall", err == nil && all["name"] == "Ann" && all["visits"] == "3" && len(all) == 2, all)
	_, err = client.HGet(ctx, "go:user", "missing").Result()
	check("hget missing is redis.Nil", errors.Is(err, redis.Nil), err)
	kind, err := client.Type(ctx, "go:user").Result()
	check("type", err == nil && kind == "hash", kind)
	_, err = client.Get(ctx, "go:user").Result()
	check("get on a hash is WRONGTYPE", err != nil && len(err.Error()) > 9 && err.Error()[:9] == "WRONGTYPE", err)

	// Sorted sets: a leaderboard, scores as float64 (RESP3 doubles under go-redis's defaults).
	zadded, err := client.ZAdd(ctx, "go:board",
		redis.Z{Score: 3, Member: "c"}, redis.Z{Score: 1.5, Member: "a"}, redis.Z{Score: 2, Member: "b"}).Result()
	check("zadd", err == nil && zadded == 3, zadded)
	score, err := client.ZIncrBy(ctx, "go:board", 2.25, "a").Result()
	check("zincrby", err == nil && score == 3.75, score)
	top, err := client.ZRevRangeWithScores(ctx, "go:board", 0, 1).Result()
	check("zrevrange withscores", err == nil && len(top) == 2 && top[0].Member == "a" && top[0].Score == 3.75 && top[1].Member == "c", top)
	byScore, err := client.ZRangeByScore(ctx, "go:board", &redis.ZRangeBy{Min: "(2", Max: "+inf"}).Result()
	check("zrangebyscore", err == nil && len(byScore) == 2 && byScore[0] == "c", byScore)
	rank, err := client.ZRank(ctx, "go:board", "b").Result()
	check("zrank", err == nil && rank == 0, rank)
	_, err = client.ZScore(ctx, "go:board", "nobody").Result()
	check("zscore missing is redis.Nil", errors.Is(err, redis.Nil), err)
	popped, err := client.ZPopMax(ctx, "go:board").Result()
	check("zpopmax", err == nil && len(popped) == 1 && popped[0].Member == "a" && popped[0].Score == 3.75, popped)

	// A pipeline across slots: the cluster client splits it by node.
	pipe := client.Pipeline()
	incrs := make([]*redis.IntCmd, 50)
	for i := range incrs {
		incrs[i] = pipe.Incr(ctx, "go:counter:"+strconv.Itoa(i%5))
	}
	_, err = pipe.Exec(ctx)
	check("pipeline", err == nil, err)
	check("pipeline replies in order", incrs[49].Val() == 10, incrs[49].Val())

	// Optimistic transactions from several goroutines: WATCH, read, MULTI/EXEC, retry.
	client.MSet(ctx, "{acct}a", 100, "{acct}b", 0)
	aborted := 0
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				for {
					err := client.Watch(ctx, func(tx *redis.Tx) error {
						a, err := tx.Get(ctx, "{acct}a").Int()
						if err != nil {
							return err
						}
						b, err := tx.Get(ctx, "{acct}b").Int()
						if err != nil {
							return err
						}
						_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
							p.Set(ctx, "{acct}a", a-1, 0)
							p.Set(ctx, "{acct}b", b+1, 0)
							return nil
						})
						return err
					}, "{acct}a", "{acct}b")
					if errors.Is(err, redis.TxFailedErr) {
						mu.Lock()
						aborted++
						mu.Unlock()
						continue
					}
					if err != nil {
						mu.Lock()
						failures = append(failures, "transaction: "+err.Error())
						mu.Unlock()
					}
					break
				}
			}
		}()
	}
	wg.Wait()
	a, _ := client.Get(ctx, "{acct}a").Int()
	b, _ := client.Get(ctx, "{acct}b").Int()
	check("every transfer landed once", a == 0 && b == 100, fmt.Sprintf("a=%d b=%d", a, b))

	out, _ := json.Marshal(map[string]any{
		"failures": failures, "a": a, "b": b, "aborted": aborted,
	})
	fmt.Println(string(out))
	if len(failures) > 0 {
		os.Exit(1)
	}
}
