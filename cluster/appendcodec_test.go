package cluster

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func sampleAppendRequest() *raft.AppendEntriesRequest {
	return &raft.AppendEntriesRequest{
		RPCHeader:         raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("2"), Addr: []byte("127.0.0.1:7002")},
		Term:              7,
		Leader:            []byte("127.0.0.1:7002"),
		PrevLogEntry:      41,
		PrevLogTerm:       6,
		LeaderCommitIndex: 40,
		Entries: []*raft.Log{
			{Index: 42, Term: 7, Type: raft.LogCommand, Data: bytes.Repeat([]byte("a"), 200<<10), AppendedAt: time.Unix(0, 1765000000123456789)},
			{Index: 43, Term: 7, Type: raft.LogNoop},
			{Index: 44, Term: 7, Type: raft.LogConfiguration, Data: []byte{1, 2, 3}, Extensions: []byte("ext")},
		},
	}
}

// roundTrip writes req and reads it back.
func roundTrip(t *testing.T, req *raft.AppendEntriesRequest, lim appendLimits) (*raft.AppendEntriesRequest, error) {
	t.Helper()
	var buf bytes.Buffer
	w := bufio.NewWriterSize(&buf, memberConnBuffer)
	if _, err := writeAppendRequest(w, req, nil); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	got, _, err := readAppendRequest(bufio.NewReaderSize(&buf, memberConnBuffer), lim, nil)
	return got, err
}

func sameRequest(t *testing.T, got, want *raft.AppendEntriesRequest) {
	t.Helper()
	g, w := *got, *want
	g.Entries, w.Entries = nil, nil
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("head: got %+v, want %+v", g, w)
	}
	if len(got.Entries) != len(want.Entries) {
		t.Fatalf("%d entries, want %d", len(got.Entries), len(want.Entries))
	}
	for i, e := range got.Entries {
		x := want.Entries[i]
		if e.Index != x.Index || e.Term != x.Term || e.Type != x.Type || !bytes.Equal(e.Data, x.Data) ||
			!bytes.Equal(e.Extensions, x.Extensions) || !e.AppendedAt.Equal(x.AppendedAt) {
			t.Fatalf("entry %d: got %+v, want %+v", i, e, x)
		}
	}
}

