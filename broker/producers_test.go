package broker

import (
	"errors"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/raftmq/raftmq/cluster/pb"
)

const testWindow = 120_000 // ms

func seqSend(producer int64, epoch int32, first int64, n int) sendSeq {
	return sendSeq{producer: producer, epoch: epoch, first: first, n: n, topic: "t", queue: 1}
}

// Ids are issued in order; an id issued before gets a new epoch, one
// never issued is refused.
func TestProducerTableInit(t *testing.T) {
	tb := newProducerTable(testWindow, 10)
	for want := int64(1); want <= 2; want++ {
		if id, epoch, err := tb.init(0, 1000); err != nil || id != want || epoch != 0 {
			t.Fatalf("init(0) = %d, %d, %v; want %d, 0", id, epoch, err, want)
		}
	}
	if id, epoch, err := tb.init(1, 1000); err != nil || id != 1 || epoch != 1 {
		t.Fatalf("init(1) = %d, %d, %v; want 1, 1", id, epoch, err)
	}
	if _, _, err := tb.init(3, 1000); !errors.Is(err, errUnknownProducer) {
		t.Fatalf("init of an id never issued: %v", err)
	}
}

// A send is new, a retry of one stored, late (sequences below the highest
// but never stored: concurrent sends overtake each other), or refused.
func TestSequenceVerdicts(t *testing.T) {
	tb := newProducerTable(testWindow, 10)
	id, _, _ := tb.init(0, 1000)
	steps := []struct {
		s    sendSeq
		want seqVerdict
	}{
		{seqSend(id, 0, 0, 3), seqNew},     // 0-2
		{seqSend(id, 0, 0, 3), seqStored},  // its retry
		{seqSend(id, 0, 5, 1), seqNew},     // 5: overtook 3 and 4
		{seqSend(id, 0, 3, 2), seqNew},     // 3-4 arrive late
		{seqSend(id, 0, 4, 1), seqStored},  // part of an earlier send, asked alone
		{seqSend(id, 0, 5, 2), seqInvalid}, // 5 stored, 6 not
		{seqSend(id, 0, 6, 1), seqNew},
		{seqSend(id, 0, -1, 1), seqInvalid},
		{seqSend(id, 1, 7, 1), seqUnknown}, // an epoch never issued
		{seqSend(id+1, 0, 0, 1), seqUnknown},
	}
	for i, st := range steps {
		if got := tb.sequence(2000, st.s); got != st.want {
			t.Fatalf("step %d %+v: %d, want %d", i, st.s, got, st.want)
		}
	}
	// Another queue of the producer has sequences of its own.
	other := seqSend(id, 0, 0, 3)
	other.queue = 2
	if got := tb.sequence(2000, other); got != seqNew {
		t.Fatalf("the same sequences on another queue: %d, want new", got)
	}
	// A new epoch fences the old one and numbers from scratch.
	if _, epoch, err := tb.init(id, 3000); err != nil || epoch != 1 {
		t.Fatalf("new epoch: %d, %v", epoch, err)
	}
	if got := tb.sequence(3000, seqSend(id, 0, 7, 1)); got != seqFenced {
		t.Fatalf("old epoch after a new one: %d, want fenced", got)
	}
	if got := tb.sequence(3000, seqSend(id, 1, 0, 3)); got != seqNew {
		t.Fatalf("the new epoch's first send: %d, want new", got)
	}
}

// Against a model that remembers every sequence: inside the window the
// table decides as the model does; below it, it leaves the send to the
// unique keys and records nothing.
func TestSequencesAgainstAModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 50 {
		tb := newProducerTable(testWindow, 10)
		id, _, _ := tb.init(0, 0)
		stored := map[int64]bool{}
		high := int64(-1)
		for k := range 2000 {
			n := 1 + rng.IntN(4)
			if k%100 == 99 {
				n = 1 + rng.IntN(2*seqWindow) // a batch as long as the window, or longer
			}
			first := max(0, high+int64(rng.IntN(40))-int64(rng.IntN(400)))
			s := seqSend(id, 0, first, n)
			got := tb.sequence(0, s)
			var want seqVerdict
			count := 0
			for q := first; q < first+int64(n); q++ {
				if stored[q] {
					count++
				}
			}
			switch {
			case first < high+1-seqWindow:
				want = seqOld
			case count == n:
				want = seqStored
			case count > 0:
				want = seqInvalid
			default:
				want = seqNew
			}
			if got != want {
				t.Fatalf("round %d: send %d-%d (highest %d): %d, want %d", round, first, first+int64(n)-1, high, got, want)
			}
			if want == seqNew {
				for q := first; q < first+int64(n); q++ {
					stored[q] = true
				}
				high = max(high, first+int64(n)-1)
			}
		}
	}
}

