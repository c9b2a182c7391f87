package storage

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func segmentBytes(t *testing.T, cfg Config) []byte {
	t.Helper()
	var out []byte
	for _, n := range segmentFiles(t, cfg) {
		b, err := os.ReadFile(filepath.Join(cfg.Dir, commitlogDir, n))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b...)
	}
	return out
}

// A replica behind copies the rest of a peer's commitlog in chunks of
// whole batches and ends byte-identical, with its queues and index built.
func TestCopyCommitlogMakesIdenticalReplica(t *testing.T) {
	for _, chunk := range []int{1, 5000, 1 << 20} {
		srcCfg, dstCfg := testConfig(t.TempDir()), testConfig(t.TempDir())
		src, dst := openStore(t, srcCfg), openStore(t, dstCfg)
		appendBatches(t, src, 1, 300)
		appendBatches(t, dst, 1, 40)
		for {
			_, from := dst.CommitlogOffsets()
			data, err := src.ReadCommitlog(from, 0, chunk)
			if err != nil {
				t.Fatal(err)
			}
			if len(data) == 0 {
				break
			}
			if err := dst.AppendRaw(from, data); err != nil {
				t.Fatalf("chunk %d at %d: %v", chunk, from, err)
			}
		}
		checkHolds(t, dst, 300)
		// Both take the next batch the same way.
		appendBatches(t, src, 301, 310)
		appendBatches(t, dst, 301, 310)
		src.Close()
		dst.Close()
		if a, b := segmentBytes(t, srcCfg), segmentBytes(t, dstCfg); !bytes.Equal(a, b) {
			t.Fatalf("chunk %d: commitlogs differ (%d and %d bytes)", chunk, len(a), len(b))
		}
		dst = openStore(t, dstCfg)
		checkHolds(t, dst, 310)
		if recs, _ := dst.QueryByKey(batchFor(200)[0].Keys[0], 1, 0, 1<<62); len(recs) != 1 {
			t.Fatal("copied message not in the key index")
		}
		dst.Close()
	}
}

func TestCopyCommitlogRejectsBadInput(t *testing.T) {
	src, dst := openStore(t, testConfig(t.TempDir())), openStore(t, testConfig(t.TempDir()))
	defer src.Close()
	defer dst.Close()
	appendBatches(t, src, 1, 20)
	appendBatches(t, dst, 1, 5)
	_, from := dst.CommitlogOffsets()
	data, err := src.ReadCommitlog(from, 0, 1<<20)
	if err != nil || len(data) == 0 {
		t.Fatal(err)
	}
	if _, err := src.ReadCommitlog(from+1, 0, 100); err == nil {
		t.Fatal("ReadCommitlog from inside a record succeeded")
	}
	if err := dst.AppendRaw(from+1, data); !errors.Is(err, ErrInvalidMessage) {
		t.Fatalf("copy at the wrong offset: %v", err)
	}
	bad := bytes.Clone(data)
	bad[len(bad)/2] ^= 0x40
	if err := dst.AppendRaw(from, bad); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("corrupt copy: %v", err)
	}
	if err := dst.AppendRaw(from, data[:len(data)-3]); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("torn copy: %v", err)
	}
	checkHolds(t, dst, 5)
	if err := dst.AppendRaw(from, data); err != nil {
		t.Fatal(err)
	}
	checkHolds(t, dst, 20)
	// Applied entries cannot be copied again.
	if err := dst.AppendRaw(from, data); err == nil {
		t.Fatal("the same copy was taken twice")
	}
}
