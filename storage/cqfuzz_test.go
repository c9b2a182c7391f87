package storage

import (
	"bytes"
	"encoding/binary"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// FuzzDamagedConsumeQueue: a consume queue file of a store (ten batches,
// closed cleanly) has bytes written over it at at, as a bad disk or a
// torn write would leave it; the store opens, and reading every queue
// from its minimum to its maximum never returns a record other than the
// one appended at that queue offset: a read fails (ErrCorrupt), skips, or
// returns the right record, in queue order.
func FuzzDamagedConsumeQueue(f *testing.F) {
	tp := fzRecoveryTemplates(f)[1]
	var cqFiles []string
	for rel := range tp.files {
		if strings.HasPrefix(rel, consumeQueueDir+string(filepath.Separator)) {
			cqFiles = append(cqFiles, rel)
		}
	}
	slices.Sort(cqFiles)
	if len(cqFiles) == 0 {
		f.Fatal("the template has no consume queue file")
	}
	// What was appended: every record of the segment, by queue and offset.
	want := map[queueKey]map[int64][]byte{}
	for pos := int64(0); pos+8 <= int64(len(tp.seg)); {
		size := int64(binary.BigEndian.Uint32(tp.seg[pos:]))
		r, err := decodeRecord(tp.seg[pos : pos+size])
		if size == 0 || err != nil {
			break
		}
		k := queueKey{r.Topic, r.QueueID}
		if want[k] == nil {
			want[k] = map[int64][]byte{}
		}
		want[k][r.QueueOffset] = tp.seg[pos : pos+size]
		pos += size
	}
	f.Add(uint8(0), uint16(0), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Add(uint8(1), uint16(20), make([]byte, 20))
	f.Fuzz(func(t *testing.T, which uint8, at uint16, data []byte) {
		hang := time.AfterFunc(30*time.Second, func() { panic("FuzzDamagedConsumeQueue: one input took over 30 s (hang?)") })
		defer hang.Stop()
		dir := t.TempDir()
		victim := cqFiles[int(which)%len(cqFiles)]
		for rel, b := range tp.files {
			if rel == victim {
				b = bytes.Clone(b)
				if len(b) > 0 {
					copy(b[int(at)%len(b):], data)
				}
			}
			fzWriteFile(t, filepath.Join(dir, rel), b)
		}
		fzWriteFile(t, filepath.Join(dir, fzSegmentPath), tp.seg)
		s, err := Open(testConfig(dir))
		if err != nil {
			return // refusing to open a damaged store is allowed: it serves nothing
		}
		defer s.Close()
		for k, recs := range want {
			min, max := s.QueueOffsets(k.topic, k.id)
			for off := min; off < max; {
				res, err := s.GetMessages(GetRequest{Topic: k.topic, QueueID: k.id, Offset: off, MaxMessages: 32, MaxBytes: 1 << 20})
				if err != nil || res.Status != Found || len(res.Records) == 0 {
					off++
					continue
				}
				for _, raw := range res.Records {
					r, err := decodeRecord(raw)
					if err != nil || r.Topic != k.topic || r.QueueID != k.id || r.QueueOffset < off || !bytes.Equal(raw, recs[r.QueueOffset]) {
						t.Fatalf("%s@%d read at %d served a record that is not the one appended there (queue offset %d, err %v; victim %s; %d bytes, want %d; offset %d)", k.topic, k.id, off, r.QueueOffset, err, victim, len(raw), len(recs[r.QueueOffset]), r.Offset)
					}
					off = r.QueueOffset + 1
				}
			}
		}
	})
}
