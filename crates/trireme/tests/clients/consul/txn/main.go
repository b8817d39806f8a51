// Consul's own Go client (github.com/hashicorp/consul/api) running KV transactions against a
// Trireme node, as Vault and other Consul users do: sets, gets, check-index, cas, deletes,
// and a transaction whose stale cas must roll back everything in it; and the agent's name,
// which clients probe at start-up (the node given is n2 of the test cluster).
//
// Usage: txn HTTP_ADDR
//
// Prints one JSON line of what it saw and exits 0 only if every check held.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

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

	// Keys in different shards are refused, naming the rule.
	ok, resp, _, err = txn.Txn(api.TxnOps{
		{KV: &api.KVTxnOp{Verb: api.KVSet, Key: "{one}/x", Value: []byte("1")}},
		{KV: &api.KVTxnOp{Verb: api.KVSet, Key: "{two}/x", Value: []byte("2")}},
		{KV: &api.KVTxnOp{Verb: api.KVSet, Key: "{three}/x", Value: []byte("3")}},
		{KV: &api.KVTxnOp{Verb: api.KVSet, Key: "{four}/x", Value: []byte("4")}},
	}, nil)
	crossShard := err == nil && !ok && len(resp.Errors) == 1 &&
		strings.Contains(resp.Errors[0].What, "one shard")
	check("cross-shard refused", crossShard, fmt.Sprint(err, resp))

	out, _ := json.Marshal(map[string]any{"failures": failures})
	fmt.Println(string(out))
	if len(failures) > 0 {
		os.Exit(1)
	}
}
