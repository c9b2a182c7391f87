package broker

import (
	"bytes"
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/raftmq/raftmq/cluster/pb"
)

// A command that carries records is an entry that ends with them, all of
// them back to back, and decodes to the command it was (its caller's
// command untouched); one without records is its protobuf, as before,
// and so are the protobuf entries with records inside that logs hold from
// before.
func TestCommandEntriesEndWithTheirRecords(t *testing.T) {
	move := records(t, "moved", 1, "m1", "m2")
	commit, rollback := records(t, "bought", 0, "c"), records(t, "TRANS_CHECK_MAX_TIME_TOPIC", 0, "r")
	for _, c := range []struct {
		name string
		cmd  *pb.RaftCommand
		tail []byte
	}{
		{"schedule move", &pb.RaftCommand{Command: &pb.RaftCommand_Send{Send: &pb.SendBatch{StoreTimestamp: 5, Records: move,
			ScheduleOffsets: map[int32]int64{3: 10}, ScheduleFrom: map[int32]int64{3: 8}}}}, move},
		{"transaction ends", &pb.RaftCommand{Command: &pb.RaftCommand_Transactions{Transactions: &pb.TransactionUpdate{StoreTimestamp: 6, Ends: []*pb.TransactionEnd{
			{HalfOffset: 1, Outcome: pb.TransactionOutcome_TRANSACTION_COMMIT, Records: commit},
			{HalfOffset: 2, Outcome: pb.TransactionOutcome_TRANSACTION_UNKNOWN, CheckTimes: 3},
			{HalfOffset: 3, Outcome: pb.TransactionOutcome_TRANSACTION_ROLLBACK, Records: rollback},
		}}}}, append(bytes.Clone(commit), rollback...)},
	} {
		want := proto.Clone(c.cmd)
		data, err := encodeCommand(c.cmd)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if data[0] != recordsCommandEntry || !bytes.HasSuffix(data, c.tail) {
			t.Fatalf("%s: the entry starts with %#x and does not end with its records", c.name, data[0])
		}
		if !proto.Equal(c.cmd, want) {
			t.Fatalf("%s: encoding changed the command", c.name)
		}
		got, err := decodeCommand(data)
		if err != nil || !proto.Equal(got, want) {
			t.Fatalf("%s: decoded %v, %v; want %v", c.name, got, err, want)
		}
		old, err := proto.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := decodeCommand(old); err != nil || !proto.Equal(got, want) {
			t.Fatalf("%s: the protobuf entry from before decodes as %v, %v", c.name, got, err)
		}
		// Damaged: cut short, trailing bytes, a count that overruns.
		for _, bad := range [][]byte{data[:len(data)-1], append(bytes.Clone(data), 0), data[:len(data)-len(c.tail)]} {
			if _, err := decodeCommand(bad); !errors.Is(err, errBadCommandEntry) {
				t.Fatalf("%s: a damaged entry of %d bytes: %v", c.name, len(bad), err)
			}
		}
	}
	plain := &pb.RaftCommand{Command: &pb.RaftCommand_Transactions{Transactions: &pb.TransactionUpdate{Ends: []*pb.TransactionEnd{{HalfOffset: 1, CheckTimes: 1}}}}}
	data, err := encodeCommand(plain)
	if err != nil || data[0] == recordsCommandEntry {
		t.Fatalf("a command without records: %#x, %v", data[:1], err)
	}
	if got, err := decodeCommand(data); err != nil || !proto.Equal(got, plain) {
		t.Fatalf("a command without records decodes as %v, %v", got, err)
	}
}

// Whatever a command entry holds, decoding it fails or gives a command;
// it never panics.
func FuzzDecodeCommandEntry(f *testing.F) {
	data, err := encodeCommand(&pb.RaftCommand{Command: &pb.RaftCommand_Transactions{Transactions: &pb.TransactionUpdate{Ends: []*pb.TransactionEnd{
		{HalfOffset: 1, Records: records(f, "bought", 0, "c")}, {HalfOffset: 2}}}}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Fuzz(func(t *testing.T, b []byte) {
		cmd, err := decodeCommand(append([]byte{recordsCommandEntry}, b...))
		if err == nil && cmd == nil {
			t.Fatal("no command and no error")
		}
	})
}

// The Raft log over the commitlog stores an entry's records where they
// begin (recordsAt): every layout that carries records ends with them,
// and an entry without records, or one unreadable, is kept whole.
func TestRecordsAtFindsEachLayoutsRecords(t *testing.T) {
	recs := records(t, "orders", 1, "a", "b")
	move, err := encodeCommand(&pb.RaftCommand{Command: &pb.RaftCommand_Send{Send: &pb.SendBatch{Records: recs, ScheduleOffsets: map[int32]int64{1: 2}}}})
	if err != nil {
		t.Fatal(err)
	}
	seq := appendSequencedHeader(nil, []*sendReq{{n: 2, seq: sendSeq{producer: 7, epoch: 1, first: 40, queue: 1, topic: "orders"}}})
	plain, err := proto.Marshal(&pb.RaftCommand{Command: &pb.RaftCommand_DeleteTopic{DeleteTopic: "orders"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		data []byte
		want []byte // the records it ends with
	}{
		{"send", append([]byte{sendRecordsEntry}, recs...), recs},
		{"sequenced send", append(seq, recs...), recs},
		{"schedule move", move, recs},
		{"a command without records", plain, nil},
		{"a sequenced entry cut short", seq[:3], nil},
		{"empty", nil, nil},
	} {
		at := recordsAt(c.data)
		if !bytes.Equal(c.data[at:], c.want) {
			t.Fatalf("%s: records at %d of %d bytes, want the last %d", c.name, at, len(c.data), len(c.want))
		}
	}
}
