// Consul's own Go client keeping a watch across a failover, as an application with a list of
// agents does: it reads a key's index through one node, and once that node is gone, blocks
// through another node with the index it already has.
//
// Usage:
//
//	failover index ADDR KEY          prints {"index": N, "value": V}
//	failover wait ADDR KEY INDEX     blocks (WaitIndex INDEX, WaitTime 30s); prints
//	                                 {"index": N, "value": V, "held_ms": M}
//
// Both read with RequireConsistent, as a watcher that must not see the past does. Exits 0
// when the read succeeded.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/hashicorp/consul/api"
)

type answer struct {
	Index  uint64 `json:"index"`
	Value  string `json:"value"`
	HeldMs int64  `json:"held_ms"`
}

func main() {
	if len(os.Args) < 4 {
		fmt.Fprintln(os.Stderr, "usage: failover index|wait ADDR KEY [INDEX]")
		os.Exit(2)
	}
	config := api.DefaultConfig()
	config.Address = os.Args[2]
	c, err := api.NewClient(config)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	options := &api.QueryOptions{RequireConsistent: true}
	if os.Args[1] == "wait" {
		index, err := strconv.ParseUint(os.Args[4], 10, 64)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		options.WaitIndex = index
		options.WaitTime = 30 * time.Second
	}
	started := time.Now()
	pair, meta, err := c.KV().Get(os.Args[3], options)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	out := answer{Index: meta.LastIndex, HeldMs: time.Since(started).Milliseconds()}
	if pair != nil {
		out.Value = string(pair.Value)
	}
	line, _ := json.Marshal(out)
	fmt.Println(string(line))
}
