package storage

import (
	"fmt"
	"testing"
	"time"

	"github.com/raftmq/raftmq/message"
)

// keyed is a producer's message with unique key key.
func keyed(key, body string) message.Message {
	return message.Message{Topic: "t", QueueID: 1, Body: []byte(body), Properties: map[string]string{message.PropertyUniqKey: key}}
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
// is answered with the stored copy and not appended; outside the window,
// unmarked, or with another key, it is appended. Within one batch, the
// second record with a key is the first's duplicate. A reopened store
// decides the same (the key index is rebuilt with the commitlog).
func TestAppendRecordsStoresARetryOnce(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.DedupWindow = time.Minute
	s := openStore(t, cfg)
	const t0 = 1_800_000_000_000
	first, err := s.AppendRecords(1, marked(t, s, t0, keyed("u1", "a"), keyed("u2", "b")))
	if err != nil {
		t.Fatal(err)
	}
	_, end := s.CommitlogOffsets()
	// The retry of the batch, 30 s later, beside a new message and a second
	// copy of that new one.
	again, err := s.AppendRecords(2, marked(t, s, t0+30_000, keyed("u1", "a"), keyed("u2", "b"), keyed("u3", "c"), keyed("u3", "c")))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if r := again[i]; !r.Duplicate || r.Offset != first[i].Offset || r.QueueOffset != first[i].QueueOffset {
			t.Errorf("retry of record %d answered %+v, stored as %+v", i, r, first[i])
		}
	}
	if again[2].Duplicate || again[2].Offset != end || !again[3].Duplicate || again[3].Offset != again[2].Offset {
		t.Errorf("a new key and its second copy in one batch: %+v, %+v (end was %d)", again[2], again[3], end)
	}
	if _, max := s.QueueOffsets("t", 1); max != 3 {
		t.Fatalf("queue holds %d messages, want 3", max)
	}
	// A batch of duplicates only stores nothing, and the next entry goes on.
	if res, err := s.AppendRecords(3, marked(t, s, t0+40_000, keyed("u3", "c"))); err != nil || !res[0].Duplicate {
		t.Fatalf("a batch of one retry: %+v, %v", res, err)
	}
	if s.LastRaftIndex() != 3 {
		t.Fatalf("last Raft index %d after a batch of duplicates, want 3", s.LastRaftIndex())
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
		res, err := s.AppendRecords(uint64(4+i), records)
		if err != nil || res[0].Duplicate {
			t.Errorf("case %d: %+v, %v", i, res, err)
		}
	}
	s.crash()
	s = openStore(t, cfg)
	defer s.Close()
	res, err := s.AppendRecords(8, marked(t, s, t0+50_000, keyed("u3", "c")))
	if err != nil || !res[0].Duplicate || res[0].Offset != again[2].Offset {
		t.Fatalf("after a restart, a retry answered %+v, %v; stored as %+v", res, err, again[2])
	}
}

// Every key is checked through the index, whose chains cross keys: many
// keys in few slots still find only their own copies.
func TestDedupFindsOnlyItsOwnKey(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.DedupWindow = time.Minute
	s := openStore(t, cfg)
	defer s.Close()
	const t0 = 1_800_000_000_000
	for i := range 40 {
		if res, err := s.AppendRecords(uint64(i+1), marked(t, s, t0, keyed(fmt.Sprint("k", i), "x"))); err != nil || res[0].Duplicate {
			t.Fatalf("key %d: %+v, %v", i, res, err)
		}
	}
	for i := range 40 {
		res, err := s.AppendRecords(uint64(41+i), marked(t, s, t0+1, keyed(fmt.Sprint("k", i), "x")))
		if err != nil || !res[0].Duplicate || res[0].QueueOffset != int64(i) {
			t.Fatalf("retry of key %d: %+v, %v", i, res, err)
		}
	}
}
