package broker

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/message"
	"github.com/raftmq/raftmq/storage"
)

// fsm is the broker group's Raft state machine: the store (commitlog,
// consume queues, index) and the metadata. The store is persistent, so
// applying is idempotent: an entry at or below the store's last Raft index
// changed the store already and only its metadata part is applied again
// (metadata is rebuilt from the snapshot plus the log on every start).
//
// An entry the store cannot take (a write error, a full disk) stops the
// state machine for good: it and every later entry are answered with the
// failure and touch neither the store nor the metadata, and no snapshot is
// taken (Raft would take the refused entries for applied), so the store
// never holds a later entry without an earlier one. The failure is not
// written down: after a restart the store's recovery cuts what the failed
// write left, and the entries from the failed one on are applied again
// from the Raft log.
type fsm struct {
	store *storage.Store
	meta  *metadata
	log   *slog.Logger
	// appended is told about every send batch stored (the hold service
	// wakes held pulls from it when this replica is the master).
	appended func(res []storage.AppendResult)
	// lastApplied is the last command entry applied, once its effects are
	// in place. Raft's applied_index counts an entry as soon as it hands
	// it to the state machine's goroutine (raft v1.7.3, processLogs), a
	// little before.
	lastApplied atomic.Uint64
	// catchUp copies the commitlog from a peer to commitlog offset to,
	// where Raft entry index ends (see catchup.go).
	catchUp func(to int64, index uint64) error
	// dispatchMode: the store is the Raft log (entrylog.go), so an
	// entry's records are in the commitlog before it is applied, and
	// applying dispatches them (storage.DispatchRecords) rather than
	// writing them.
	dispatchMode bool
	// groupLog is the group's Raft log place as declared, a
	// pb.RaftLogPlace (raftlogplace.go); read by DescribeBroker.
	groupLog atomic.Int32
	// moveIndex is the Raft index of the move's entry while the group's
	// place is RAFT_LOG_MOVING (raftlogmove.go), 0 otherwise; onMoveBegun
	// is called, and must not block, when this replica applies one.
	moveIndex   atomic.Uint64
	onMoveBegun func()
	// pausedRefusals counts the entries refused for the pause
	// (refusePaused).
	pausedRefusals atomic.Uint64

	// failure stops the state machine (see fail); stopped is closed with
	// it, and onFail called once, from the goroutine that recorded it. It
	// must not block: in Apply, Raft waits for it.
	failure atomic.Pointer[storeFailure]
	stopped chan struct{}
	onFail  func()
}

// storeFailure is why a replica's state machine stopped.
type storeFailure struct {
	err    error  // the store's first failure; it names the file
	stored uint64 // the Raft index of the last entry the store holds
}

func (sf *storeFailure) Error() string {
	return fmt.Sprintf("store failed after raft index %d: %v", sf.stored, sf.err)
}

func (sf *storeFailure) Unwrap() error { return sf.err }

// fail stops the state machine for err, unless it stopped already, and
// logs why, once: the store's first failure (err may be a later refusal
// wrapping it) with the file it names. It returns the failure that stopped
// it.
func (f *fsm) fail(err error) *storeFailure {
	if sf := f.failure.Load(); sf != nil {
		return sf
	}
	if serr := f.store.Err(); serr != nil {
		err = serr
	}
	sf := &storeFailure{err: err, stored: f.store.LastRaftIndex()}
	if !f.failure.CompareAndSwap(nil, sf) {
		return f.failure.Load()
	}
	attrs := []any{"err", err, "stored_raft_index", sf.stored}
	if pe := (*os.PathError)(nil); errors.As(err, &pe) {
		attrs = append([]any{"file", pe.Path}, attrs...)
	}
	f.log.Error("store failed: this replica applies no more of the Raft log and leaves its group's voting until it is restarted", attrs...)
	close(f.stopped)
	if f.onFail != nil {
		f.onFail()
	}
	return sf
}

// LogFailed is Raft's word that this replica's own Raft log could not hold
// an entry (cluster.LogFailer): the replica stops as when its store fails,
// applying nothing more.
func (f *fsm) LogFailed(err error) any { return &applyResult{err: f.fail(err)} }

