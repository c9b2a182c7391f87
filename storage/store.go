package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/raftmq/raftmq/message"
	"golang.org/x/sys/unix"
)

// Store is the on-disk store of one broker replica: commitlog, consume
// queues, key index and checkpoint under one directory. Append has a single
// caller at a time (the Raft state machine); reads run concurrently with it
// and with each other.
type Store struct {
	cfg  Config
	log  *slog.Logger
	lock *os.File

	cl    *commitlog
	index *keyIndex

	queuesMu sync.RWMutex
	queues   map[queueKey]*consumeQueue

	appendMu      sync.Mutex
	lastRaftIndex uint64             // guarded by appendMu
	encBuf        []byte             // guarded by appendMu
	stored        []storedEntry      // written, not dispatched (dispatch.go); guarded by appendMu
	storeNext     map[queueKey]int64 // next queue offsets counting stored entries; guarded by appendMu
	deleting      map[string]int     // stored entries not dispatched that delete a topic, by topic (topicdelete.go); guarded by appendMu
	dedupSeen     map[uint64]int     // a batch's unique keys (dedup.go), guarded by appendMu
	chunks        []chunk            // guarded by appendMu
	keyBuf        []indexKey         // guarded by appendMu
	patchBuf      []byte             // a record being dropped in place (dispatch.go); guarded by appendMu
	entryBuf      []byte             // an entry's frame and records (entries.go); guarded by appendMu
	entries       entryIndex         // where stored Raft entries are (entries.go)
	views         []message.View     // guarded by appendMu

	failMu  sync.Mutex
	failed  error         // guarded by failMu; see Err
	failedC chan struct{} // closed when failed is set

	dispatched atomic.Pointer[checkpoint] // what the next checkpoint may claim
	cpMu       sync.Mutex
	lastCP     checkpoint // guarded by cpMu

	rebuild    bool // derived files were damaged or missing at open: recovery rebuilds them
	rebuilding bool // a full rebuild is dispatching: queues may start past 0

	closed atomic.Bool
	stop   chan struct{}
	wg     sync.WaitGroup
}

// AppendResult is where the store put one message.
type AppendResult struct {
	Offset      int64 // commitlog offset of the record
	Size        int32 // record size in bytes
	QueueOffset int64
	// The record's queue and tag hash, as read from it.
	Topic   string
	QueueID int32
	TagHash int64
	// Duplicate: the record, a retry of the stored record these fields
	// describe (Config.DedupWindow), was appended dropped.
	Duplicate bool
	// Dropped: the record was appended dropped (message.SysFlagDropped),
	// as the caller asked; these fields are its own.
	Dropped bool

	frame bool // a Raft entry's frame (entries.go): no queue offset, never dispatched
	// deletes: the frame deletes a topic (message.SysFlagDeletesTopic).
	deletes bool
}

type chunk struct {
	pos      int64
	from, to int
}

const (
	commitlogDir    = "commitlog"
	consumeQueueDir = "consumequeue"
	indexDir        = "index"
	lockFile        = "LOCK"
)

// Open opens or creates the store in cfg.Dir and recovers it: the commitlog
// is cut at the last whole, valid batch, and the consume queues and index
// are brought up to it. Only one Store may have a directory open.
func Open(cfg Config) (*Store, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("storage: create dir: %w", err)
	}
	s := &Store{
		cfg:       cfg,
		log:       cfg.Logger.With("store", cfg.Dir),
		queues:    make(map[queueKey]*consumeQueue),
		storeNext: make(map[queueKey]int64),
		deleting:  make(map[string]int),
		dedupSeen: make(map[uint64]int),
		stop:      make(chan struct{}),
		failedC:   make(chan struct{}),
	}
	if s.lock, err = lockDir(cfg.Dir); err != nil {
		return nil, err
	}
	if err := s.openFiles(); err != nil {
		s.closeFiles()
		return nil, err
	}
	if err := s.recover(); err != nil {
		s.closeFiles()
		return nil, err
	}
	s.cl.fallocate = cfg.PreallocateBy == PreallocateFallocate
	switch {
	case cfg.PreallocateAhead > 0:
		if err := s.cl.preallocateFirst(); err != nil {
			s.closeFiles()
			return nil, err
		}
		s.cl.z = startPreallocator(s.cl, cfg.PreallocateAhead, cfg.PreallocateIdle, cfg.idleQuiet, cfg.PageCacheBehind, s.log)
	case cfg.PageCacheBehind >= 0: // no preallocation: its goroutine only drops the cache behind
		s.cl.z = startPreallocator(s.cl, 0, 0, 0, cfg.PageCacheBehind, s.log)
	}
	s.startLoops()
	return s, nil
}

