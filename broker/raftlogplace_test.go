package broker

import (
	"context"
	"crypto/sha256"
	"errors"
	"io/fs"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/raftmq/raftmq/cluster/pb"
)

// A replica whose data directory was replaced comes back keeping its Raft
// log in the other place than its group: it learns the group's place from
// the log (an announce) or from a snapshot, and stops, unhealthy, naming
// both places and the flag to use, instead of framing its commitlog
// otherwise than its peers. The group serves on from the others; started
// again as the error says, the replica catches up and ends byte-identical
// with every acknowledged message.
func TestAReplicaInTheOtherRaftLogPlaceStops(t *testing.T) {
	for _, c := range []struct {
		name                string
		groupInCommitlog    bool
		bySnapshot          bool
		wantGroup, wantSelf pb.RaftLogPlace
	}{
		{"commitlog group, WAL replica, from the log", true, false, pb.RaftLogPlace_RAFT_LOG_COMMITLOG, pb.RaftLogPlace_RAFT_LOG_WAL},
		{"commitlog group, WAL replica, by snapshot", true, true, pb.RaftLogPlace_RAFT_LOG_COMMITLOG, pb.RaftLogPlace_RAFT_LOG_WAL},
		{"WAL group, commitlog replica, by snapshot", false, true, pb.RaftLogPlace_RAFT_LOG_WAL, pb.RaftLogPlace_RAFT_LOG_COMMITLOG},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := newGroup(t, 3, func(cfg *Config) {
				if c.bySnapshot {
					compactedLog(cfg)
				}
				cfg.Store.RaftLog = c.groupInCommitlog
				cfg.HTTPAddr = "127.0.0.1:0"
			})
			g.createTopic("place", 2)
			m := g.master()
			// Every replica applies the master's announce: the group's place.
			waitFor(t, 5*time.Second, func() bool {
				for i := range g.cfgs {
					if d := g.describe(i); d == nil || d.GroupRaftLog != c.wantGroup || d.RaftLog != c.wantGroup {
						return false
					}
				}
				return true
			})
			acks := g.sendBodies(m, "place", 2, "before", 0, 100)
			victim := (m + 1) % 3
			for n := 1; c.bySnapshot && g.brokers[m].node.LogHolds(1); n++ {
				// The WAL drops compacted entries a segment at a time.
				if n > 50 {
					t.Fatal("the master's Raft log still holds its first entry")
				}
				acks = append(acks, g.sendBodies(m, "place", 2, "more", n*20, n*20+20)...)
			}
			g.stop(victim)
			if err := os.RemoveAll(g.cfgs[victim].Dir); err != nil {
				t.Fatal(err)
			}
			g.cfgs[victim].Store.RaftLog = !c.groupInCommitlog
			g.start(victim)

			v := g.brokers[victim]
			var mismatch *raftLogMismatch
			waitFor(t, 10*time.Second, func() bool {
				sf := v.fsm.failed()
				return sf != nil && errors.As(sf, &mismatch)
			})
			if mismatch.group != c.wantGroup || mismatch.own != c.wantSelf {
				t.Fatalf("the replica stopped for %v", mismatch)
			}
			if v.catchUps.Load() != 0 {
				t.Fatalf("the replica copied a commitlog (%d) before it stopped", v.catchUps.Load())
			}
			code, body, err := get("http://" + v.OpsAddr() + "/healthz")
			if err != nil || code != http.StatusServiceUnavailable || !strings.Contains(body, "--raft-log "+RaftLogFlag(c.wantGroup)) {
				t.Fatalf("/healthz of the stopped replica: %d %q %v", code, body, err)
			}
			if d := g.describe(victim); d == nil || d.Master || d.RaftLog != c.wantSelf {
				t.Fatalf("the stopped replica describes itself as %v", d)
			}
			// The others serve on.
			acks = append(acks, g.sendBodies(g.master(), "place", 2, "after", 0, 20)...)

			// As the error says: an empty directory, the group's flag.
			g.stop(victim)
			if err := os.RemoveAll(g.cfgs[victim].Dir); err != nil {
				t.Fatal(err)
			}
			g.cfgs[victim].Store.RaftLog = c.groupInCommitlog
			g.start(victim)
			acks = append(acks, g.sendBodies(g.master(), "place", 2, "healed", 0, 20)...)
			g.checkIdentical(acks)
			if sf := g.brokers[victim].fsm.failed(); sf != nil {
				t.Fatalf("the replica started again stopped: %v", sf)
			}
		})
	}
}