// failed is the failure that stopped the state machine, nil while none.
func (f *fsm) failed() *storeFailure { return f.failure.Load() }

// sendRecordsEntry is the first byte of a send entry: the records of the
// messages follow, as the master encoded them (storage.EncodeRecord, with
// its store time stamped in), and every replica appends those bytes as
// they are (storage.AppendRecords). Every other entry is a protobuf
// RaftCommand, whose first byte is a field tag, and no tag is 0xFF (its
// wire type, 7, does not exist). Sends were RaftCommand_Send entries
// before: those still in a log are applied as they were (applySend), and
// the schedule service still writes them, to carry its cursors with the
// messages it moves.
const sendRecordsEntry byte = 0xFF

// applyResult is what Apply returns for a send entry; the leader hands it
// back to the senders.
type applyResult struct {
	results []storage.AppendResult
	err     error
	ended   []bool // a transaction update: which of its ends applied
	// refused: a sequenced entry's sends the producer table refused (by
	// their place in the entry), nil when none was.
	refused []error
	// producer: what an InitProducer issued, or why it did not (err is
	// for store failures only).
	producer struct {
		id      int64
		epoch   int32
		refused error
	}
}

func (f *fsm) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	defer f.lastApplied.Store(l.Index)
	if sf := f.failed(); sf != nil {
		return &applyResult{err: sf}
	}
	if err := f.store.Err(); err != nil { // the store's flusher failed
		return &applyResult{err: f.fail(err)}
	}
	if len(l.Data) > 0 && (l.Data[0] == sendRecordsEntry || l.Data[0] == sequencedEntry) && f.moving() {
		return f.refusePaused(l, nil)
	}
	if len(l.Data) > 0 && l.Data[0] == sendRecordsEntry {
		if l.Index <= f.store.WrittenRaftIndex() {
			return &applyResult{}
		}
		return f.applyRecords(l.Index, l.Data[1:])
	}
	if len(l.Data) > 0 && l.Data[0] == sequencedEntry {
		return f.applySequenced(l.Index, l.Data[1:])
	}
	cmd, err := decodeCommand(l.Data)
	if err != nil {
		return f.undecodable(l.Index, err)
	}
	// Store side effects of an entry at or below what the store
	// dispatched happened before the restart. (With AppendRecords that is
	// also the last entry written; with the store as the Raft log, the
	// entries after it are stored, not applied.)
	fresh := l.Index > f.store.WrittenRaftIndex()
	if writesCommitlog(cmd) && f.moving() {
		return f.refusePaused(l, cmd)
	}
	switch c := cmd.Command.(type) {
	case *pb.RaftCommand_Send:
		if !f.meta.scheduleAt(c.Send.ScheduleFrom) {
			// A move read from cursors another move has passed since:
			// the same messages, moved once already. Records the Raft
			// log stored are dispatched dropped.
			if f.dispatchMode && fresh && len(c.Send.Records) > 0 {
				if r := f.dropAll(l.Index, c.Send.Records); r.err != nil {
					return r
				}
			}
			return &applyResult{err: errStaleMove}
		}
		if !fresh {
			f.meta.setScheduleOffsets(c.Send.ScheduleOffsets)
			return &applyResult{}
		}
		r := f.applySend(l.Index, c.Send)
		if r.err == nil {
			f.meta.setScheduleOffsets(c.Send.ScheduleOffsets)
		}
		return r
	case *pb.RaftCommand_UpsertTopic:
		f.meta.upsertTopic(c.UpsertTopic)
	case *pb.RaftCommand_DeleteTopic:
		if fresh {
			if err := f.deleteTopic(l.Index, c.DeleteTopic); err != nil {
				return &applyResult{err: f.fail(err)}
			}
		}
		f.meta.deleteTopic(c.DeleteTopic)
	case *pb.RaftCommand_CommitOffsets:
		f.meta.commitOffsets(c.CommitOffsets)
	case *pb.RaftCommand_UpsertGroup:
		f.meta.upsertGroup(c.UpsertGroup)
	case *pb.RaftCommand_DeleteGroup:
		f.meta.deleteGroup(c.DeleteGroup)
	case *pb.RaftCommand_Announce:
		if err := f.declareRaftLog(c.Announce.RaftLog); err != nil {
			return &applyResult{err: f.fail(err)}
		}
		f.meta.announce(c.Announce)
	case *pb.RaftCommand_Transactions:
		return f.applyTransactions(l.Index, c.Transactions, fresh)
	case *pb.RaftCommand_MoveRaftLog:
		return f.applyMove(l.Index, c.MoveRaftLog.Step)
	case *pb.RaftCommand_InitProducer:
		r := &applyResult{}
		r.producer.id, r.producer.epoch, r.producer.refused = f.meta.producers.init(c.InitProducer.ProducerId, c.InitProducer.StoreTimestamp)
		return r
	default:
		f.log.Error("unknown raft command", "index", l.Index)
	}
	return nil
}