func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("storage: open lock file: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("storage: %s is in use by another process: %w", dir, err)
	}
	return f, nil
}

// openFiles opens every file as found; recovery decides what is valid.
func (s *Store) openFiles() error {
	// A derived directory that is gone (an operator may delete one to
	// force a rebuild) is rebuilt from the commitlog.
	for _, d := range []string{consumeQueueDir, indexDir} {
		if _, err := os.Stat(filepath.Join(s.cfg.Dir, d)); os.IsNotExist(err) {
			s.rebuild = true
		}
	}
	var err error
	if s.cl, err = openCommitlog(filepath.Join(s.cfg.Dir, commitlogDir), s.cfg.SegmentSize, s.cfg.RecycleSegments, s.log); err != nil {
		return err
	}
	s.cl.fault = s.cfg.DiskFault
	if s.index, err = openKeyIndex(filepath.Join(s.cfg.Dir, indexDir), s.cfg.IndexSlots, s.cfg.IndexEntries); err != nil {
		if !errors.Is(err, ErrCorrupt) {
			return err
		}
		// The index is derived data: start it again and rebuild it.
		s.log.Warn("index damaged, rebuilding it", "err", err)
		if err := os.RemoveAll(filepath.Join(s.cfg.Dir, indexDir)); err != nil {
			return fmt.Errorf("storage: remove damaged index: %w", err)
		}
		if s.index, err = openKeyIndex(filepath.Join(s.cfg.Dir, indexDir), s.cfg.IndexSlots, s.cfg.IndexEntries); err != nil {
			return err
		}
		s.rebuild = true
	}
	root := filepath.Join(s.cfg.Dir, consumeQueueDir)
	topics, err := os.ReadDir(root)
	if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("storage: read consume queues: %w", err)
	}
	for _, t := range topics {
		if !message.ValidTopic(t.Name()) {
			s.log.Warn("ignoring unknown dir in consume queues", "dir", t.Name())
			continue
		}
		ids, err := os.ReadDir(filepath.Join(root, t.Name()))
		if err != nil {
			return fmt.Errorf("storage: read consume queues: %w", err)
		}
		for _, id := range ids {
			n, err := parseQueueID(id.Name())
			if err != nil || n >= s.cfg.MaxQueuesPerTopic {
				s.log.Warn("ignoring unknown dir in consume queues", "dir", filepath.Join(t.Name(), id.Name()))
				continue
			}
			k := queueKey{topic: t.Name(), id: n}
			q, err := openConsumeQueue(root, k, s.cfg.QueueEntriesPerFile)
			if err != nil {
				// Derived data: recovery rebuilds every queue.
				s.log.Warn("consume queue damaged, rebuilding the queues", "topic", k.topic, "queue", k.id, "err", err)
				s.rebuild = true
				continue
			}
			s.queues[k] = q
		}
	}
	return nil
}

func parseQueueID(s string) (int32, error) {
	var n int32
	if len(s) == 0 || len(s) > 9 {
		return 0, errors.New("bad queue id")
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, errors.New("bad queue id")
		}
		n = n*10 + c - '0'
	}
	return n, nil
}

func (s *Store) closeFiles() {
	s.queuesMu.Lock()
	for _, q := range s.queues {
		q.close()
	}
	s.queuesMu.Unlock()
	if s.index != nil {
		s.index.close()
	}
	if s.cl != nil {
		s.cl.close()
	}
	if s.lock != nil {
		s.lock.Close() // releases the flock
	}
}

