// Consul's own Go client (github.com/hashicorp/consul/api) running KV transactions against a
// Trireme node, as Vault and other Consul users do: sets, gets, check-index, cas, deletes,
// and a transaction whose stale cas must roll back everything in it, first with keys that
// share a hash tag, then Vault's way (20 keys under one prefix, in many shards); and the
// agent's name, which clients probe at start-up (the node given is n2 of the test cluster).
//
// Usage: txn HTTP_ADDR
//
// Prints one JSON line of what it saw and exits 0 only if every check held.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/hashicorp/consul/api"
)

func main() {
	config := api.DefaultConfig()
	config.Address = os.Args[1]
	client, err := api.NewClient(config)
	if err != nil {
		panic(err)
	}
	kv, txn := client.KV(), client.Txn()
	var failures []string
	check := func(what string, ok bool, detail any) {
		if !ok {
			failures = append(failures, fmt.Sprintf("%s: %v", what, detail))
		}
	}

	// What clients probe at start-up.
	name, err := client.Agent().NodeName()
	check("agent node name", err == nil && name == "n2", fmt.Sprint(name, err))

	// Two sets and a get in one transaction; the keys share the {acct} tag.
	ok, resp, _, err := txn.Txn(api.TxnOps{
		{KV: &api.KVTxnOp{Verb: api.KVSet, Key: "{acct}/a", Value: []byte("100"), Flags: 7}},
		{KV: &api.KVTxnOp{Verb: api.KVSet, Key: "{acct}/b", Value: []byte("0")}},
		{KV: &api.KVTxnOp{Verb: api.KVGet, Key: "{acct}/a"}},
	}, nil)
	check("first txn", err == nil && ok && len(resp.Results) == 3, fmt.Sprint(err, resp))
	var aIndex uint64
	if err == nil && ok && len(resp.Results) == 3 {
		got := resp.Results[2].KV
		check("get sees the set", string(got.Value) == "100" && got.Flags == 7, got)
		check("set answers no value", resp.Results[0].KV.Value == nil, resp.Results[0].KV)
		aIndex = resp.Results[0].KV.ModifyIndex
	}

	// A transfer guarded by check-index and cas: applied.
	ok, resp, _, err = txn.Txn(api.TxnOps{
		{KV: &api.KVTxnOp{Verb: api.KVCheckIndex, Key: "{acct}/a", Index: aIndex}},
		{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: "{acct}/a", Value: []byte("90"), Index: aIndex}},
		{KV: &api.KVTxnOp{Verb: api.KVSet, Key: "{acct}/b", Value: []byte("10")}},
	}, nil)
	check("guarded transfer", err == nil && ok, fmt.Sprint(err, resp))

	// The same cas again is stale: nothing in the transaction happens.
	ok, resp, _, err = txn.Txn(api.TxnOps{
		{KV: &api.KVTxnOp{Verb: api.KVSet, Key: "{acct}/b", Value: []byte("999")}},
		{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: "{acct}/a", Value: []byte("0"), Index: aIndex}},
	}, nil)
	check("stale cas refused", err == nil && !ok && len(resp.Errors) == 1, fmt.Sprint(err, resp))
	if err == nil && !ok && len(resp.Errors) == 1 {
		check("error names the op", resp.Errors[0].OpIndex == 1, resp.Errors[0])
	}
	b, _, err := kv.Get("{acct}/b", nil)
	check("rolled back", err == nil && b != nil && string(b.Value) == "10", b)

	// check-not-exists and delete-cas.
	ok, _, _, err = txn.Txn(api.TxnOps{
		{KV: &api.KVTxnOp{Verb: api.KVCheckNotExists, Key: "{acct}/c"}},
		{KV: &api.KVTxnOp{Verb: api.KVSet, Key: "{acct}/c", Value: []byte("new")}},
	}, nil)
	check("check-not-exists", err == nil && ok, err)
	c, _, _ := kv.Get("{acct}/c", nil)
	ok, _, _, err = txn.Txn(api.TxnOps{
		{KV: &api.KVTxnOp{Verb: api.KVDeleteCAS, Key: "{acct}/c", Index: c.ModifyIndex}},
	}, nil)
	check("delete-cas", err == nil && ok, err)
	c, _, _ = kv.Get("{acct}/c", nil)
	check("deleted", c == nil, c)

	// Vault's way: 20 keys under one prefix, hashed over every shard, written, changed,
	// guarded and deleted in transactions that each commit as a whole.
	const n = 20
	key := func(i int) string { return fmt.Sprintf("vault/sys/token/id/%02d", i) }
	var sets api.TxnOps
	for i := 0; i < n; i++ {
		sets = append(sets, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVSet, Key: key(i), Value: []byte("v1")}})
	}
	ok, resp, _, err = txn.Txn(sets, nil)
	check("vault sets", err == nil && ok && len(resp.Results) == n, fmt.Sprint(err, resp))
	if err == nil && ok && len(resp.Results) == n {
		for i, result := range resp.Results {
			check("set answers its key and index", result.KV.Key == key(i) && result.KV.ModifyIndex > 0 &&
				result.KV.CreateIndex == result.KV.ModifyIndex, result.KV)
		}
	}
	values := func() map[string]string {
		pairs, _, err := kv.List("vault/", nil)
		check("list", err == nil, err)
		out := map[string]string{}
		for _, p := range pairs {
			out[p.Key] = string(p.Value)
		}
		return out
	}
	all := func(want string) bool {
		seen := values()
		if len(seen) != n {
			return false
		}
		for _, v := range seen {
			if v != want {
				return false
			}
		}
		return true
	}
	check("every key written", all("v1"), values())
	first, _, _ := kv.Get(key(0), nil)
	last, _, _ := kv.Get(key(n-1), nil)

	// Guarded by check-index on one key and cas on another, with a get: applied everywhere.
	ops := api.TxnOps{
		{KV: &api.KVTxnOp{Verb: api.KVCheckIndex, Key: key(0), Index: first.ModifyIndex}},
	}
	for i := 1; i < n-1; i++ {
		ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVSet, Key: key(i), Value: []byte("v2")}})
	}
	ops = append(ops,
		&api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: key(n - 1), Value: []byte("v2"), Index: last.ModifyIndex}},
		&api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVSet, Key: key(0), Value: []byte("v2")}},
		&api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVGet, Key: key(5)}},
	)
	ok, resp, _, err = txn.Txn(ops, nil)
	check("guarded change across shards", err == nil && ok, fmt.Sprint(err, resp))
	if err == nil && ok {
		got := resp.Results[len(resp.Results)-1].KV
		check("the get sees the transaction's own set", got.Key == key(5) && string(got.Value) == "v2", got)
	}
	check("every key changed", all("v2"), values())

	// The same cas again is stale: none of the sets before it happens, on any shard.
	ops = nil
	for i := 0; i < n-1; i++ {
		ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVSet, Key: key(i), Value: []byte("v3")}})
	}
	ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: key(n - 1), Value: []byte("v3"), Index: last.ModifyIndex}})
	ok, resp, _, err = txn.Txn(ops, nil)
	check("stale cas across shards refused", err == nil && !ok && len(resp.Errors) == 1, fmt.Sprint(err, resp))
	if err == nil && !ok && len(resp.Errors) == 1 {
		check("the error names the cas", resp.Errors[0].OpIndex == n-1, resp.Errors[0])
	}
	check("nothing changed", all("v2"), values())

	// A lock taken and a key written together.
	session, _, err := client.Session().Create(&api.SessionEntry{TTL: "30s"}, nil)
	check("session", err == nil, err)
	ok, resp, _, err = txn.Txn(api.TxnOps{
		{KV: &api.KVTxnOp{Verb: api.KVLock, Key: key(3), Value: []byte("held"), Session: session}},
		{KV: &api.KVTxnOp{Verb: api.KVSet, Key: key(4), Value: []byte("v4")}},
	}, nil)
	check("lock across shards", err == nil && ok, fmt.Sprint(err, resp))
	locked, _, _ := kv.Get(key(3), nil)
	check("lock held", locked != nil && locked.Session == session && string(locked.Value) == "held", locked)

	// The whole prefix read in one step, from every shard.
	ok, resp, _, err = txn.Txn(api.TxnOps{
		{KV: &api.KVTxnOp{Verb: api.KVGetTree, Key: "vault/sys/token/"}},
	}, nil)
	check("get-tree across shards", err == nil && ok && len(resp.Results) == n, fmt.Sprint(err, resp))
	if err == nil && ok && len(resp.Results) == n {
		check("get-tree answers in key order", resp.Results[0].KV.Key == key(0) &&
			resp.Results[n-1].KV.Key == key(n-1), resp.Results[0].KV)
	}

	// Deleted together, one at a time ...
	ops = nil
	for i := 0; i < n/2; i++ {
		ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVDelete, Key: key(i)}})
	}
	ok, resp, _, err = txn.Txn(ops, nil)
	check("deletes across shards", err == nil && ok, fmt.Sprint(err, resp))
	check("half the keys deleted", len(values()) == n-n/2, values())
	// ... and the rest as a tree, with one key written again after it.
	ok, resp, _, err = txn.Txn(api.TxnOps{
		{KV: &api.KVTxnOp{Verb: api.KVDeleteTree, Key: "vault/"}},
		{KV: &api.KVTxnOp{Verb: api.KVSet, Key: key(0), Value: []byte("last")}},
	}, nil)
	check("delete-tree across shards", err == nil && ok, fmt.Sprint(err, resp))
	left := values()
	check("only the key written after the delete-tree is left", len(left) == 1 && left[key(0)] == "last", left)
	_, err = kv.DeleteTree("vault/", nil)
	check("recursive delete", err == nil, err)
	check("every key deleted", len(values()) == 0, values())

	out, _ := json.Marshal(map[string]any{"failures": failures})
	fmt.Println(string(out))
	if len(failures) > 0 {
		os.Exit(1)
	}
}