// deleteTopic removes a topic's queues as entry index applies its
// deletion: the store appends a frame that says so, or, when it is the
// Raft log, dispatches the entry's own frame, which says so since the
// entry was stored (entrylog.go deletedTopic). Then a checkpoint: a
// restart begins after the deletion instead of finding the queues
// disagree with the commitlog and rebuilding them all.
func (f *fsm) deleteTopic(index uint64, topic string) error {
	var err error
	if f.dispatchMode {
		err = f.store.DispatchEntry(index)
	} else {
		err = f.store.DeleteTopic(index, topic)
	}
	if err == nil {
		err = f.store.Flush()
	}
	return err
}

func (f *fsm) applySend(index uint64, b *pb.SendBatch) *applyResult {
	if len(b.Records) > 0 {
		return f.applyRecords(index, b.Records)
	}
	msgs := make([]message.Message, len(b.Messages))
	for i, sm := range b.Messages {
		msgs[i] = messageFromPB(sm.Message, sm.Message.Topic, sm.QueueId)
		msgs[i].StoreTime = b.StoreTimestamp
	}
	if f.dispatchMode { // no broker that keeps its Raft log in the commitlog writes these
		return &applyResult{err: f.fail(fmt.Errorf("broker: raft entry %d: a send of messages, not records, in a Raft log kept in the commitlog", index))}
	}
	return f.stored(f.store.Append(index, msgs))
}

// applyTransactions applies ends and check-backs of transactions: the
// half table first, then the records of the ends (a commit's message),
// those of an end that did not apply dropped, so an end proposed twice
// stores its message once.
func (f *fsm) applyTransactions(index uint64, u *pb.TransactionUpdate, fresh bool) *applyResult {
	ended := f.meta.halves.apply(u)
	var (
		records []byte
		drop    []bool
	)
	for i, e := range u.Ends {
		n, err := message.Count(e.Records)
		if err != nil {
			r := f.undecodable(index, fmt.Errorf("transaction end %d: %w", i, err))
			r.ended = ended
			return r
		}
		records = append(records, e.Records...)
		for range n {
			drop = append(drop, !ended[i])
		}
	}
	if !fresh || len(records) == 0 {
		return &applyResult{ended: ended}
	}
	r := f.stored(f.write(index, records, drop))
	r.ended = ended
	return r
}

// applyRecords appends a send entry's records as the master encoded them.
func (f *fsm) applyRecords(index uint64, records []byte) *applyResult {
	return f.stored(f.write(index, records, nil))
}

// undecodable answers an entry that cannot be read. Every replica reads the
// same bytes (their checksum held), so each refuses it alike and goes on;
// but when the store is the Raft log the entry's records are stored and
// only its apply could dispatch them, so the state machine stops instead.
func (f *fsm) undecodable(index uint64, err error) *applyResult {
	err = fmt.Errorf("broker: raft entry %d: %w", index, err)
	if f.dispatchMode {
		return &applyResult{err: f.fail(err)}
	}
	f.log.Error("undecodable raft entry", "index", index, "err", err)
	return &applyResult{err: err}
}

