// Consul's own Go client (github.com/hashicorp/consul/api) managing ACLs on a Trireme node
// whose cluster runs with ACLs on, default deny and no initial token, as an operator does
// with Consul: bootstrap once, write a policy in HCL, give a token that policy by name, and
// hand the token to an application, which may then use only the keys and sessions the policy
// grants. Ends with a second token that may manage ACLs, which takes over from the bootstrap
// token; the last right to manage ACLs cannot be given away.
//
// Usage: acl HTTP_ADDR
//
// Prints one JSON line (the failures, if any; the remaining manager's secret and the deleted
// application token's secret, for the test to look at other nodes) and exits 0 only if every
// check held.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
)

const appRules = `
key_prefix "app/" { policy = "write" }
key "app/secret" { policy = "deny" }
session_prefix "" { policy = "write" }
`

var addr string

// client talks to the node with `token` ("" sends none).
func client(token string) *api.Client {
	config := api.DefaultConfig()
	config.Address = addr
	config.Token = token
	c, err := api.NewClient(config)
	if err != nil {
		panic(err)
	}
	return c
}

// status is the HTTP status of a refused request, 0 for no error or another kind.
func status(err error) int {
	var se api.StatusError
	if errors.As(err, &se) {
		return se.Code
	}
	return 0
}

func refused(err error, code int, words string) bool {
	return status(err) == code && strings.Contains(err.Error(), words)
}

