package broker

import (
	"encoding/binary"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/message"
)

// recordsCommandEntry is the first byte of a command entry that carries
// records: a schedule move (RaftCommand_Send with records) or a
// transaction update whose ends carry the messages they store. The
// command, its records fields emptied, comes first as a protobuf, then
// how many records each of those fields held, then all the records back
// to back:
//
//	0xFD, uvarint length, RaftCommand,
//	uvarint k, k x uvarint record count (the Send's records; or each end's, in order),
//	the records.
//
// So every entry that stores records ends with them (a sendRecordsEntry, a
// sequencedEntry and this), which the commitlog as the Raft log needs: an
// entry's records are written where consumers read them, and the rest of
// the entry beside them (docs/commitlog-raft-log.md). Such commands were
// protobuf entries with their records inside before; those still in a log
// are applied as they were. No RaftCommand starts with 0xFD: a tag's low
// three bits are its wire type, 5 (fixed32) in 0xFD, and every field of
// RaftCommand is a string or a message (wire type 2).
const recordsCommandEntry byte = 0xFD

var errBadCommandEntry = errors.New("broker: malformed command entry")

// encodeCommand is a command's entry: a recordsCommandEntry when it
// carries records, else its protobuf.
func encodeCommand(cmd *pb.RaftCommand) ([]byte, error) {
	parts := recordParts(cmd)
	if parts == nil {
		return proto.Marshal(cmd)
	}
	held := make([][]byte, len(parts))
	for i, p := range parts {
		held[i], *p = *p, nil
	}
	b, err := proto.Marshal(cmd)
	for i, p := range parts {
		*p = held[i]
	}
	if err != nil {
		return nil, err
	}
	head := binary.AppendUvarint([]byte{recordsCommandEntry}, uint64(len(b)))
	head = append(head, b...)
	head = binary.AppendUvarint(head, uint64(len(held)))
	size := 0
	for _, h := range held {
		n, err := message.Count(h)
		if err != nil {
			return nil, fmt.Errorf("broker: a command's records: %w", err)
		}
		head = binary.AppendUvarint(head, uint64(n))
		size += len(h)
	}
	data := append(make([]byte, 0, len(head)+size), head...)
	for _, h := range held {
		data = append(data, h...)
	}
	return data, nil
}

// decodeCommand decodes a command entry: a recordsCommandEntry, or a
// RaftCommand's protobuf.
func decodeCommand(data []byte) (*pb.RaftCommand, error) {
	if len(data) > 0 && data[0] == recordsCommandEntry {
		return decodeCommandEntry(data[1:])
	}
	var cmd pb.RaftCommand
	if err := proto.Unmarshal(data, &cmd); err != nil {
		return nil, err
	}
	return &cmd, nil
}

// decodeCommandEntry decodes a recordsCommandEntry (after its first
// byte): the command, with its records fields pointing into data.
func decodeCommandEntry(data []byte) (*pb.RaftCommand, error) {
	n, p := binary.Uvarint(data)
	if p <= 0 || n > uint64(len(data)-p) {
		return nil, errBadCommandEntry
	}
	var cmd pb.RaftCommand
	if err := proto.Unmarshal(data[p:p+int(n)], &cmd); err != nil {
		return nil, fmt.Errorf("%w: %w", errBadCommandEntry, err)
	}
	data = data[p+int(n):]
	k, p := binary.Uvarint(data)
	parts := recordFields(&cmd)
	if p <= 0 || k != uint64(len(parts)) {
		return nil, errBadCommandEntry
	}
	data = data[p:]
	counts := make([]uint64, k)
	for i := range counts {
		if counts[i], p = binary.Uvarint(data); p <= 0 {
			return nil, errBadCommandEntry
		}
		data = data[p:]
	}
	for i, part := range parts {
		end := 0
		for range counts[i] {
			if len(data)-end < message.MinSize {
				return nil, errBadCommandEntry
			}
			size := int(binary.BigEndian.Uint32(data[end:]))
			if size < message.MinSize || size > len(data)-end {
				return nil, errBadCommandEntry
			}
			end += size
		}
		if end > 0 {
			*part = data[:end:end]
		}
		data = data[end:]
	}
	if len(data) != 0 {
		return nil, errBadCommandEntry
	}
	return &cmd, nil
}

// recordParts are the command's fields that hold records, in the order
// an entry lists them; nil for a command without any.
func recordParts(cmd *pb.RaftCommand) []*[]byte {
	parts := recordFields(cmd)
	for _, p := range parts {
		if len(*p) > 0 {
			return parts
		}
	}
	return nil
}

// recordFields are the command's fields that may hold records, empty or
// not: the Send's records, or each transaction end's.
func recordFields(cmd *pb.RaftCommand) []*[]byte {
	switch c := cmd.Command.(type) {
	case *pb.RaftCommand_Send:
		if c.Send != nil {
			return []*[]byte{&c.Send.Records}
		}
	case *pb.RaftCommand_Transactions:
		var parts []*[]byte
		for _, e := range c.Transactions.GetEnds() {
			parts = append(parts, &e.Records)
		}
		return parts
	}
	return nil
}

// recordsAt says where the records of a command entry's data begin, for
// the Raft log over the commitlog (cluster.RecordsAt): after a send
// entry's first byte, after a sequenced entry's header, after a records
// command's counts; len(data) for an entry without records, or one it
// cannot read (kept whole in its frame: applying it fails as it would).
func recordsAt(data []byte) int {
	if len(data) == 0 {
		return 0
	}
	switch data[0] {
	case sendRecordsEntry:
		return 1
	case sequencedEntry:
		if _, records, err := decodeSequenced(data[1:]); err == nil {
			return len(data) - len(records)
		}
	case recordsCommandEntry:
		if at, err := commandRecordsAt(data[1:]); err == nil {
			return 1 + at
		}
	}
	return len(data)
}

// commandRecordsAt is where the records of a recordsCommandEntry (after
// its first byte) begin.
func commandRecordsAt(data []byte) (int, error) {
	n, p := binary.Uvarint(data)
	if p <= 0 || n > uint64(len(data)-p) {
		return 0, errBadCommandEntry
	}
	at := p + int(n)
	k, p := binary.Uvarint(data[at:])
	if p <= 0 || k > uint64(len(data)) {
		return 0, errBadCommandEntry
	}
	at += p
	for range k {
		if _, p = binary.Uvarint(data[at:]); p <= 0 {
			return 0, errBadCommandEntry
		}
		at += p
	}
	return at, nil
}
