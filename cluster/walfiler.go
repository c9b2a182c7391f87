package cluster

import (
	"sync"

	"github.com/hashicorp/raft-wal/types"
)

// walFiler is raft-wal's segment filer with two mends for v0.4.2.
//
// A tail sealed but not rotated. A rotation seals the full tail segment
// (its index frame and a commit, in the same fsync as the last entries)
// and only then records the seal and the next segment in wal-meta.db. A
// crash between the two leaves a tail that the metadata calls open and the
// file calls sealed; Open recovers it as the tail, and every append after
// fails with "segment is sealed", so the member can never store an entry
// again (found by TestKill9DuringSegmentRotation). The filer notes such a
// tail so that openWAL can record the rotation as the crash kept it from
// doing.
//
// Write buffers kept for good. The WAL goes on reading a segment it sealed
// through the segment's writer, and the writer keeps its write buffer,
// grown to the largest append it took (a follower's append is a whole
// AppendEntries, up to 256 entries of the broker's batches). Every segment
// still in the log kept one: brokers' heaps grew to 420-460 MB in 120 s of
// batched publish, 84-110 MB of it raft-wal's (Writer).ensureBufCap in a
// heap profile after 60 s. Its writers here let go of the writer once it
// is sealed and read the segment from a reader of its own, as the WAL does
// for the sealed segments it finds on Open.
type walFiler struct {
	types.SegmentFiler
	sealed *sealedTail
}

type sealedTail struct {
	info       types.SegmentInfo
	indexStart uint64
	last       uint64
}

func (f *walFiler) Create(info types.SegmentInfo) (types.SegmentWriter, error) {
	sw, err := f.SegmentFiler.Create(info)
	if err != nil {
		return nil, err
	}
	return &releasingWriter{w: sw, filer: f.SegmentFiler, info: info}, nil
}

func (f *walFiler) RecoverTail(info types.SegmentInfo) (types.SegmentWriter, error) {
	sw, err := f.SegmentFiler.RecoverTail(info)
	if err != nil {
		return nil, err
	}
	sealed, indexStart, err := sw.Sealed()
	if err != nil {
		sw.Close()
		return nil, err
	}
	if sealed {
		f.sealed = &sealedTail{info: info, indexStart: indexStart, last: max(sw.LastIndex(), info.BaseIndex-1)}
	}
	return &releasingWriter{w: sw, filer: f.SegmentFiler, info: info}, nil
}

// releasingWriter is a segment writer that, once its segment is sealed,
// serves reads from the segment opened read-only and drops the writer.
type releasingWriter struct {
	filer types.SegmentFiler
	info  types.SegmentInfo

	mu         sync.RWMutex
	w          types.SegmentWriter // until sealed and released
	r          types.SegmentReader // after
	indexStart uint64
	last       uint64
}

var _ types.SegmentWriter = (*releasingWriter)(nil)

func (rw *releasingWriter) Append(entries []types.LogEntry) error {
	if w := rw.writer(); w != nil {
		return w.Append(entries)
	}
	return types.ErrSealed
}

// Sealed is asked after every append: the first time it is true, the
// writer is released.
func (rw *releasingWriter) Sealed() (bool, uint64, error) {
	w := rw.writer()
	if w == nil {
		return true, rw.indexStart, nil
	}
	sealed, indexStart, err := w.Sealed()
	if err == nil && sealed {
		rw.release(w, indexStart)
	}
	return sealed, indexStart, err
}

func (rw *releasingWriter) ForceSeal() (uint64, error) {
	w := rw.writer()
	if w == nil {
		return rw.indexStart, nil
	}
	indexStart, err := w.ForceSeal()
	if err == nil {
		rw.release(w, indexStart)
	}
	return indexStart, err
}

// release opens the sealed segment for reading and drops the writer. If
// the segment cannot be opened the writer stays: it reads as well, only
// holding its buffer.
func (rw *releasingWriter) release(w types.SegmentWriter, indexStart uint64) {
	info := rw.info
	info.IndexStart, info.MaxIndex = indexStart, w.LastIndex()
	r, err := rw.filer.Open(info)
	if err != nil {
		return
	}
	rw.mu.Lock()
	rw.w, rw.r, rw.indexStart, rw.last = nil, r, indexStart, info.MaxIndex
	rw.mu.Unlock()
	w.Close() // no read holds it now: they run under mu
}

func (rw *releasingWriter) writer() types.SegmentWriter {
	rw.mu.RLock()
	defer rw.mu.RUnlock()
	return rw.w
}

func (rw *releasingWriter) LastIndex() uint64 {
	rw.mu.RLock()
	defer rw.mu.RUnlock()
	if rw.w != nil {
		return rw.w.LastIndex()
	}
	return rw.last
}

func (rw *releasingWriter) GetLog(idx uint64) (*types.PooledBuffer, error) {
	rw.mu.RLock()
	defer rw.mu.RUnlock()
	if rw.w != nil {
		return rw.w.GetLog(idx)
	}
	return rw.r.GetLog(idx)
}

func (rw *releasingWriter) Close() error {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	if rw.w != nil {
		return rw.w.Close()
	}
	return rw.r.Close()
}