// write puts an entry's records in the store: appends them, or, when the
// store is the Raft log, dispatches them where they were stored.
func (f *fsm) write(index uint64, records []byte, drop []bool) ([]storage.AppendResult, error) {
	if f.dispatchMode {
		return f.store.DispatchRecords(index, records, drop)
	}
	return f.store.AppendRecords(index, records, drop)
}

// dropAll writes an entry's records, every one dropped.
func (f *fsm) dropAll(index uint64, records []byte) *applyResult {
	n, err := message.Count(records)
	if err != nil {
		return &applyResult{err: f.fail(fmt.Errorf("broker: raft entry %d: %w", index, err))}
	}
	return f.stored(f.write(index, records, slices.Repeat([]bool{true}, n)))
}

// applySequenced applies a sequenced entry (sendentry.go): the producer
// table decides each idempotent producer's send (producers.go), on every
// replica and at every replay alike, and the sends it does not find
// stored are appended. The table's decisions depend on nothing but the
// table and the entry; what only a fresh entry does, answering a retry
// with its stored copies and letting the unique keys decide below the
// sequence window, changes no state but the store, so a replay that skips
// the store rebuilds the same table.
func (f *fsm) applySequenced(index uint64, data []byte) *applyResult {
	sends, records, err := decodeSequenced(data)
	var parts [][]byte
	if err == nil {
		parts, err = splitSends(sends, records)
	}
	if err != nil {
		return f.undecodable(index, err)
	}
	now := message.HeaderStoreTime(records)
	verdicts := make([]seqVerdict, len(sends))
	for i, s := range sends {
		if s.producer != 0 {
			verdicts[i] = f.meta.producers.sequence(now, s)
		}
	}
	if index <= f.store.WrittenRaftIndex() {
		return &applyResult{}
	}
	return f.appendSequenced(index, now, verdicts, sends, records, parts)
}

// appendSequenced appends a sequenced entry's records, those of the sends
// the table did not let through dropped, and answers every send: its
// copies' offsets, the stored copies' for a retry (found by their unique
// keys after the append, so a retry that came in the same entry as its
// first copy finds it too), or why it was refused.
func (f *fsm) appendSequenced(index uint64, now int64, verdicts []seqVerdict, sends []sendSeq, records []byte, parts [][]byte) *applyResult {
	out := &applyResult{}
	kept := make([]bool, len(sends))
	copies := make([][]storage.AppendResult, len(sends)) // found by key, for a send below the window
	all := true
	for i, v := range verdicts {
		switch v {
		case seqNew:
			kept[i] = true
		case seqOld: // below the window: stored unless a copy has its keys
			var found bool
			copies[i], found = f.storedCopies(now, parts[i])
			kept[i] = !found
		}
		all = all && kept[i]
	}
	var drop []bool // a mark for each record, when a send is not kept
	if !all {
		for i := range sends {
			drop = append(drop, slices.Repeat([]bool{!kept[i]}, sends[i].n)...)
		}
	}
	r := f.stored(f.write(index, records, drop))
	if r.err != nil {
		return r
	}
	res := r.results
	for i, v := range verdicts {
		n := sends[i].n
		mine := res[:n]
		res = res[n:]
		switch {
		case kept[i]:
			out.results = append(out.results, mine...)
			continue
		case v == seqOld:
			out.results = append(out.results, copies[i]...)
			continue
		case v == seqStored:
			if c, found := f.storedCopies(now, parts[i]); found {
				out.results = append(out.results, c...)
				continue
			}
			out.refuse(i, len(sends), statusError(codes.AlreadyExists, pb.ErrorReason_SEQUENCE_STORED,
				"stored before; its records carry no unique key to find the copies by", nil))
		default:
			out.refuse(i, len(sends), v.refusal())
		}
		out.results = append(out.results, make([]storage.AppendResult, n)...) // the batcher answers with the error
	}
	return out
}

// refuse records that send i of n was refused with err.
func (r *applyResult) refuse(i, n int, err error) {
	if r.refused == nil {
		r.refused = make([]error, n)
	}
	r.refused[i] = err
}

