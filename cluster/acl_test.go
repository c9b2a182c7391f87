package cluster

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const testPolicy = `
users:
  root: {admin: true}
  app:
    publish: [orders, "audit-*"]
    subscribe: [orders]
    groups: [g1]
`

func writePolicy(t *testing.T, dir, body string) string {
	t.Helper()
	p := filepath.Join(dir, "acl.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func loadTestACL(t *testing.T, body string) *ACL {
	t.Helper()
	a, err := LoadACL(writePolicy(t, t.TempDir(), body), replica("c1", "broker-a", "1"), 10*time.Millisecond, quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	return a
}

func user(name string) Identity { return Identity{Cluster: "c1", Role: IdentityUser, ID: name} }

func TestACLDecidesByIdentityAndRight(t *testing.T) {
	a := loadTestACL(t, testPolicy)
	node := Access{Admin: true, Node: NodeGroup}
	for _, tc := range []struct {
		name   string
		caller Identity
		known  bool
		need   Access
		code   codes.Code // OK: allowed
	}{
		{"anonymous", Identity{}, false, Access{Publish: []string{"orders"}}, codes.Unauthenticated},
		{"publish allowed", user("app"), true, Access{Publish: []string{"orders"}}, codes.OK},
		{"publish by prefix", user("app"), true, Access{Publish: []string{"audit-2026"}}, codes.OK},
		{"publish elsewhere", user("app"), true, Access{Publish: []string{"payments"}}, codes.PermissionDenied},
		{"prefix is not a substring", user("app"), true, Access{Publish: []string{"xaudit-1"}}, codes.PermissionDenied},
		{"subscribe as its group", user("app"), true, Access{Subscribe: []string{"orders"}, Groups: []string{"g1"}}, codes.OK},
		{"subscribe as another group", user("app"), true, Access{Subscribe: []string{"orders"}, Groups: []string{"g2"}}, codes.PermissionDenied},
		{"its group's retry topic", user("app"), true, Access{Subscribe: []string{"%RETRY%g1"}, Groups: []string{"g1"}}, codes.OK},
		{"another group's retry topic", user("app"), true, Access{Subscribe: []string{"%RETRY%g2"}}, codes.PermissionDenied},
		{"route of a topic it publishes to", user("app"), true, Access{Route: []string{"audit-1"}}, codes.OK},
		{"route of a topic it has no right on", user("app"), true, Access{Route: []string{"payments"}}, codes.PermissionDenied},
		{"admin RPC by a user", user("app"), true, Access{Admin: true}, codes.PermissionDenied},
		{"admin RPC by the admin", user("root"), true, Access{Admin: true}, codes.OK},
		{"unknown user", user("mallory"), true, Access{Publish: []string{"orders"}}, codes.PermissionDenied},
		{"user of another cluster", Identity{Cluster: "c2", Role: IdentityUser, ID: "root"}, true, Access{Admin: true}, codes.PermissionDenied},
		{"a replica of the group, node RPC", replica("c1", "broker-a", "2"), true, node, codes.OK},
		{"a replica of another group, node RPC", replica("c1", "broker-b", "2"), true, node, codes.PermissionDenied},
		{"a name server, group RPC", Identity{Cluster: "c1", Role: IdentityNameServer, ID: "1"}, true, node, codes.PermissionDenied},
		{"a name server, cluster RPC", Identity{Cluster: "c1", Role: IdentityNameServer, ID: "1"}, true, Access{Admin: true, Node: NodeCluster}, codes.OK},
		{"a node, user RPC", replica("c1", "broker-a", "2"), true, Access{Publish: []string{"orders"}}, codes.PermissionDenied},
		{"a node RPC by a user", user("app"), true, Access{Node: NodeCluster}, codes.PermissionDenied},
		{"a method naming nothing", user("app"), true, Access{}, codes.PermissionDenied},
	} {
		err := a.Check(tc.caller, tc.known, tc.need)
		if got := status.Code(err); got != tc.code {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.code)
		}
	}
}

// A changed file is taken within the reload interval; one that does not
// parse leaves the last good policy in force.
func TestACLReloadsWhenTheFileChanges(t *testing.T) {
	dir := t.TempDir()
	path := writePolicy(t, dir, testPolicy)
	a, err := LoadACL(path, replica("c1", "broker-a", "1"), 10*time.Millisecond, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	pub := Access{Publish: []string{"payments"}}
	if a.Check(user("app"), true, pub) == nil {
		t.Fatal("allowed before the change")
	}
	writePolicy(t, dir, testPolicy+"    # and payments\n  app2: {publish: [payments]}\n")
	waitFor(t, func() bool { return a.Check(user("app2"), true, pub) == nil })
	writePolicy(t, dir, "users: [not, a, map]\n")
	if err := a.reload(); err == nil { // what the watcher does, every interval
		t.Fatal("a policy that does not parse was taken")
	}
	if a.Check(user("app2"), true, pub) != nil {
		t.Fatal("a policy that does not parse replaced the good one")
	}
}

func TestLoadACLRefusesBadPolicies(t *testing.T) {
	for name, body := range map[string]string{
		"not YAML":      "users: [",
		"unknown field": "users:\n  app: {publsh: [x]}\n",
		"bad user name": "users:\n  \"a/b\": {admin: true}\n",
	} {
		if _, err := LoadACL(writePolicy(t, t.TempDir(), body), Identity{Cluster: "c1", Role: IdentityNameServer, ID: "1"}, time.Second, quiet); err == nil {
			t.Errorf("%s: loaded", name)
		}
	}
	if _, err := LoadACL(filepath.Join(t.TempDir(), "missing.yaml"), Identity{Cluster: "c1", Role: IdentityNameServer, ID: "1"}, time.Second, quiet); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("not within 5 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestCheckAccessTableFindsMissingAndStrayRules(t *testing.T) {
	desc := &grpc.ServiceDesc{ServiceName: "s.S", Methods: []grpc.MethodDesc{{MethodName: "A"}, {MethodName: "B"}}, Streams: []grpc.StreamDesc{{StreamName: "C"}}}
	rule := func(any) Access { return Access{Admin: true} }
	full := map[string]AccessRule{"/s.S/A": rule, "/s.S/B": rule, "/s.S/C": rule}
	if err := CheckAccessTable(desc, full); err != nil {
		t.Fatal(err)
	}
	err := CheckAccessTable(desc, map[string]AccessRule{"/s.S/A": rule, "/s.S/C": rule, "/s.S/Z": rule})
	if err == nil || !strings.Contains(err.Error(), "/s.S/B has no access rule") || !strings.Contains(err.Error(), "/s.S/Z") {
		t.Fatalf("%v", err)
	}
}