// AddReplica asks the new replica where it keeps its Raft log before it
// adds it, and refuses one that keeps it elsewhere than the group, with
// the flag to start it with: the group's configuration stays as it was.
func TestAddReplicaRefusesAReplicaInTheOtherRaftLogPlace(t *testing.T) {
	g := newGroup(t, 3, func(c *Config) { c.Store.RaftLog = true })
	g.createTopic("place", 1)
	m := g.master()
	g.cfgs[0].Store.RaftLog = false // addJoiner copies replica 1's configuration
	j := g.addJoiner()
	g.cfgs[0].Store.RaftLog = true
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := g.client(m).AddReplica(ctx, &pb.AddReplicaRequest{Id: int32(j + 1), RaftAddress: g.cfgs[j].Raft.BindAddr, GrpcAddress: g.cfgs[j].GRPCAddr})
	wantStatus(t, err, codes.FailedPrecondition, pb.ErrorReason_MEMBERSHIP_CONFLICT)
	if !strings.Contains(err.Error(), "--raft-log commitlog") {
		t.Fatalf("the refusal does not name the flag: %v", err)
	}
	resp, err := g.client(m).DescribeBroker(ctx, &pb.DescribeBrokerRequest{})
	if err != nil || len(resp.Replicas) != 3 {
		t.Fatalf("the group after the refusal: %v, %v", resp, err)
	}
	if cfg := g.brokers[m].node.Raft.GetConfiguration(); cfg.Error() != nil || len(cfg.Configuration().Servers) != 3 {
		t.Fatalf("the Raft configuration after the refusal: %v %v", cfg.Configuration().Servers, cfg.Error())
	}
	if d := g.describe(j); d == nil || d.AppliedIndex != 0 {
		t.Fatalf("the refused replica applied something: %v", d)
	}
}

// With RaftLogFromDir the data directory chooses: the commitlog for a new
// one, and what it holds otherwise.
func TestRaftLogFromDirChoosesWhatTheDirectoryHolds(t *testing.T) {
	for _, c := range []struct {
		name        string
		holds       string // a file or directory under raft/
		inCommitlog bool
	}{
		{"new", "", true},
		{"commitlog member", "raft-log-in-commitlog", true},
		{"WAL member", "wal/", false},
		{"bolt log from before the WAL", "raft.db", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := Config{Group: "g", ReplicaID: 1, Dir: t.TempDir(), GRPCAddr: "127.0.0.1:0", RaftLogFromDir: true}
			if c.holds != "" {
				p := filepath.Join(cfg.Dir, "raft", c.holds)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				var err error
				if strings.HasSuffix(c.holds, "/") {
					err = os.Mkdir(p, 0o755)
				} else {
					err = os.WriteFile(p, nil, 0o644)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			got, err := cfg.withDefaults()
			if err != nil || got.Store.RaftLog != c.inCommitlog {
				t.Fatalf("Store.RaftLog %v, %v; want %v", got.Store.RaftLog, err, c.inCommitlog)
			}
		})
	}
}

// A replica asked to start with its Raft log in the other place than its
// data directory holds is refused before its store is opened: a store
// opened in the other mode would recover its commitlog by the other rules
// (a WAL store dispatches the entries a commitlog store keeps stored).
// Every file of the store is as it was.
func TestTheOtherRaftLogPlaceIsRefusedBeforeTheStoreOpens(t *testing.T) {
	for _, inCommitlog := range []bool{true, false} {
		// A child process, killed (SIGKILL) right after its last sends:
		// its store holds entries past its last checkpoint.
		g := makeGroup(t, 1, true, func(c *Config) { c.Store.RaftLog = inCommitlog })
		g.createTopic("place", 2)
		g.sendBodies(g.master(), "place", 2, "m", 0, 50)
		g.stop(0)
		g.external = false // started in this process from here on
		before := storeFiles(t, filepath.Join(g.cfgs[0].Dir, "store"))
		cfg := g.cfgs[0]
		cfg.Store.RaftLog = !inCommitlog
		b, err := Start(cfg)
		if err == nil {
			b.Close()
			t.Fatalf("a replica whose Raft log is in the commitlog (%v) started the other way", inCommitlog)
		}
		want := map[bool]string{true: "keeps its Raft log in the commitlog", false: "holds a Raft log in its WAL"}[inCommitlog]
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("refused for another reason: %v", err)
		}
		if after := storeFiles(t, filepath.Join(g.cfgs[0].Dir, "store")); !maps.Equal(before, after) {
			t.Fatalf("the refused start changed the store's files:\nbefore %v\nafter  %v", before, after)
		}
		g.start(0) // the right way: it serves again
		g.sendBodies(g.master(), "place", 2, "m", 50, 60)
	}
}

// storeFiles maps every file under dir to a hash of its bytes.
func storeFiles(t *testing.T, dir string) map[string][32]byte {
	t.Helper()
	files := map[string][32]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		files[p] = sha256.Sum256(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}