// queue returns the consume queue of k, creating it when asked.
func (s *Store) queue(k queueKey, create bool) *consumeQueue {
	s.queuesMu.RLock()
	q := s.queues[k]
	s.queuesMu.RUnlock()
	if q != nil || !create {
		return q
	}
	s.queuesMu.Lock()
	defer s.queuesMu.Unlock()
	if q = s.queues[k]; q == nil {
		q = &consumeQueue{key: k, dir: queueDir(filepath.Join(s.cfg.Dir, consumeQueueDir), k), perFile: s.cfg.QueueEntriesPerFile}
		s.queues[k] = q
	}
	return q
}

// Append stores msgs as one batch, the one Raft entry raftIndex, with one
// write per segment touched (and one fdatasync in FlushSync mode). Queue
// and commitlog offsets are assigned in order, deterministically, so every
// replica appending the same batches holds the same bytes. Either every
// message of the batch is stored or, on error, none is visible: an invalid
// message rejects the whole batch before anything is written, and a failed
// write fails the store until it is reopened (recovery cuts the partial
// batch; see Err). raftIndex must rise above every index already appended:
// ErrStaleRaftIndex says the entry is already applied.
func (s *Store) Append(raftIndex uint64, msgs []message.Message) ([]AppendResult, error) {
	var records []byte
	for i := range msgs {
		var err error
		if records, err = s.EncodeRecord(records, &msgs[i]); err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
	}
	return s.AppendRecords(raftIndex, records, nil)
}

// CheckMessage tells whether Append would take m: a legal topic, a queue id
// in range, fields that fit, a record within MaxMessageSize. Callers that
// merge several requests into one batch check each message first, so one
// bad message cannot fail the others.
func (s *Store) CheckMessage(m *message.Message) error {
	_, err := s.check(m)
	return err
}

func (s *Store) check(m *message.Message) (int, error) {
	size, err := message.Size(m)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrInvalidMessage, err)
	}
	if size > s.cfg.MaxMessageSize {
		return 0, fmt.Errorf("%w: %w: record of %d bytes, limit %d", ErrInvalidMessage, ErrMessageTooLarge, size, s.cfg.MaxMessageSize)
	}
	if m.QueueID < 0 || m.QueueID >= s.cfg.MaxQueuesPerTopic {
		return 0, fmt.Errorf("%w: queue id %d out of range [0, %d)", ErrInvalidMessage, m.QueueID, s.cfg.MaxQueuesPerTopic)
	}
	return size, nil
}

func appendBlank(buf []byte, size int64) []byte {
	start := len(buf)
	buf = slices.Grow(buf, message.BlankSize)[:start+message.BlankSize]
	binary.BigEndian.PutUint32(buf[start:], uint32(size))
	binary.BigEndian.PutUint32(buf[start+4:], message.BlankMagic)
	return buf
}

// syncWrites makes what was written durable before an append returns, in
// FlushSync mode; a failure fails the store. The caller holds appendMu.
func (s *Store) syncWrites() error {
	if s.cfg.FlushMode != FlushSync {
		return nil
	}
	if err := s.cl.flush(); err != nil {
		s.fail(err)
		return err
	}
	return nil
}

// writeBatch encodes the placed records and writes them with one write
// per segment touched (blank records fill the ends of segments left).
func (s *Store) writeBatch(raftIndex uint64, records []byte, results []AppendResult, pos int64) error {
	segSize := s.cfg.SegmentSize
	buf, chunks := s.encBuf[:0], s.chunks[:0]
	cur := chunk{pos: pos}
	src := 0
	for i := range results {
		r := &results[i]
		if r.Offset != pos { // the rest of pos's segment is left blank
			if left := pos - pos%segSize + segSize - pos; left >= message.BlankSize {
				buf = appendBlank(buf, left)
			}
			cur.to = len(buf)
			if cur.to > cur.from {
				chunks = append(chunks, cur)
			}
			pos = r.Offset
			cur = chunk{pos: pos, from: len(buf)}
		}
		var flag uint32
		if i == len(results)-1 {
			flag = message.SysFlagBatchEnd
		}
		if r.frame {
			flag |= message.SysFlagFrame
		}
		if r.deletes {
			flag |= message.SysFlagDeletesTopic
		}
		// A producer's send keeps its mark, so that a record read back as
		// stored (the Raft log over the commitlog) is still a retry to
		// deduplicate where it is applied.
		flag |= message.HeaderSysFlag(records[src:]) & message.SysFlagDedup
		at := len(buf)
		buf = append(buf, records[src:src+int(r.Size)]...)
		message.Fill(buf[at:at+int(r.Size)], raftIndex, pos, r.QueueOffset, flag)
		src += int(r.Size)
		pos += int64(r.Size)
	}
	// The end marker and page padding are not part of the log: the next
	// batch overwrites them.
	buf = append(buf, tailZeros[:s.cl.tailPad(pos)]...)
	cur.to = len(buf)
	chunks = append(chunks, cur)
	if cap(buf) <= 16<<20 { // keep the buffer unless one huge batch grew it
		s.encBuf = buf
	}
	s.chunks = chunks

	for _, c := range chunks {
		if err := s.cl.write(c.pos, buf[c.from:c.to]); err != nil {
			return err
		}
	}
	s.cl.writePos.Store(pos)
	return nil
}

