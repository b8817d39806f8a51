// Consul's own Go client (github.com/hashicorp/consul/api) watching keys with blocking
// queries, as consul-template, `consul watch` and api.Lock do: a Get, a List and a Keys
// call with WaitIndex set hold until what they read changes, answer with a higher index, and
// hold for their whole WaitTime when nothing changes. Writes go through a second node.
//
// Usage: watch WATCH_ADDR WRITE_ADDR
//
// Prints one JSON line of what it saw and exits 0 only if every check held.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/hashicorp/consul/api"
)

func client(addr string) *api.KV {
	config := api.DefaultConfig()
	config.Address = addr
	c, err := api.NewClient(config)
	if err != nil {
		panic(err)
	}
	return c.KV()
}

type result struct {
	Failures    []string `json:"failures"`
	GetWokeMs   int64    `json:"get_woke_ms"`
	ListWokeMs  int64    `json:"list_woke_ms"`
	IdleHeldMs  int64    `json:"idle_held_ms"`
	IndexesSeen []uint64 `json:"indexes_seen"`
}

func main() {
	watcher, writer := client(os.Args[1]), client(os.Args[2])
	var out result
	check := func(what string, ok bool, detail ...any) {
		if !ok {
			out.Failures = append(out.Failures, fmt.Sprintf("%s: %v", what, fmt.Sprint(detail...)))
		}
	}
	put := func(key, value string) {
		_, err := writer.Put(&api.KVPair{Key: key, Value: []byte(value)}, nil)
		check("put "+key, err == nil, err)
	}
	long := 20 * time.Second

	// One key: a write through the other node wakes the watcher with the new value.
	put("watch/k", "v1")
	_, meta, err := watcher.Get("watch/k", nil)
	check("first get", err == nil, err)
	first := meta.LastIndex
	out.IndexesSeen = append(out.IndexesSeen, first)
	done := make(chan struct{})
	var woke *api.KVPair
	var wokeMeta *api.QueryMeta
	started := time.Now()
	go func() {
		defer close(done)
		woke, wokeMeta, err = watcher.Get("watch/k", &api.QueryOptions{WaitIndex: first, WaitTime: long})
	}()
	put("watch/k", "v2")
	<-done
	out.GetWokeMs = time.Since(started).Milliseconds()
	check("blocking get", err == nil && woke != nil, err)
	if woke != nil {
		check("woken with the new value", string(woke.Value) == "v2", string(woke.Value))
		check("index moved past the one waited on", wokeMeta.LastIndex > first, wokeMeta.LastIndex, " <= ", first)
		check("index is the key's ModifyIndex", wokeMeta.LastIndex == woke.ModifyIndex, wokeMeta.LastIndex, woke.ModifyIndex)
		out.IndexesSeen = append(out.IndexesSeen, wokeMeta.LastIndex)
	}
	check("woken well before the wait ran out", time.Since(started) < long/2, time.Since(started))

	// Nothing changes: the query holds for its wait (plus at most a sixteenth) and answers
	// with the same index.
	idle := 1500 * time.Millisecond
	started = time.Now()
	_, idleMeta, err := watcher.Get("watch/k", &api.QueryOptions{WaitIndex: wokeMeta.LastIndex, WaitTime: idle})
	out.IdleHeldMs = time.Since(started).Milliseconds()
	check("idle get", err == nil, err)
	check("held for the wait", time.Since(started) >= idle, time.Since(started))
	check("held no longer than the wait and its jitter", time.Since(started) < idle+idle/16+2*time.Second, time.Since(started))
	if idleMeta != nil {
		check("same index when nothing changed", idleMeta.LastIndex == wokeMeta.LastIndex, idleMeta.LastIndex)
	}

	// A prefix: deleting one of its keys wakes a List, and its index still goes up.
	for _, k := range []string{"a", "b", "c"} {
		put("watch/tree/"+k, k)
	}
	pairs, meta, err := watcher.List("watch/tree/", nil)
	check("list", err == nil && len(pairs) == 3, err, len(pairs))
	before := meta.LastIndex
	started = time.Now()
	done = make(chan struct{})
	go func() {
		defer close(done)
		pairs, meta, err = watcher.List("watch/tree/", &api.QueryOptions{WaitIndex: before, WaitTime: long})
	}()
	_, err2 := writer.Delete("watch/tree/c", nil)
	check("delete", err2 == nil, err2)
	<-done
	out.ListWokeMs = time.Since(started).Milliseconds()
	check("blocking list", err == nil, err)
	check("the deleted key is gone", len(pairs) == 2, len(pairs))
	check("list index went up after a delete", meta.LastIndex > before, meta.LastIndex, " <= ", before)
	check("list woken well before the wait ran out", time.Since(started) < long/2, time.Since(started))

	// Keys with a separator, woken by a new key under the prefix.
	keys, meta, err := watcher.Keys("watch/", "/", nil)
	check("keys", err == nil, err)
	before = meta.LastIndex
	done = make(chan struct{})
	go func() {
		defer close(done)
		keys, meta, err = watcher.Keys("watch/", "/", &api.QueryOptions{WaitIndex: before, WaitTime: long})
	}()
	put("watch/new", "x")
	<-done
	check("blocking keys", err == nil && meta.LastIndex > before, err)
	check("keys see the new key", contains(keys, "watch/new"), keys)

	// The watched key deleted: the watcher learns it is gone, at a higher index.
	done = make(chan struct{})
	last := wokeMeta.LastIndex
	go func() {
		defer close(done)
		woke, wokeMeta, err = watcher.Get("watch/k", &api.QueryOptions{WaitIndex: last, WaitTime: long})
	}()
	_, err2 = writer.Delete("watch/k", nil)
	check("delete the key", err2 == nil, err2)
	<-done
	check("blocking get of a deleted key", err == nil && woke == nil, err, woke)
	if wokeMeta != nil {
		check("index after the delete", wokeMeta.LastIndex > last, wokeMeta.LastIndex, " <= ", last)
		out.IndexesSeen = append(out.IndexesSeen, wokeMeta.LastIndex)
	}

	line, _ := json.Marshal(out)
	fmt.Println(string(line))
	if len(out.Failures) > 0 {
		os.Exit(1)
	}
}

func contains(list []string, want string) bool {
	for _, s := range list {
		if s == want {
			return true
		}
	}
	return false
}