// refusal is why send i of the entry was refused, nil if it was not.
func (r *applyResult) refusal(i int) error {
	if r.refused == nil {
		return nil
	}
	return r.refused[i]
}

// storedCopies finds, by their unique keys, the stored copies of a retried
// send's records (from the last dedup window), and whether every one was
// found.
func (f *fsm) storedCopies(now int64, records []byte) ([]storage.AppendResult, bool) {
	var out []storage.AppendResult
	window := f.meta.producers.window
	for p := 0; p < len(records); {
		size, v, err := message.Frame(records[p:], true)
		if err != nil || len(v.UniqKey) == 0 {
			return nil, false
		}
		c, ok := f.store.StoredWithKey(string(v.Topic), string(v.UniqKey), now-window, now)
		if !ok {
			return nil, false
		}
		out = append(out, c)
		p += size
	}
	return out, true
}

// stored is the outcome of an append to the store.
func (f *fsm) stored(res []storage.AppendResult, err error) *applyResult {
	if err != nil {
		// The master checked every message before proposing, so this is
		// a failure of this replica's store (or a configuration that
		// differs from the master's): going on without the entry would
		// make this commitlog differ from the others.
		return &applyResult{err: f.fail(err)}
	}
	if f.appended != nil {
		f.appended(res)
	}
	return &applyResult{results: res}
}

// Snapshot captures the metadata and how far the store is; the commitlog
// itself is not in the snapshot (a replica that needs it copies it from a
// peer).
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	if sf := f.failed(); sf != nil {
		return nil, sf
	}
	s := &pb.BrokerSnapshot{StoreRaftIndex: f.store.WrittenRaftIndex(), GroupRaftLog: f.groupRaftLog(), RaftLogMoveIndex: f.moveIndex.Load()}
	_, s.CommitlogMaxOffset = f.store.CommitlogOffsets()
	f.meta.snapshot(s)
	return &fsmSnapshot{snap: s, store: f.store, raftLog: f.dispatchMode}, nil
}

// Restore replaces the metadata with the snapshot's and, when the store is
// behind what the snapshot describes, copies the missing commitlog from a
// peer.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	if sf := f.failed(); sf != nil {
		return sf
	}
	data, err := io.ReadAll(rc)
	if err != nil {
		return fmt.Errorf("broker: read snapshot: %w", err)
	}
	var s pb.BrokerSnapshot
	if err := proto.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("broker: decode snapshot: %w", err)
	}
	if err := f.restoreRaftLog(s.GroupRaftLog, s.RaftLogMoveIndex); err != nil {
		return f.fail(err)
	}
	f.meta.restore(&s)
	if f.dispatchMode {
		if cluster.SnapshotAtStart(rc) {
			return f.indexFrom(&s)
		}
		return f.install(&s)
	}
	if s.StoreRaftIndex > f.store.WrittenRaftIndex() {
		return f.copyTo(s.CommitlogMaxOffset, s.StoreRaftIndex)
	}
	return nil
}

// copyTo copies the commitlog from a peer to offset to, where Raft entry
// index ends (catchup.go).
func (f *fsm) copyTo(to int64, index uint64) error {
	if f.catchUp == nil {
		return errors.New("broker: store is behind the snapshot and cannot catch up")
	}
	return f.catchUp(to, index)
}

// indexFrom readies a store that is the Raft log, at start, for the
// entries after its own snapshot s, which Raft reads next: the entry index
// from where the snapshot's commitlog ended, and, when recovery found no
// checkpoint to dispatch from, what the snapshot covers dispatched. A
// store that stays behind the snapshot is refused: its copy from a peer
// (install) did not finish, and Raft tries an older snapshot.
func (f *fsm) indexFrom(s *pb.BrokerSnapshot) error {
	if err := f.store.IndexEntries(s.CommitlogMaxOffset); err != nil {
		return fmt.Errorf("broker: index the raft entries after the snapshot: %w", err)
	}
	through := max(s.CommitlogMaxOffset, s.RaftLogEnd)
	if _, end := f.store.CommitlogOffsets(); end < through {
		if err := f.store.DispatchStored(through); err != nil {
			return fmt.Errorf("broker: dispatch what the snapshot covers: %w", err)
		}
	}
	if _, end := f.store.CommitlogOffsets(); end < through || f.store.WrittenRaftIndex() < s.StoreRaftIndex {
		return fmt.Errorf("broker: the store holds the commitlog to offset %d (Raft index %d), short of its snapshot's %d (%d)", end, f.store.WrittenRaftIndex(), through, max(s.StoreRaftIndex, s.RaftLogIndex))
	}
	return nil
}

