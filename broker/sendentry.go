package broker

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/raftmq/raftmq/message"
)

// sequencedEntry is the first byte of a send entry that holds sends of
// idempotent producers (producers.go): a header saying, for each send in
// the entry, its producer, epoch, first sequence, message count, queue and
// topic, then the records of all the sends back to back, as in a
// sendRecordsEntry. Entries without such a send stay sendRecordsEntry, so
// they cost nothing more. 0xFE, like 0xFF, is no protobuf field tag (wire
// type 6 does not exist).
const sequencedEntry byte = 0xFE

// appendSequencedHeader appends the header of a sequenced entry of the
// sends in batch (its first byte included).
func appendSequencedHeader(data []byte, batch []*sendReq) []byte {
	data = append(data, sequencedEntry)
	data = binary.AppendUvarint(data, uint64(len(batch)))
	for _, r := range batch {
		s := r.seq
		data = binary.AppendVarint(data, s.producer)
		data = binary.AppendVarint(data, int64(s.epoch))
		data = binary.AppendVarint(data, s.first)
		data = binary.AppendVarint(data, int64(r.n))
		data = binary.AppendVarint(data, int64(s.queue))
		data = append(data, byte(len(s.topic)))
		data = append(data, s.topic...)
	}
	return data
}

// sequenced says whether any send of batch is an idempotent producer's.
func sequenced(batch []*sendReq) bool {
	for _, r := range batch {
		if r.seq.producer != 0 {
			return true
		}
	}
	return false
}

var errBadSequencedEntry = errors.New("broker: malformed sequenced send entry")

// decodeSequenced splits a sequenced entry (after its first byte) into its
// sends and their records.
func decodeSequenced(data []byte) ([]sendSeq, []byte, error) {
	count, p := binary.Uvarint(data)
	if p <= 0 || count == 0 || count > uint64(len(data)) {
		return nil, nil, errBadSequencedEntry
	}
	sends := make([]sendSeq, count)
	for i := range sends {
		var vals [5]int64 // producer, epoch, first sequence, count, queue
		for j := range vals {
			v, n := binary.Varint(data[p:])
			if n <= 0 {
				return nil, nil, errBadSequencedEntry
			}
			vals[j], p = v, p+n
		}
		if p >= len(data) || vals[3] <= 0 || vals[3] > int64(len(data)) {
			return nil, nil, errBadSequencedEntry
		}
		tl := int(data[p])
		p++
		if p+tl > len(data) {
			return nil, nil, errBadSequencedEntry
		}
		sends[i] = sendSeq{producer: vals[0], epoch: int32(vals[1]), first: vals[2], n: int(vals[3]), queue: int32(vals[4]), topic: string(data[p : p+tl])}
		p += tl
	}
	if p >= len(data) {
		return nil, nil, fmt.Errorf("%w: no records", errBadSequencedEntry)
	}
	return sends, data[p:], nil
}

// splitSends returns the records of each send of a sequenced entry, in
// order, checking that the sends' counts cover the records exactly.
func splitSends(sends []sendSeq, records []byte) ([][]byte, error) {
	out := make([][]byte, len(sends))
	p := 0
	for i, s := range sends {
		begin := p
		for range s.n {
			if len(records)-p < 4 {
				return nil, errBadSequencedEntry
			}
			size := int(binary.BigEndian.Uint32(records[p:]))
			if size < message.MinSize || size > len(records)-p {
				return nil, errBadSequencedEntry
			}
			p += size
		}
		out[i] = records[begin:p]
	}
	if p != len(records) {
		return nil, errBadSequencedEntry
	}
	return out, nil
}