// dispatchBatch puts the batch's consume queue entries and key index
// entries. indexLast becomes the offset of the last record indexed, if any.
func (s *Store) dispatchBatch(views []message.View, results []AppendResult, indexLast *int64) error {
	for _, r := range results {
		tagHash := r.TagHash
		if r.Dropped {
			tagHash = message.DroppedTagHash
		}
		if err := s.putQueueEntry(queueKey{r.Topic, r.QueueID}, r, tagHash); err != nil {
			return err
		}
	}
	return s.indexBatch(views, results, indexLast)
}

// putQueueEntry puts the consume queue entry of the record r of queue k.
func (s *Store) putQueueEntry(k queueKey, r AppendResult, tagHash int64) error {
	return s.queue(k, true).put(r.QueueOffset, cqEntry{offset: r.Offset, size: r.Size, tagHash: tagHash}, s.rebuilding)
}

// indexBatch adds the batch's records to the key index. indexLast becomes
// the offset of the last record indexed, if any.
func (s *Store) indexBatch(views []message.View, results []AppendResult, indexLast *int64) error {
	keys := s.keyBuf[:0]
	for i := range views {
		v := &views[i]
		if results[i].Dropped {
			continue
		}
		n := len(keys)
		keys = appendIndexKeys(keys, v.Keys, v.UniqKey, results[i].Offset, v.StoreTime)
		if len(keys) > n {
			*indexLast = results[i].Offset
		}
	}
	if cap(keys) <= 1<<16 { // keep the buffer unless one huge batch grew it
		s.keyBuf = keys
	}
	return s.index.put(keys)
}

// appendIndexKeys appends the keys, then the unique key, of the record at
// commitlog offset off.
func appendIndexKeys[T string | []byte](dst []indexKey, keys []T, uniqKey T, off, storeTime int64) []indexKey {
	for _, k := range keys {
		if len(k) > 0 {
			dst = append(dst, indexKey{keyHash(k), off, storeTime})
		}
	}
	if len(uniqKey) > 0 {
		dst = append(dst, indexKey{keyHash(uniqKey), off, storeTime})
	}
	return dst
}

// dispatch adds a record read back from the commitlog to its consume queue
// and to the key index (RocketMQ's ReputMessageService; Append does the
// same for new records, around its sync).
func (s *Store) dispatch(k queueKey, r AppendResult, tagHash int64, keys []string, uniqKey string, storeTime int64) (bool, error) {
	if err := s.putQueueEntry(k, r, tagHash); err != nil {
		return false, err
	}
	var buf [4]indexKey
	ks := appendIndexKeys(buf[:0], keys, uniqKey, r.Offset, storeTime)
	return len(ks) > 0, s.index.put(ks)
}

// fail makes err the store's failure, unless it has one already.
func (s *Store) fail(err error) {
	s.failMu.Lock()
	defer s.failMu.Unlock()
	if s.failed == nil {
		s.failed = err
		close(s.failedC)
	}
}

