package broker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/message"
	"github.com/raftmq/raftmq/storage"
)

// A group whose replicas keep their Raft log in their commitlogs
// (storage.Config.RaftLog): sends replicate and every replica ends with
// the same commitlog and every acked message, through snapshots, a
// follower restarted after missing entries, and the master restarted
// after a snapshot; each restart reads its entries back from its own
// commitlog, from where its snapshot says. A topic deleted and created
// again is numbered from 0 on every replica alike.
func TestAGroupWhoseRaftLogIsTheCommitlog(t *testing.T) {
	g := newGroup(t, 3, func(c *Config) {
		c.Store.RaftLog = true
		c.Raft.SnapshotThreshold, c.Raft.SnapshotInterval = 16, 20*time.Millisecond
	})
	g.createTopic("orders", 4)
	m := g.master()
	acks := g.sendBodies(m, "orders", 4, "a", 0, 40)
	g.checkIdentical(acks)

	f := (m + 1) % 3
	g.stop(f)
	acks = append(acks, g.sendBodies(m, "orders", 4, "b", 0, 20)...)
	g.start(f)
	g.checkIdentical(acks)

	snapshots := filepath.Join(g.cfgs[m].Dir, "raft", "snapshots")
	clustertest.WaitFor(t, 10*time.Second, "a snapshot on the master", func() bool {
		names, _ := os.ReadDir(snapshots)
		return len(names) > 0
	})
	g.stop(m)
	g.start(m)
	acks = append(acks, g.sendBodies(g.master(), "orders", 4, "c", 0, 20)...)
	g.checkIdentical(acks)
	for i, c := range g.cfgs {
		if _, err := os.Stat(filepath.Join(c.Dir, "raft", "wal")); !os.IsNotExist(err) {
			t.Errorf("replica %d has a WAL (%v): its Raft log is not its commitlog", i+1, err)
		}
	}
	// Sends go on while the topic is deleted and created again: the
	// records stored after the deletion's entry are numbered from 0 on
	// every replica, whenever each applies it (storage/topicdelete.go).
	m = g.master()
	stop, first := make(chan struct{}), make(chan struct{})
	sent := make(chan []acked)
	go func() {
		var got []acked
		defer func() { sent <- got }()
		defer func() {
			if len(got) == 0 {
				close(first)
			}
		}()
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			body := fmt.Sprintf("during-%d", n)
			resp, err := g.client(m).SendMessage(ctx, oneMessage("orders", int32(n%4), body))
			cancel()
			if err == nil {
				if got = append(got, acked{body: body, queue: int32(n % 4), res: resp.Results[0]}); len(got) == 1 {
					close(first)
				}
			}
		}
	}()
	<-first // sends under way
	if _, err := g.client(m).DeleteTopic(context.Background(), &pb.DeleteTopicRequest{Name: "orders"}); err != nil {
		t.Fatal(err)
	}
	close(stop)
	during := <-sent
	g.createTopic("orders", 4)
	during = append(during, g.sendBodies(m, "orders", 4, "d", 0, 8)...)
	acks = append(acks, during...)
	g.checkIdentical(acks)
	// Every replica's queues of the topic created again hold what was acked
	// after the deletion, from 0, and nothing from before it.
	after := map[string]acked{}
	for _, a := range during {
		after[a.body] = a
	}
	for i := range g.cfgs {
		n := 0
		for q := int32(0); q < 4; q++ {
			res, err := g.brokers[i].store.GetMessages(storage.GetRequest{Topic: "orders", QueueID: q, MaxMessages: 1000, MaxBytes: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Records) > 0 && res.MinOffset != 0 {
				t.Fatalf("replica %d: queue %d of the topic created again begins at %d", i+1, q, res.MinOffset)
			}
			for _, rec := range res.Records {
				r, _ := message.Decode(rec)
				a, ok := after[string(r.Body)]
				if !ok || a.queue != q || a.res.QueueOffset != r.QueueOffset {
					t.Fatalf("replica %d: queue %d holds %q at %d, not acked there after the deletion", i+1, q, r.Body, r.QueueOffset)
				}
				n++
			}
		}
		if n < 8 {
			t.Fatalf("replica %d: the topic created again holds %d messages, fewer than the 8 sent after it", i+1, n)
		}
	}
}