// install readies a store that is the Raft log for a snapshot s that a
// leader sent: what it stored and did not dispatch is taken back (drops
// are written at dispatch, and an old leader's entries there may be
// contradicted), the commitlog is copied from a peer to where the
// snapshot's own entry ends, and the entries after it, which Raft sends
// next, go on from there. Raft then deletes the member's whole log
// (installSnapshot, removeOldLogs): the index starts empty.
func (f *fsm) install(s *pb.BrokerSnapshot) error {
	if s.RaftLogEnd == 0 {
		return fmt.Errorf("broker: the snapshot of Raft index %d does not say where its entry ends in the commitlog (a replica whose Raft log is not its commitlog took it)", s.StoreRaftIndex)
	}
	if err := f.store.CutStored(f.store.WrittenRaftIndex()); err != nil {
		return fmt.Errorf("broker: take back the entries stored and not dispatched: %w", err)
	}
	switch _, end := f.store.CommitlogOffsets(); {
	case end > s.RaftLogEnd:
		return fmt.Errorf("broker: the store is dispatched to commitlog offset %d (Raft index %d), past the snapshot's entry %d, which ends at %d", end, f.store.WrittenRaftIndex(), s.RaftLogIndex, s.RaftLogEnd)
	case end < s.RaftLogEnd:
		if err := f.copyTo(s.RaftLogEnd, s.RaftLogIndex); err != nil {
			return err
		}
	}
	// A restart finds the copy dispatched (indexFrom).
	if err := f.store.Flush(); err != nil {
		return fmt.Errorf("broker: flush the copied commitlog: %w", err)
	}
	if err := f.store.IndexEntries(s.RaftLogEnd); err != nil {
		return fmt.Errorf("broker: index the raft entries after the snapshot: %w", err)
	}
	return nil
}

type fsmSnapshot struct {
	snap    *pb.BrokerSnapshot
	store   *storage.Store
	raftLog bool // the store is the Raft log (entrylog.go)
}

// Persist makes the store durable up to (at least) the snapshot before the
// snapshot exists: once it does, Raft may drop the log entries it covers.
func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	err := s.raftLogEnd(sink.ID())
	if err == nil {
		err = s.store.Flush()
	}
	var data []byte
	if err == nil {
		data, err = proto.Marshal(s.snap)
	}
	if err == nil {
		_, err = sink.Write(data)
	}
	if err != nil {
		sink.Cancel()
		return fmt.Errorf("broker: persist snapshot: %w", err)
	}
	return sink.Close()
}

// raftLogEnd records, when the store is the Raft log, the snapshot's Raft
// index and where that entry ends in the commitlog (storage.EntryEnd): a
// replica that installs the snapshot copies to there (fsm.install). The
// state machine learns the index only from the snapshot's ID, which
// Raft's snapshot stores make term-index-milliseconds (raft v1.7.3
// file_snapshot.go snapshotName, inmem_snapshot.go).
func (s *fsmSnapshot) raftLogEnd(id string) error {
	if !s.raftLog {
		return nil
	}
	parts := strings.Split(id, "-")
	if len(parts) != 3 {
		return fmt.Errorf("snapshot id %q is not term-index-time", id)
	}
	index, err := strconv.ParseUint(parts[1], 10, 64)
	if err != nil {
		return fmt.Errorf("snapshot id %q: %w", id, err)
	}
	end, err := s.store.EntryEnd(index)
	if err != nil {
		return fmt.Errorf("snapshot %s: %w", id, err)
	}
	s.snap.RaftLogIndex, s.snap.RaftLogEnd = index, end
	return nil
}

func (s *fsmSnapshot) Release() {}
