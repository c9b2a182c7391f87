package storage

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/raftmq/raftmq/message"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(childDirEnv); dir != "" {
		runAppendChild(dir) // never returns: the parent kills it
	}
	goleak.VerifyTestMain(m)
}

// testConfig is a store with small files, so tests cross segment, queue
// file and index file boundaries, and background work slow enough that
// tests drive flushes and checkpoints themselves.
func testConfig(dir string) Config {
	return Config{
		Dir:                 dir,
		SegmentSize:         64 << 10,
		MaxMessageSize:      16 << 10,
		MaxQueuesPerTopic:   16,
		QueueEntriesPerFile: 64,
		IndexSlots:          61,
		IndexEntries:        100,
		FlushInterval:       time.Hour,
		CheckpointInterval:  time.Hour,
		RetentionInterval:   time.Hour,
		RetentionAge:        -1,
		RetentionDiskRatio:  2,
		Logger:              slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

func openStore(t testing.TB, cfg Config) *Store {
	t.Helper()
	s, err := Open(cfg)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	return s
}

// crash stops the store the way kill -9 does: nothing is flushed, no
// checkpoint is written; what was written stays in the page cache.
func (s *Store) crash() {
	if !s.closed.CompareAndSwap(false, true) {
		return
	}
	close(s.stop)
	s.wg.Wait()
	s.appendMu.Lock()
	defer s.appendMu.Unlock()
	s.closeFiles()
}

// batchFor is the deterministic batch of Raft index idx: 1 to 7 messages
// spread over 4 queues of topic "T", with a body of varying size, a tag of
// "even" or "odd" and a key naming the message.
func batchFor(idx uint64) []message.Message {
	n := 1 + int(idx%7)
	msgs := make([]message.Message, n)
	for i := range msgs {
		name := fmt.Sprintf("m-%d-%d", idx, i)
		tag := "odd"
		if (int(idx)+i)%2 == 0 {
			tag = "even"
		}
		msgs[i] = message.Message{
			Topic:      "T",
			QueueID:    int32((int(idx) + i) % 4),
			Tags:       tag,
			Keys:       []string{name},
			Properties: map[string]string{"idx": fmt.Sprint(idx), message.PropertyUniqKey: "u-" + name},
			Body:       bytes.Repeat([]byte(name+"|"), 1+int(idx*13+uint64(i))%150),
			BornTime:   int64(idx) * 10,
			StoreTime:  int64(idx) * 10,
		}
	}
	return msgs
}

// appendBatches appends batchFor(idx) for idx in [from, to].
func appendBatches(t testing.TB, s *Store, from, to uint64) {
	t.Helper()
	for idx := from; idx <= to; idx++ {
		if _, err := s.Append(idx, batchFor(idx)); err != nil {
			t.Fatalf("append %d: %v", idx, err)
		}
	}
}

// readQueue reads a whole queue from its minimum: the records a reader
// is given (not the dropped ones).
func readQueue(t testing.TB, s *Store, topic string, q int32) []message.Record {
	t.Helper()
	min, max := s.QueueOffsets(topic, q)
	var out []message.Record
	for off := min; off < max; {
		res, err := s.GetMessages(GetRequest{Topic: topic, QueueID: q, Offset: off, MaxMessages: 32, MaxBytes: 1 << 20})
		if err != nil {
			t.Fatalf("read %s@%d at %d: %v", topic, q, off, err)
		}
		if (res.Status != Found && res.Status != NoMatchedMessage) || res.NextOffset <= off {
			t.Fatalf("read %s@%d at %d: status %v, next offset %d", topic, q, off, res.Status, res.NextOffset)
		}
		for _, raw := range res.Records {
			r, err := decodeRecord(raw)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			out = append(out, r)
		}
		off = res.NextOffset
	}
	return out
}

// checkHolds verifies the store holds exactly batches 1..last of batchFor,
// in queue order with dense queue offsets, and nothing else.
func checkHolds(t testing.TB, s *Store, last uint64) {
	t.Helper()
	if got := s.LastRaftIndex(); got != last {
		t.Fatalf("LastRaftIndex = %d, want %d", got, last)
	}
	checkQueues(t, s, last)
}

// wantByQueue is batches 1..last of batchFor, by queue id.
func wantByQueue(last uint64) map[int32][]message.Message {
	want := map[int32][]message.Message{}
	for idx := uint64(1); idx <= last; idx++ {
		for _, m := range batchFor(idx) {
			want[m.QueueID] = append(want[m.QueueID], m)
		}
	}
	return want
}

// checkQueues verifies queues 0..3 of topic T hold exactly batches 1..last.
func checkQueues(t testing.TB, s *Store, last uint64) {
	t.Helper()
	want := wantByQueue(last)
	for q := int32(0); q < 4; q++ {
		got := readQueue(t, s, "T", q)
		if len(got) != len(want[q]) {
			t.Fatalf("queue %d holds %d messages, want %d", q, len(got), len(want[q]))
		}
		for i, r := range got {
			w := want[q][i]
			if r.QueueOffset != int64(i) || !bytes.Equal(r.Body, w.Body) || r.Tags != w.Tags || r.Keys[0] != w.Keys[0] ||
				r.Properties["idx"] != w.Properties["idx"] || r.StoreTime != w.StoreTime {
				t.Fatalf("queue %d offset %d: got %+v (body %q), want %s", q, i, r, r.Body[:min(len(r.Body), 20)], w.Keys[0])
			}
		}
	}
}

// waitFor polls cond until it holds or 5 s pass.
func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5 s")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// appendStored appends m's record as a store writes it: with the Raft
// index, offsets and sys flag filled in.
func appendStored(dst []byte, m *message.Message, raftIndex uint64, offset, queueOffset int64, sysFlag uint32) []byte {
	at := len(dst)
	dst, err := message.Append(dst, m)
	if err != nil {
		panic(err)
	}
	message.Fill(dst[at:], raftIndex, offset, queueOffset, sysFlag)
	return dst
}