// Err is the store's failure, nil while it has none: the first commitlog
// write or sync, key index or consume queue update, or topic removal that
// failed. The error names the file (an *os.PathError is in its chain when
// a system call failed). A failed store refuses appends, flushes,
// checkpoints and topic deletions with ErrFailed wrapping this error, until
// it is reopened and recovery has cut what the failure left half written:
// after a failed fdatasync nothing tells which written pages reached the
// disk (a second fdatasync may succeed without them), so no flush is
// believed again. The store does not log its failure: its owner does, told
// by Failed.
func (s *Store) Err() error {
	s.failMu.Lock()
	defer s.failMu.Unlock()
	return s.failed
}

// Failed is closed when the store fails (see Err): a failure of the
// background flusher has no caller to return to.
func (s *Store) Failed() <-chan struct{} { return s.failedC }

func (s *Store) errFailed() error {
	if err := s.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrFailed, err)
	}
	return nil
}

// WrittenRaftIndex is the Raft index of the last entry dispatched: what
// the checkpoint covers once flushed, and what a snapshot may say the
// store holds. AppendRecords writes and dispatches an entry at once (a
// retry's records too, dropped), so there it equals LastRaftIndex once an
// append returns; entries stored and not yet dispatched (StoreEntries,
// StoreRecords) are above it.
func (s *Store) WrittenRaftIndex() uint64 {
	return s.dispatched.Load().raftIndex
}

// LastRaftIndex is the Raft index of the last entry the store holds,
// dispatched or only stored: the next must come from a later entry. With
// AppendRecords alone it is the last applied, and after a restart the
// state machine skips entries at or below it (with RaftLog, at or below
// WrittenRaftIndex: the stored ones it applies).
func (s *Store) LastRaftIndex() uint64 {
	s.appendMu.Lock()
	defer s.appendMu.Unlock()
	return s.lastRaftIndex
}

// CommitlogOffsets returns the commitlog's first offset and the end of
// what is dispatched (StoreRecords' entries count once dispatched).
func (s *Store) CommitlogOffsets() (min, max int64) {
	return s.cl.minOffset(), s.dispatched.Load().dispatched
}

// QueueOffsets returns the first readable and the next queue offset of a
// queue; a queue never written has 0, 0.
func (s *Store) QueueOffsets(topic string, queueID int32) (min, max int64) {
	q := s.queue(queueKey{topic, queueID}, false)
	if q == nil {
		return 0, 0
	}
	return q.min.Load(), q.max.Load()
}

// QueueStart is where in the commitlog the queue's first message, at queue
// offset 0, is stored, while the queue still holds it: ok is false for a
// queue never written, and for one whose first messages retention has
// deleted.
func (s *Store) QueueStart(topic string, queueID int32) (pos int64, ok bool) {
	q := s.queue(queueKey{topic, queueID}, false)
	if q == nil || q.min.Load() != 0 || q.max.Load() == 0 {
		return 0, false
	}
	q.mu.RLock()
	e, ok := q.at(0)
	q.mu.RUnlock()
	if !ok || e.offset < s.cl.minOffset() {
		return 0, false
	}
	return e.offset, true
}

// Flush makes everything appended so far durable and writes a checkpoint.
func (s *Store) Flush() error {
	if s.closed.Load() {
		return ErrClosed
	}
	return s.checkpoint()
}

// checkpoint flushes the commitlog, then the consume queues and index up to
// the last dispatched batch, then records that position.
func (s *Store) checkpoint() error {
	s.cpMu.Lock()
	defer s.cpMu.Unlock()
	if err := s.errFailed(); err != nil {
		return err
	}
	st := s.dispatched.Load()
	if st == nil || *st == s.lastCP {
		return nil
	}
	if err := s.cl.flush(); err != nil {
		s.fail(err)
		return err
	}
	for _, q := range s.queueList() {
		if err := q.sync(); err != nil {
			return err
		}
	}
	if err := s.index.sync(); err != nil {
		return err
	}
	if err := writeCheckpoint(s.cfg.Dir, *st); err != nil {
		return err
	}
	s.lastCP = *st
	return nil
}

// Close stops the background work, flushes, writes a checkpoint and closes
// every file. It is safe to call more than once.
func (s *Store) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	close(s.stop)
	s.wg.Wait()
	s.appendMu.Lock()
	defer s.appendMu.Unlock()
	var err error
	if s.Err() == nil {
		err = s.checkpoint()
	}
	s.closeFiles()
	return err
}
