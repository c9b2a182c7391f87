package storage

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/raftmq/raftmq/message"
)

// keyed is a producer's message with unique key key.
func keyed(key, body string) message.Message {
	return message.Message{Topic: "t", QueueID: 1, Body: []byte(body), Properties: map[string]string{message.PropertyUniqKey: key}}
}

// openDedupStore opens a store in a new directory that deduplicates
// retries over a minute.
func openDedupStore(t *testing.T) (*Store, Config) {
	t.Helper()
	cfg := testConfig(t.TempDir())
	cfg.DedupWindow = time.Minute
	return openStore(t, cfg), cfg
}

// marked encodes msgs at storeTime as a send the broker marks for
// deduplication.
func marked(t *testing.T, s *Store, storeTime int64, msgs ...message.Message) []byte {
	t.Helper()
	records := encodeRecords(t, s, msgs, storeTime)
	if err := message.MarkDedup(records); err != nil {
		t.Fatal(err)
	}
	return records
}

// A marked record whose unique key the store holds from within the window
// is answered with the stored copy and written dropped: it takes its place
// and queue offset, and no read returns it. Outside the window, unmarked,
// or with another key, it is appended. Within one batch, the second record
// with a key is the first's duplicate. A reopened store decides the same
// (the key index is rebuilt with the commitlog) and still drops what it
// dropped.
func TestAppendRecordsStoresARetryOnce(t *testing.T) {
	s, cfg := openDedupStore(t)
	const t0 = 1_800_000_000_000
	first, err := s.AppendRecords(1, marked(t, s, t0, keyed("u1", "a"), keyed("u2", "b")), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, end := s.CommitlogOffsets()
	// The retry of the batch, 30 s later, beside a new message and a second
	// copy of that new one.
	again, err := s.AppendRecords(2, marked(t, s, t0+30_000, keyed("u1", "a"), keyed("u2", "b"), keyed("u3", "c"), keyed("u3", "c")), nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if r := again[i]; !r.Duplicate || r.Offset != first[i].Offset || r.QueueOffset != first[i].QueueOffset {
			t.Errorf("retry of record %d answered %+v, stored as %+v", i, r, first[i])
		}
	}
	if again[2].Duplicate || again[2].Offset != end+2*int64(first[0].Size) || again[2].QueueOffset != 4 ||
		!again[3].Duplicate || again[3].Offset != again[2].Offset {
		t.Errorf("a new key and its second copy in one batch: %+v, %+v (end was %d)", again[2], again[3], end)
	}
	if _, max := s.QueueOffsets("t", 1); max != 6 {
		t.Fatalf("queue ends at %d, want 6: every record holds its queue offset", max)
	}
	readable := func() {
		t.Helper()
		var got []string
		for _, r := range readQueue(t, s, "t", 1) {
			got = append(got, string(r.Body))
		}
		if fmt.Sprint(got) != "[a b c]" {
			t.Fatalf("the queue reads %v, want [a b c]: retries are not read", got)
		}
	}
	readable()
	if recs, err := s.QueryByKey("u3", 10, t0, t0+60_000); err != nil || len(recs) != 1 || message.HeaderOffset(recs[0]) != again[2].Offset {
		t.Fatalf("by key u3: %d records, %v; want only the first copy", len(recs), err)
	}
	// A batch of duplicates only is written dropped, and the next entry
	// goes on.
	if res, err := s.AppendRecords(3, marked(t, s, t0+40_000, keyed("u3", "c")), nil); err != nil || !res[0].Duplicate {
		t.Fatalf("a batch of one retry: %+v, %v", res, err)
	}
	if s.LastRaftIndex() != 3 || s.WrittenRaftIndex() != 3 {
		t.Fatalf("last Raft index %d, written %d after a batch of duplicates, want 3", s.LastRaftIndex(), s.WrittenRaftIndex())
	}
	// Past the window, unmarked, another key, or another topic: stored.
	elsewhere := keyed("u2", "b")
	elsewhere.Topic = "%RETRY%g"
	for i, records := range [][]byte{
		marked(t, s, t0+45_000, elsewhere),
		marked(t, s, t0+61_000, keyed("u1", "a")),
		encodeRecords(t, s, []message.Message{keyed("u2", "b")}, t0+45_000),
		marked(t, s, t0+45_000, keyed("u4", "d")),
	} {
		res, err := s.AppendRecords(uint64(4+i), records, nil)
		if err != nil || res[0].Duplicate {
			t.Errorf("case %d: %+v, %v", i, res, err)
		}
	}
	s.crash()
	s = openStore(t, cfg)
	defer s.Close()
	res, err := s.AppendRecords(8, marked(t, s, t0+50_000, keyed("u3", "c")), nil)
	if err != nil || !res[0].Duplicate || res[0].Offset != again[2].Offset {
		t.Fatalf("after a restart, a retry answered %+v, %v; stored as %+v", res, err, again[2])
	}
	var got []string
	for _, r := range readQueue(t, s, "t", 1) {
		got = append(got, string(r.Body))
	}
	if fmt.Sprint(got) != "[a b c a b d]" {
		t.Fatalf("after a restart the queue reads %v, want [a b c a b d]", got)
	}
}

// Records the caller drops (a send refused at apply) are written and take
// their queue offsets, answered as their own and marked Dropped; no read
// returns them, they are not in the key index, a retry of one is not its
// duplicate, and a restart (recovery re-dispatching them, or rebuilding
// the queues from the commitlog) keeps them dropped.
func TestAppendRecordsDropsWhatTheCallerDrops(t *testing.T) {
	s, cfg := openDedupStore(t)
	const t0 = 1_800_000_000_000
	res, err := s.AppendRecords(1, marked(t, s, t0, keyed("u1", "a"), keyed("u2", "b"), keyed("u3", "c")), []bool{false, true, false})
	if err != nil {
		t.Fatal(err)
	}
	if res[1].Duplicate || !res[1].Dropped || res[1].QueueOffset != 1 || res[0].Dropped || res[2].QueueOffset != 2 {
		t.Fatalf("results %+v", res)
	}
	if _, err := s.AppendRecords(2, marked(t, s, t0, keyed("u1", "a")), []bool{true, false}); err == nil {
		t.Fatal("two drop marks for one record: no error")
	}
	// The refused send, sent again: not a duplicate of its dropped copy.
	again, err := s.AppendRecords(2, marked(t, s, t0+1, keyed("u2", "b")), nil)
	if err != nil || again[0].Duplicate || again[0].QueueOffset != 3 {
		t.Fatalf("u2 sent again: %+v, %v", again, err)
	}
	want := "[a c b]"
	check := func(when string) {
		t.Helper()
		var got []string
		for _, r := range readQueue(t, s, "t", 1) {
			got = append(got, string(r.Body))
		}
		if fmt.Sprint(got) != want {
			t.Fatalf("%s: the queue reads %v, want %s", when, got, want)
		}
		if recs, err := s.QueryByKey("u2", 10, t0, t0+60_000); err != nil || len(recs) != 1 || message.HeaderOffset(recs[0]) != again[0].Offset {
			t.Fatalf("%s: by key u2: %d records, %v; want only the one stored", when, len(recs), err)
		}
		if _, max := s.QueueOffsets("t", 1); max != 4 {
			t.Fatalf("%s: queue ends at %d, want 4", when, max)
		}
	}
	check("appended")
	s.crash()
	s = openStore(t, cfg)
	check("recovered")
	s.Close()
	for _, dir := range []string{consumeQueueDir, indexDir, checkpointFile} {
		if err := os.RemoveAll(filepath.Join(cfg.Dir, dir)); err != nil {
			t.Fatal(err)
		}
	}
	s = openStore(t, cfg)
	defer s.Close()
	check("rebuilt")
}

// Every key is checked through the index, whose chains cross keys: many
// keys in few slots still find only their own copies.
func TestDedupFindsOnlyItsOwnKey(t *testing.T) {
	s, _ := openDedupStore(t)
	defer s.Close()
	const t0 = 1_800_000_000_000
	for i := range 40 {
		if res, err := s.AppendRecords(uint64(i+1), marked(t, s, t0, keyed(fmt.Sprint("k", i), "x")), nil); err != nil || res[0].Duplicate {
			t.Fatalf("key %d: %+v, %v", i, res, err)
		}
	}
	for i := range 40 {
		res, err := s.AppendRecords(uint64(41+i), marked(t, s, t0+1, keyed(fmt.Sprint("k", i), "x")), nil)
		if err != nil || !res[0].Duplicate || res[0].QueueOffset != int64(i) {
			t.Fatalf("retry of key %d: %+v, %v", i, res, err)
		}
	}
}