// A producer silent for longer than the window is forgotten, by the
// store times the entries carry; a full table issues no new id until one
// is.
func TestSilentProducersAreForgotten(t *testing.T) {
	tb := newProducerTable(testWindow, 2)
	a, _, _ := tb.init(0, 1000)
	b, _, _ := tb.init(0, 1000)
	if _, _, err := tb.init(0, 1000); !errors.Is(err, errTooManyProducers) {
		t.Fatalf("a third id in a table of 2: %v", err)
	}
	if got := tb.sequence(50_000, seqSend(a, 0, 0, 1)); got != seqNew {
		t.Fatal(got)
	}
	// b is silent past the window: its id goes, a's stays.
	c, _, err := tb.init(0, 1000+testWindow+1)
	if err != nil || c != 3 {
		t.Fatalf("an id once b is forgotten: %d, %v", c, err)
	}
	if got := tb.sequence(1000+testWindow+1, seqSend(a, 0, 0, 1)); got != seqStored {
		t.Fatalf("a's retry after b was forgotten: %d, want stored", got)
	}
	// The table is full again (a, c): b's send is refused rather than
	// remembered beyond the cap...
	if got := tb.sequence(1000+testWindow+2, seqSend(b, 0, 0, 1)); got != seqUnknown {
		t.Fatalf("a forgotten producer with the table full: %d, want unknown", got)
	}
	// ...and taken up again as new when there is room.
	if got := tb.sequence(1000+3*testWindow, seqSend(b, 0, 0, 1)); got != seqNew {
		t.Fatalf("a forgotten producer's send: %d, want new", got)
	}
	// A clock that goes back (a new master's) does not bring a
	// forgotten producer back.
	if got := tb.sequence(1000, seqSend(a, 0, 0, 1)); got != seqNew {
		t.Fatalf("after a clock went back: %d, want new (a was forgotten)", got)
	}
}

// A restored snapshot decides as the table it was taken from.
func TestProducerTableSnapshot(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	tb := newProducerTable(testWindow, 100)
	var ids []int64
	for range 5 {
		id, _, _ := tb.init(0, 1000)
		ids = append(ids, id)
	}
	sends := make([]sendSeq, 0, 3000)
	for range cap(sends) {
		s := seqSend(ids[rng.IntN(len(ids))], 0, int64(rng.IntN(600)), 1+rng.IntN(3))
		s.queue = int32(rng.IntN(3))
		sends = append(sends, s)
	}
	for _, s := range sends[:2000] {
		tb.sequence(2000, s)
	}
	snap := tb.snapshot()
	data, err := proto.Marshal(snap)
	if err != nil {
		t.Fatal(err)
	}
	var decoded pb.ProducerTable
	if err := proto.Unmarshal(data, &decoded); err != nil {
		t.Fatal(err)
	}
	restored := newProducerTable(testWindow, 100)
	restored.restore(&decoded)
	for i, s := range sends[2000:] {
		if a, b := tb.sequence(3000, s), restored.sequence(3000, s); a != b {
			t.Fatalf("send %d %+v: the table says %d, the restored one %d", i, s, a, b)
		}
	}
	if id, _, _ := restored.init(0, 3000); id != int64(len(ids)+1) {
		t.Fatalf("the restored table issues id %d, want %d", id, len(ids)+1)
	}
	restored.restore(nil) // a snapshot from before producer ids
	if restored.size() != 0 || restored.nextID != 1 {
		t.Fatalf("restored from nothing: %d producers, next id %d", restored.size(), restored.nextID)
	}
}

// Sequenced entries decode to what was encoded; a damaged header is an
// error, never a panic.
func TestSequencedEntryRoundTrip(t *testing.T) {
	recs := records(t, "t", 1, "a", "b", "c")
	second := records(t, "other", 0, "d")
	batch := []*sendReq{
		{records: recs, n: 3, seq: sendSeq{producer: 7, epoch: 2, first: 40, topic: "t", queue: 1}},
		{records: second, n: 1}, // a producer without an id
	}
	data, at := entryData(batch, len(recs)+len(second))
	if data[0] != sequencedEntry {
		t.Fatalf("entry type %#x", data[0])
	}
	sends, rs, err := decodeSequenced(data[1:])
	if err != nil {
		t.Fatal(err)
	}
	if len(data)-len(rs) != at {
		t.Fatalf("records at %d, decoded at %d", at, len(data)-len(rs))
	}
	want := []sendSeq{{producer: 7, epoch: 2, first: 40, n: 3, topic: "t", queue: 1}, {n: 1}}
	for i := range want {
		if sends[i] != want[i] {
			t.Fatalf("send %d: %+v, want %+v", i, sends[i], want[i])
		}
	}
	parts, err := splitSends(sends, rs)
	if err != nil || len(parts[0]) != len(recs) || len(parts[1]) != len(second) {
		t.Fatalf("split: %v", err)
	}
	if plain, _ := entryData(batch[1:], len(second)); plain[0] != sendRecordsEntry {
		t.Fatalf("an entry of sends without ids is %#x, want the plain one", plain[0])
	}
	for cut := 1; cut < at; cut++ {
		if _, _, err := decodeSequenced(data[1:cut]); err == nil {
			t.Fatalf("a header cut at %d decoded", cut)
		}
	}
	sends[0].n = 2
	if _, err := splitSends(sends, rs); err == nil {
		t.Fatal("counts that do not cover the records were taken")
	}
}

func FuzzDecodeSequenced(f *testing.F) {
	recs := records(f, "t", 1, "a", "b")
	data, _ := entryData([]*sendReq{{records: recs, n: 2, seq: sendSeq{producer: 1, first: 3, topic: "t", queue: 1}}}, len(recs))
	f.Add(data[1:])
	f.Fuzz(func(t *testing.T, b []byte) {
		sends, rs, err := decodeSequenced(b)
		if err != nil {
			return
		}
		if _, err := splitSends(sends, rs); err != nil {
			return
		}
		tb := newProducerTable(testWindow, 4)
		tb.init(0, 0)
		for _, s := range sends { // whatever the numbers, a verdict and no panic
			tb.sequence(0, s)
			tb.sequence(0, s)
		}
	})
}