// randomUUID is an id no entry has.
func randomUUID() string {
	b := make([]byte, 16)
	f, err := os.Open("/dev/urandom")
	if err == nil {
		_, _ = f.Read(b)
		f.Close()
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func main() {
	addr = os.Args[1]
	var failures []string
	check := func(what string, ok bool, detail ...any) bool {
		if !ok {
			failures = append(failures, fmt.Sprintf("%s: %v", what, fmt.Sprint(detail...)))
		}
		return ok
	}
	result := map[string]any{}
	defer func() {
		result["failures"] = failures
		out, _ := json.Marshal(result)
		fmt.Println(string(out))
		if len(failures) > 0 {
			os.Exit(1)
		}
	}()

	anonymous := client("")

	// The bootstrap works once, without a token.
	boot, _, err := anonymous.ACL().Bootstrap()
	if !check("bootstrap", err == nil && boot != nil && boot.SecretID != "", err) {
		return
	}
	check("bootstrap token links global-management",
		len(boot.Policies) == 1 && boot.Policies[0].Name == "global-management", boot.Policies)
	_, _, err = anonymous.ACL().Bootstrap()
	check("second bootstrap refused with 403", status(err) == 403, err)

	admin := client(boot.SecretID)
	acl := admin.ACL()
	// A policy as users write it leaves Datacenters nil, which Go encodes as null.
	createPolicy := func(p *api.ACLPolicy) (*api.ACLPolicy, error) {
		created, _, err := acl.PolicyCreate(p, nil)
		return created, err
	}

	// Without a token nothing is allowed under default deny.
	_, _, err = anonymous.KV().Get("app/config", nil)
	check("anonymous read refused", refused(err, 403, "Permission denied"), err)
	_, _, err = anonymous.ACL().PolicyList(nil)
	check("anonymous policy list refused", refused(err, 403, "Permission denied"), err)

	// A policy in HCL: read, by name, listed, updated.
	policy, err := createPolicy(&api.ACLPolicy{
		Name: "app-writer", Description: "the app's keys", Rules: appRules,
	})
	if !check("policy create", err == nil && policy != nil && policy.ID != "", err) {
		return
	}
	read, _, err := acl.PolicyRead(policy.ID, nil)
	check("policy read", err == nil && read != nil && read.Name == "app-writer" &&
		read.Rules == appRules && read.Description == "the app's keys", err, read)
	byName, _, err := acl.PolicyReadByName("app-writer", nil)
	check("policy read by name", err == nil && byName != nil && byName.ID == policy.ID, err, byName)
	policies, _, err := acl.PolicyList(nil)
	names := []string{}
	for _, p := range policies {
		names = append(names, p.Name)
	}
	check("policy list", err == nil && slices.Contains(names, "app-writer") &&
		slices.Contains(names, "global-management"), err, names)
	read.Description = "the app's keys, and its locks"
	updated, _, err := acl.PolicyUpdate(read, nil)
	check("policy update", err == nil && updated != nil && updated.ID == policy.ID &&
		updated.Description == read.Description && updated.ModifyIndex > policy.ModifyIndex &&
		updated.CreateIndex == policy.CreateIndex, err, updated)
	reread, _, err := acl.PolicyRead(policy.ID, nil)
	check("policy update is read back", err == nil && reread != nil &&
		reread.Description == read.Description && reread.Rules == appRules, err, reread)
	_, _, err = acl.PolicyCreate(&api.ACLPolicy{Name: "app-writer", Rules: appRules}, nil)
	check("duplicate policy name refused", refused(err, 400, "already exists"), err)
	_, _, err = acl.PolicyCreate(&api.ACLPolicy{Name: "broken", Rules: `key_prefix "x" { policy = "sometimes" }`}, nil)
	check("bad rules refused", refused(err, 400, "rules"), err)

	// A token linking the policy by name.
	token, _, err := acl.TokenCreate(&api.ACLToken{
		Description: "app token",
		Policies:    []*api.ACLTokenPolicyLink{{Name: "app-writer"}},
	}, nil)
	if !check("token create", err == nil && token != nil && token.AccessorID != "" && token.SecretID != "", err) {
		return
	}
	check("token links the policy by id", len(token.Policies) == 1 &&
		token.Policies[0].ID == policy.ID && token.Policies[0].Name == "app-writer", token.Policies)
	tread, _, err := acl.TokenRead(token.AccessorID, nil)
	check("token read", err == nil && tread != nil && tread.SecretID == token.SecretID &&
		tread.Description == "app token" && len(tread.Policies) == 1, err, tread)
	tokens, _, err := acl.TokenList(nil)
	accessors := []string{}
	for _, t := range tokens {
		accessors = append(accessors, t.AccessorID)
	}
	check("token list", err == nil && slices.Contains(accessors, token.AccessorID) &&
		slices.Contains(accessors, boot.AccessorID) &&
		slices.Contains(accessors, "00000000-0000-0000-0000-000000000002"), err, accessors)

	app := client(token.SecretID)
	self, _, err := app.ACL().TokenReadSelf(nil)
	check("token read self", err == nil && self != nil && self.AccessorID == token.AccessorID, err, self)
	_, _, err = app.ACL().PolicyList(nil)
	check("app token may not read ACLs", refused(err, 403, "Permission denied"), err)
	_, _, err = app.ACL().TokenCreate(&api.ACLToken{Description: "escalate"}, nil)
	check("app token may not create tokens", refused(err, 403, "Permission denied"), err)

	// The application is held to its policy.
	kv := app.KV()
	for _, key := range []string{"app/secret", "other/x"} {
		_, err = admin.KV().Put(&api.KVPair{Key: key, Value: []byte("admin's")}, nil)
		check("admin put "+key, err == nil, err)
	}
	_, err = kv.Put(&api.KVPair{Key: "app/config", Value: []byte("v1")}, nil)
	check("app put app/config", err == nil, err)
	pair, _, err := kv.Get("app/config", nil)
	check("app get app/config", err == nil && pair != nil && string(pair.Value) == "v1", err, pair)
	for _, key := range []string{"app/secret", "other/x"} {
		_, err = kv.Put(&api.KVPair{Key: key, Value: []byte("app's")}, nil)
		check("app put "+key+" refused", refused(err, 403, "Permission denied"), err)
		_, _, err = kv.Get(key, nil)
		check("app get "+key+" refused", refused(err, 403, "Permission denied"), err)
	}
	secret, _, err := admin.KV().Get("app/secret", nil)
	check("refused put wrote nothing", err == nil && secret != nil && string(secret.Value) == "admin's", err, secret)
	listed, _, err := kv.List("app/", nil)
	listedKeys := []string{}
	for _, p := range listed {
		listedKeys = append(listedKeys, p.Key)
	}
	check("app list app/ shows only readable keys", err == nil &&
		slices.Equal(listedKeys, []string{"app/config"}), err, listedKeys)
	keys, _, err := kv.Keys("app/", "", nil)
	check("app keys app/ shows only readable keys", err == nil &&
		slices.Equal(keys, []string{"app/config"}), err, keys)
	_, _, err = kv.List("other/", nil)
	check("app list other/ refused", refused(err, 403, "Permission denied"), err)

	// A lock under app/ works (its session is within session_prefix ""); one outside is refused.
	lock, err := app.LockKey("app/lock")
	if check("lock options", err == nil, err) {
		lost, err := lock.Lock(nil)
		if check("lock app/lock", err == nil && lost != nil, err) {
			held, _, err := kv.Get("app/lock", nil)
			check("lock held by a session", err == nil && held != nil && held.Session != "", err, held)
			check("unlock", lock.Unlock() == nil)
			check("destroy the lock", lock.Destroy() == nil)
		}
	}
	outside, err := app.LockKey("other/lock")
	if check("lock options outside", err == nil, err) {
		stop := make(chan struct{})
		timer := time.AfterFunc(10*time.Second, func() { close(stop) })
		lost, err := outside.Lock(stop)
		timer.Stop()
		check("lock other/lock refused", lost == nil && err != nil && strings.Contains(err.Error(), "Permission denied"), err)
	}

	// Unknown tokens and entries.
	_, _, err = client(randomUUID()).KV().Get("app/config", nil)
	check("bogus token refused", refused(err, 403, "ACL not found"), err)
	missing, _, err := acl.PolicyRead(randomUUID(), nil)
	// api v1.33.0's PolicyRead wants 200 and reports a 404 as an error.
	check("unknown policy id is 404", missing == nil && status(err) == 404, err, missing)
	missing, _, err = acl.PolicyReadByName("no-such-policy", nil)
	check("unknown policy name is nil", missing == nil && err == nil, err, missing)
	missingToken, _, err := acl.TokenRead(randomUUID(), nil)
	check("unknown token is 404", missingToken == nil && status(err) == 404, err, missingToken)

	// Deleting the app's token takes effect at its next request.
	_, err = acl.TokenDelete(token.AccessorID, nil)
	check("token delete", err == nil, err)
	deadline := time.Now().Add(time.Second)
	for {
		_, _, err = kv.Get("app/config", nil)
		if refused(err, 403, "ACL not found") || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	check("deleted token refused within 1s", refused(err, 403, "ACL not found"), err)
	result["deleted_secret"] = token.SecretID

	_, err = acl.PolicyDelete(policy.ID, nil)
	check("policy delete", err == nil, err)
	gone, _, err := acl.PolicyReadByName("app-writer", nil)
	check("deleted policy is gone", gone == nil && err == nil, err, gone)

	// A token may not delete itself; the built-in policy stays.
	_, err = acl.TokenDelete(boot.AccessorID, nil)
	check("deleting the request's own token refused", status(err) == 400, err)
	_, err = acl.PolicyDelete("00000000-0000-0000-0000-000000000001", nil)
	check("deleting global-management refused", status(err) == 400, err)

	// A second manager (acl = "write" only) takes over from the bootstrap token ...
	managers, err := createPolicy(&api.ACLPolicy{Name: "acl-admin", Rules: `acl = "write"`})
	if !check("manager policy", err == nil && managers != nil, err) {
		return
	}
	manager, _, err := acl.TokenCreate(&api.ACLToken{
		Description: "manager",
		Policies:    []*api.ACLTokenPolicyLink{{ID: managers.ID}},
	}, nil)
	if !check("manager token", err == nil && manager != nil, err) {
		return
	}
	macl := client(manager.SecretID).ACL()
	_, err = macl.TokenDelete(boot.AccessorID, nil)
	check("manager deletes the bootstrap token", err == nil, err)
	result["management"] = manager.SecretID

	// ... and cannot give away the last right to manage ACLs.
	weaker := *managers
	weaker.Rules = `acl = "read"`
	_, _, err = macl.PolicyUpdate(&weaker, nil)
	check("update leaving no manager refused", status(err) == 400, err)
	_, err = macl.PolicyDelete(managers.ID, nil)
	check("delete leaving no manager refused", status(err) == 400, err)
	still, _, err := macl.PolicyRead(managers.ID, nil)
	check("the manager policy is unchanged", err == nil && still != nil && still.Rules == `acl = "write"`, err, still)
	_, _, err = macl.TokenCreate(&api.ACLToken{Description: "still managing"}, nil)
	check("the manager still manages", err == nil, err)
}
