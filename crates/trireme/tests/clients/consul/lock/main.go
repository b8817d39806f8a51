// Consul's own Go client (github.com/hashicorp/consul/api) electing a leader with api.Lock
// and sharing a resource with api.Semaphore, as services built on Consul do.
//
// Usage:
//
//	lock contend ADDR KEY NAME ROUNDS HOLD_MS [TTL]
//	                                            take the lock ROUNDS times, hold it HOLD_MS each,
//	                                            with api.Lock's own session (TTL default 15s)
//	lock hold ADDR KEY NAME TTL                 take the lock with a session of TTL, then wait
//	                                            until killed (its session is never renewed)
//	lock hold-renewing ADDR KEY NAME TTL        take the lock with a session of TTL that it
//	                                            renews (api's RenewPeriodic), then wait: prints
//	                                            "lost" if the lock is lost (after a pause)
//	lock semaphore ADDR PREFIX NAME LIMIT ROUNDS HOLD_MS
//
// Prints one JSON line per event, {"name", "event", "unix_ns"}: "acquired" and "releasing"
// around each hold, so that a test can check that holds never overlap; exits non-zero on an
// error.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/hashicorp/consul/api"
)

func event(name, what string) {
	line, _ := json.Marshal(map[string]any{"name": name, "event": what, "unix_ns": time.Now().UnixNano()})
	fmt.Println(string(line))
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}

func number(text string) int {
	n, err := strconv.Atoi(text)
	if err != nil {
		fail(err)
	}
	return n
}

func main() {
	mode, addr := os.Args[1], os.Args[2]
	config := api.DefaultConfig()
	config.Address = addr
	client, err := api.NewClient(config)
	if err != nil {
		fail(err)
	}
	switch mode {
	case "contend":
		key, name, rounds, hold := os.Args[3], os.Args[4], number(os.Args[5]), number(os.Args[6])
		ttl := ""
		if len(os.Args) > 7 {
			ttl = os.Args[7]
		}
		for i := 0; i < rounds; i++ {
			lock, err := client.LockOpts(&api.LockOptions{Key: key, Value: []byte(name), SessionTTL: ttl, LockDelay: time.Second})
			if err != nil {
				fail(err)
			}
			// As services do: an error (the node lost its shard's leader, say) is retried.
			var lost <-chan struct{}
			for attempt := 0; lost == nil; attempt++ {
				lost, err = lock.Lock(nil)
				if err != nil {
					if attempt == 20 {
						fail(fmt.Errorf("lock: %v", err))
					}
					fmt.Fprintf(os.Stderr, "lock: %v; trying again\n", err)
					time.Sleep(500 * time.Millisecond)
				}
			}
			event(name, "acquired")
			time.Sleep(time.Duration(hold) * time.Millisecond)
			select {
			case <-lost:
				fail(fmt.Errorf("%s lost the lock while holding it", name))
			default:
			}
			event(name, "releasing")
			if err := lock.Unlock(); err != nil {
				fail(fmt.Errorf("unlock: %v", err))
			}
		}
	case "hold":
		key, name, ttl := os.Args[3], os.Args[4], os.Args[5]
		// A session that is never renewed: it ends 2×TTL after it was created.
		se := &api.SessionEntry{Name: name, TTL: ttl, LockDelay: time.Second}
		id, _, err := client.Session().Create(se, nil)
		if err != nil {
			fail(err)
		}
		lock, err := client.LockOpts(&api.LockOptions{Key: key, Value: []byte(name), Session: id})
		if err != nil {
			fail(err)
		}
		lost, err := lock.Lock(nil)
		if err != nil || lost == nil {
			fail(fmt.Errorf("lock: %v", err))
		}
		event(name, "acquired")
		<-lost
		event(name, "lost")
		select {}
	case "hold-renewing":
		key, name, ttl := os.Args[3], os.Args[4], os.Args[5]
		session := client.Session()
		id, _, err := session.Create(&api.SessionEntry{Name: name, TTL: ttl, LockDelay: time.Second}, nil)
		if err != nil {
			fail(err)
		}
		go session.RenewPeriodic(ttl, id, nil, make(chan struct{}))
		lock, err := client.LockOpts(&api.LockOptions{Key: key, Value: []byte(name), Session: id})
		if err != nil {
			fail(err)
		}
		lost, err := lock.Lock(nil)
		if err != nil || lost == nil {
			fail(fmt.Errorf("lock: %v", err))
		}
		event(name, "acquired")
		<-lost
		event(name, "lost")
		select {}
	case "semaphore":
		prefix, name, limit := os.Args[3], os.Args[4], number(os.Args[5])
		rounds, hold := number(os.Args[6]), number(os.Args[7])
		for i := 0; i < rounds; i++ {
			sem, err := client.SemaphoreOpts(&api.SemaphoreOptions{Prefix: prefix, Limit: limit, Value: []byte(name)})
			if err != nil {
				fail(err)
			}
			lost, err := sem.Acquire(nil)
			if err != nil || lost == nil {
				fail(fmt.Errorf("semaphore: %v", err))
			}
			event(name, "acquired")
			time.Sleep(time.Duration(hold) * time.Millisecond)
			event(name, "releasing")
			if err := sem.Release(); err != nil {
				fail(fmt.Errorf("release: %v", err))
			}
		}
	default:
		fail(fmt.Errorf("unknown mode %q", mode))
	}
}
