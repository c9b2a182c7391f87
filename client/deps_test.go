package client

import (
	"os/exec"
	"strings"
	"testing"
)

// The SDK imports only the contract (cluster/pb, message), gRPC and
// internal/defaults (which imports nothing): a user who links it links no
// Raft, gossip, bolt or metrics, and it builds for every GOOS (.ci/run
// cross-builds it). golang.org/x/sys/unix is allowed only as gRPC's own
// import (its channelz and syscall internals), which every gRPC client has
// on Unix.
func TestSDKImportsOnlyTheContract(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}} {{join .Imports \",\"}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	forbidden := []string{"github.com/hashicorp/", "go.etcd.io/bbolt", "github.com/boltdb/", "github.com/prometheus/",
		"github.com/raftmq/raftmq/broker", "github.com/raftmq/raftmq/storage", "github.com/raftmq/raftmq/namesrv", "github.com/raftmq/raftmq/cmd"}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imports, _ := strings.Cut(line, " ")
		for _, f := range forbidden {
			if strings.HasPrefix(pkg, f) {
				t.Errorf("the SDK depends on %s", pkg)
			}
		}
		if pkg == "github.com/raftmq/raftmq/cluster" {
			t.Errorf("the SDK depends on the server package cluster (only cluster/pb is the contract)")
		}
		for _, imp := range strings.Split(imports, ",") {
			if imp == "golang.org/x/sys/unix" && !strings.HasPrefix(pkg, "google.golang.org/grpc") {
				t.Errorf("%s imports golang.org/x/sys/unix", pkg)
			}
		}
	}
}
