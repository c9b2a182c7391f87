package storage

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"testing"

	"github.com/raftmq/raftmq/message"
)

// FuzzCheckedRecordIsAppendable: the master checks a producer's records
// with CheckRecord and puts them in a Raft entry; every replica's store
// then appends them, framing each again with its keys (AppendRecords).
// A record the check accepts but the append refuses would stop every
// replica's store (a failed store stops serving): so whatever CheckRecord
// accepts, the append's framing accepts alike, and it decodes.
//
// Each input is tried as given and with the magic set and the CRC
// recomputed over the size its header claims, to reach the field checks.
func FuzzCheckedRecordIsAppendable(f *testing.F) {
	s := openStore(f, testConfig(f.TempDir()))
	f.Cleanup(func() { s.Close() })
	seed, err := message.Append(nil, &message.Message{Topic: "orders", QueueID: 1, Body: []byte("body"), Tags: "t",
		Keys: []string{"k1", "k2"}, Properties: map[string]string{"a": "b", message.PropertyUniqKey: "u"}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Fuzz(func(t *testing.T, data []byte) {
		checkAppendable(t, s, data)
		if len(data) >= 12 {
			fixed := bytes.Clone(data)
			binary.BigEndian.PutUint32(fixed[4:], message.Magic)
			if size := int64(binary.BigEndian.Uint32(fixed)); size >= 12 && size <= int64(len(fixed)) {
				binary.BigEndian.PutUint32(fixed[8:], crc32.Checksum(fixed[12:size], crc32.MakeTable(crc32.Castagnoli)))
			}
			checkAppendable(t, s, fixed)
		}
	})
}

func checkAppendable(t *testing.T, s *Store, data []byte) {
	size, v, err := s.CheckRecord(data)
	if err != nil {
		return
	}
	asz, av, err := s.frame(data[:size], true)
	if err != nil || asz != size || !bytes.Equal(av.Topic, v.Topic) || av.QueueID != v.QueueID || av.BodyLen != v.BodyLen {
		t.Fatalf("CheckRecord accepted %d bytes (topic %q, queue %d) that the append frames as %d, %q, %d: %v", size, v.Topic, v.QueueID, asz, av.Topic, av.QueueID, err)
	}
	r, err := message.Decode(data[:size])
	if err != nil || r.Topic != string(v.Topic) || len(r.Body) != v.BodyLen {
		t.Fatalf("CheckRecord accepted a record that does not decode alike: %+v %v", r, err)
	}
}