func TestAppendRequestRoundTrip(t *testing.T) {
	want := sampleAppendRequest()
	got, err := roundTrip(t, want, appendLimits{entryBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	sameRequest(t, got, want)
	// Each entry keeps a slice of its own: appending to one cannot reach
	// into the next.
	if d := got.Entries[0].Data; cap(d) != len(d) {
		t.Fatalf("entry data has spare capacity %d", cap(d)-len(d))
	}
	if !got.Entries[1].AppendedAt.IsZero() {
		t.Fatalf("a zero time came back as %v", got.Entries[1].AppendedAt)
	}
}

func TestAppendRequestWithoutEntries(t *testing.T) {
	want := &raft.AppendEntriesRequest{Term: 3, LeaderCommitIndex: 9, PrevLogEntry: 9, PrevLogTerm: 3}
	got, err := roundTrip(t, want, appendLimits{entryBytes: 1})
	if err != nil {
		t.Fatal(err)
	}
	sameRequest(t, got, want)
}

// An entry over the reader's cap fails the read at the head: its bytes
// are never read, nor space allocated for them.
func TestAppendRequestRefusesAnEntryOverTheCap(t *testing.T) {
	req := sampleAppendRequest()
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	head, err := appendHead(nil, req)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(head) // the head alone: a read of the data would fail with EOF
	w.Flush()
	_, _, err = readAppendRequest(bufio.NewReader(&buf), appendLimits{entryBytes: 100 << 10}, nil)
	if !errors.Is(err, errWire) || !strings.Contains(err.Error(), "MaxEntryBytes") {
		t.Fatalf("got %v, want the entry refused by its size", err)
	}
}

func TestAppendRequestRefusesTooManyEntries(t *testing.T) {
	req := &raft.AppendEntriesRequest{Entries: make([]*raft.Log, maxAppendRequestEntries+1)}
	if _, err := appendHead(nil, req); err == nil {
		t.Fatal("a head of too many entries was written")
	}
	// A peer that claims more than it may: the count in a head of the
	// right length for it.
	head := []byte{}
	head = append(head, make([]byte, 4+8+3*2+4*8)...)
	n := maxAppendRequestEntries + 1
	head = append(head, byte(n), byte(n>>8), 0, 0)
	head = append(head, make([]byte, n*entryHeadBytes)...)
	putLen(head)
	_, _, err := readAppendRequest(bufio.NewReader(bytes.NewReader(head)), appendLimits{entryBytes: 1}, nil)
	if !errors.Is(err, errWire) {
		t.Fatalf("got %v, want errWire", err)
	}
}

func putLen(b []byte) {
	n := len(b) - 4
	b[0], b[1], b[2], b[3] = byte(n), byte(n>>8), byte(n>>16), byte(n>>24)
}

// Every prefix of a request fails to read, with an error, not a panic or
// a request.
func TestAppendRequestTruncated(t *testing.T) {
	req := sampleAppendRequest()
	req.Entries[0].Data = []byte("short")
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	if _, err := writeAppendRequest(w, req, nil); err != nil {
		t.Fatal(err)
	}
	w.Flush()
	whole := buf.Bytes()
	for n := 0; n < len(whole); n++ {
		got, _, err := readAppendRequest(bufio.NewReader(bytes.NewReader(whole[:n])), appendLimits{entryBytes: 1 << 20}, nil)
		if err == nil || got != nil {
			t.Fatalf("a prefix of %d of %d bytes read as %+v", n, len(whole), got)
		}
		if n > 0 && errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("a prefix of %d bytes read as a clean end: %v", n, err)
		}
	}
}

// A head whose length field claims more than a head may be is refused
// before it is read.
func TestAppendRequestRefusesAnOversizedHead(t *testing.T) {
	b := []byte{0xff, 0xff, 0xff, 0x7f}
	_, _, err := readAppendRequest(bufio.NewReader(bytes.NewReader(b)), appendLimits{entryBytes: 1}, nil)
	if !errors.Is(err, errWire) {
		t.Fatalf("got %v, want errWire", err)
	}
}

func TestAppendAnswerRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		resp *raft.AppendEntriesResponse
		err  error
	}{
		{"success", &raft.AppendEntriesResponse{RPCHeader: raft.RPCHeader{ProtocolVersion: 3, ID: []byte("1"), Addr: []byte("a:1")}, Term: 9, LastLog: 1 << 40, Success: true}, nil},
		{"refused", &raft.AppendEntriesResponse{Term: 10, LastLog: 5, NoRetryBackoff: true}, nil},
		{"error", nil, errors.New("nope")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			w := bufio.NewWriter(&buf)
			if _, err := writeAppendAnswer(w, tc.resp, tc.err, nil); err != nil {
				t.Fatal(err)
			}
			w.Flush()
			var got raft.AppendEntriesResponse
			_, err := readAppendAnswer(bufio.NewReader(&buf), &got, nil)
			if tc.err != nil {
				var remote errRemote
				if !errors.As(err, &remote) || remote.msg != tc.err.Error() {
					t.Fatalf("got %v, want the remote error %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(&got, tc.resp) {
				t.Fatalf("got %+v, want %+v", got, *tc.resp)
			}
		})
	}
}

func TestAppendAnswerTruncatedOrPadded(t *testing.T) {
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	writeAppendAnswer(w, &raft.AppendEntriesResponse{Term: 1, Success: true}, nil, nil)
	w.Flush()
	whole := buf.Bytes()
	for n := 0; n < len(whole); n++ {
		var got raft.AppendEntriesResponse
		if _, err := readAppendAnswer(bufio.NewReader(bytes.NewReader(whole[:n])), &got, nil); err == nil {
			t.Fatalf("a prefix of %d of %d bytes read", n, len(whole))
		}
	}
	padded := append(append([]byte{}, whole...), 0)
	putLen(padded)
	var got raft.AppendEntriesResponse
	if _, err := readAppendAnswer(bufio.NewReader(bytes.NewReader(padded)), &got, nil); !errors.Is(err, errWire) {
		t.Fatalf("an answer with a byte too many: %v", err)
	}
}

// FuzzReadAppendRequest: whatever a peer sends, the read returns an error
// or a request that encodes back to the bytes it came from.
func FuzzReadAppendRequest(f *testing.F) {
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	req := sampleAppendRequest()
	req.Entries[0].Data = []byte("body")
	writeAppendRequest(w, req, nil)
	w.Flush()
	f.Add(buf.Bytes())
	f.Add([]byte{0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bufio.NewReader(bytes.NewReader(b))
		got, _, err := readAppendRequest(r, appendLimits{entryBytes: 1 << 16}, nil)
		if err != nil {
			return
		}
		var again bytes.Buffer
		w := bufio.NewWriter(&again)
		if _, err := writeAppendRequest(w, got, nil); err != nil {
			t.Fatalf("a request read does not write: %v", err)
		}
		w.Flush()
		consumed := len(b) - remaining(r)
		if !bytes.Equal(again.Bytes(), b[:consumed]) {
			t.Fatalf("read %x, wrote back %x", b[:consumed], again.Bytes())
		}
	})
}

// remaining drains r and counts what was left unread.
func remaining(r *bufio.Reader) int {
	n, _ := io.Copy(io.Discard, r)
	return int(n)
}