// A replica whose Raft log is its commitlog, behind what the master's log
// retains, installs a snapshot whose entry is a barrier past the last
// send (Raft's own entries never reach the state machine), copies the
// commitlog from a peer to where that entry ends, and goes on from there
// byte for byte, through a restart too (the second restart case,
// in this mode). Segments are small: a restart with a snapshot indexes the
// newest segment's entries, and its restore those after the snapshot's
// offset, in older segments too.
func TestACommitlogRaftLogCatchesUpBySnapshotAndCopy(t *testing.T) {
	g := newGroup(t, 3, func(c *Config) {
		compactedLog(c)
		c.Store.RaftLog = true
		c.Store.SegmentSize, c.Store.MaxMessageSize = 16<<10, 4<<10
		c.MaxMessageSize, c.EntryMaxBytes = 2<<10, 8<<10
	})
	g.createTopic("far", 2)
	m := g.master()
	behind := (m + 1) % 3
	left := g.describe(behind).AppliedIndex
	g.stop(behind)
	acks := g.sendBodies(m, "far", 2, "away", 0, 120)
	r := g.brokers[m].node.Raft
	sent := r.AppliedIndex()
	if err := r.Barrier(5 * time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	if err := r.Snapshot().Error(); err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
		t.Fatal(err)
	}
	if snap, _ := strconv.ParseUint(r.Stats()["last_snapshot_index"], 10, 64); snap <= sent {
		t.Fatalf("the master's snapshot is of Raft index %d, not past the last send's %d", snap, sent)
	}
	clustertest.WaitFor(t, 10*time.Second, "the master's log drops what the stopped replica lacks", func() bool {
		return !g.brokers[m].node.LogHolds(left + 1)
	})
	g.start(behind)
	g.checkIdentical(acks)
	if n := g.brokers[behind].catchUps.Load(); n == 0 {
		t.Fatal("the replica caught up without copying the commitlog: the test did not reach the snapshot path")
	}
	acks = append(acks, g.sendBodies(g.master(), "far", 2, "after", 0, 20)...)
	g.checkIdentical(acks)

	g.stop(behind)
	g.start(behind)
	acks = append(acks, g.sendBodies(g.master(), "far", 2, "restarted", 0, 20)...)
	g.checkIdentical(acks)
	m = g.master()
	g.stop(m)
	g.start(m)
	acks = append(acks, g.sendBodies(g.master(), "far", 2, "master-restarted", 0, 20)...)
	g.checkIdentical(acks)
	if segs, _ := os.ReadDir(filepath.Join(g.cfgs[m].Dir, "store", "commitlog")); len(segs) < 3 {
		t.Fatalf("the master's commitlog has %d segments: the restarts did not index across segments", len(segs))
	}
}

// The store is told which topic an entry deletes as it stores it: a
// DeleteTopic command only, never a send, a command with records, another
// command or bytes that do not decode.
func TestDeletedTopicIsReadFromADeleteTopicEntryOnly(t *testing.T) {
	del, err := encodeCommand(&pb.RaftCommand{Command: &pb.RaftCommand_DeleteTopic{DeleteTopic: "orders"}})
	if err != nil {
		t.Fatal(err)
	}
	group, err := encodeCommand(&pb.RaftCommand{Command: &pb.RaftCommand_DeleteGroup{DeleteGroup: "orders"}})
	if err != nil {
		t.Fatal(err)
	}
	recs := records(t, "orders", 1, "a")
	send := append([]byte{sendRecordsEntry}, recs...)
	for _, c := range []struct {
		name string
		e    cluster.LogEntry
		want string
	}{
		{"a deletion", cluster.LogEntry{Command: del}, "orders"},
		{"another command", cluster.LogEntry{Command: group}, ""},
		{"a send", cluster.LogEntry{Command: send[:1], Records: recs}, ""},
		{"a send's head alone", cluster.LogEntry{Command: send[:1]}, ""},
		{"bytes that do not decode", cluster.LogEntry{Command: []byte{0x0a, 0xff}}, ""},
		{"Raft's own entry", cluster.LogEntry{}, ""},
	} {
		if got := deletedTopic(c.e); got != c.want {
			t.Errorf("%s: deletes %q, want %q", c.name, got, c.want)
		}
	}
}
