package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
	"unsafe"

	"github.com/raftmq/raftmq/message"
)

// encodeRecords is what a master does with a batch: EncodeRecord each
// message, then SetStoreTime on the whole.
func encodeRecords(t *testing.T, s *Store, msgs []message.Message, storeTime int64) []byte {
	t.Helper()
	var records []byte
	for i := range msgs {
		var err error
		if records, err = s.EncodeRecord(records, &msgs[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := message.SetStoreTime(records, storeTime); err != nil {
		t.Fatal(err)
	}
	return records
}

// Records appended as encoded are the bytes the record layout gives for
// their messages, with the store's fields filled in: offsets, Raft index,
// batch end, CRC. The caller's bytes are left as they were.
func TestAppendRecordsWritesTheRecordLayout(t *testing.T) {
	s := openStore(t, testConfig(t.TempDir()))
	defer s.Close()
	var want []byte
	blanks := 0
	for idx := uint64(1); idx <= 60; idx++ {
		msgs := batchFor(idx)
		records := encodeRecords(t, s, msgs, int64(idx)*10)
		sent := bytes.Clone(records)
		res, err := s.AppendRecords(idx, records, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(records, sent) {
			t.Fatal("AppendRecords changed the caller's bytes")
		}
		for i := range msgs {
			r := res[i]
			if r.Topic != msgs[i].Topic || r.QueueID != msgs[i].QueueID || r.TagHash != message.TagHash(msgs[i].Tags) {
				t.Fatalf("batch %d record %d: result %+v", idx, i, r)
			}
			var flag uint32
			if i == len(msgs)-1 {
				flag = message.SysFlagBatchEnd
			}
			if int64(len(want)) < r.Offset { // a blank up to the segment's end
				want = appendBlank(want, r.Offset-int64(len(want)))
				want = append(want, make([]byte, r.Offset-int64(len(want)))...)
				blanks++
			}
			want = appendStored(want, &msgs[i], idx, r.Offset, r.QueueOffset, flag)
		}
	}
	got, err := s.ReadCommitlog(0, int64(len(want)), len(want))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("commitlog differs from the record layout of its messages (%d bytes, want %d)", len(got), len(want))
	}
	if blanks == 0 {
		t.Fatal("no batch crossed a segment's end")
	}
	checkQueues(t, s, 60)
}

// Bytes that are not records, or records the store does not take, are
// refused whole, with ErrInvalidMessage, and change nothing.
func TestAppendRecordsRefusesWhatIsNotARecord(t *testing.T) {
	cfg := testConfig(t.TempDir())
	s := openStore(t, cfg)
	defer s.Close()
	appendBatches(t, s, 1, 3)
	good := encodeRecords(t, s, batchFor(4), 40)
	first := int(binary.BigEndian.Uint32(good))
	cases := map[string]func([]byte) []byte{
		"empty":          func([]byte) []byte { return nil },
		"truncated":      func(b []byte) []byte { return b[:len(b)-1] },
		"trailing bytes": func(b []byte) []byte { return append(b, 0, 0, 0) },
		"bad magic":      func(b []byte) []byte { b[first+4] ^= 0xff; return b },
		"size overruns":  func(b []byte) []byte { binary.BigEndian.PutUint32(b, uint32(len(b)+1)); return b },
		"size too small": func(b []byte) []byte { binary.BigEndian.PutUint32(b, 10); return b },
		"bad topic":      func(b []byte) []byte { b[message.HeaderLen+1] = '/'; return b },
		"field overruns": func(b []byte) []byte { b[message.HeaderLen] = 200; return b },
		"queue id":       func(b []byte) []byte { binary.BigEndian.PutUint32(b[40:], uint32(cfg.MaxQueuesPerTopic)); return b },
		"negative queue": func(b []byte) []byte { binary.BigEndian.PutUint32(b[40:], 1<<31); return b },
	}
	end := s.cl.writePos.Load()
	for name, spoil := range cases {
		_, err := s.AppendRecords(4, spoil(bytes.Clone(good)), nil)
		if !errors.Is(err, ErrInvalidMessage) {
			t.Fatalf("%s: %v, want ErrInvalidMessage", name, err)
		}
		if s.LastRaftIndex() != 3 || s.cl.writePos.Load() != end {
			t.Fatalf("%s: the refused batch changed the store", name)
		}
	}
	small := cfg
	small.Dir, small.MaxMessageSize = t.TempDir(), first-1
	tight := openStore(t, small)
	defer tight.Close()
	if _, err := tight.AppendRecords(1, good, nil); !errors.Is(err, ErrMessageTooLarge) {
		t.Fatalf("record over MaxMessageSize: %v", err)
	}
	if _, err := s.AppendRecords(4, good, nil); err != nil {
		t.Fatal(err)
	}
	checkQueues(t, s, 4)
}

// frameBatch sizes a batch's results to its records (message.Count), and
// a record of the topic of the one before it shares its string.
func TestFrameBatchSizesItsResults(t *testing.T) {
	s := openStore(t, testConfig(t.TempDir()))
	defer s.Close()
	msgs := []message.Message{{Topic: "a", Body: []byte("1")}, {Topic: "a", Body: []byte("22")}, {Topic: "b", Body: []byte("333")}}
	records := encodeRecords(t, s, msgs, 1)
	_, results, err := s.frameBatch(records, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 3 || cap(results) != 3 || results[0].Topic != "a" || results[1].Topic != "a" || results[2].Topic != "b" {
		t.Fatalf("results %+v (cap %d)", results, cap(results))
	}
	if unsafe.StringData(results[0].Topic) != unsafe.StringData(results[1].Topic) {
		t.Fatal("two records of one topic hold two strings")
	}
}
