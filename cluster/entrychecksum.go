package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// Every entry the broker proposes carries a CRC-32C of its data in the
// entry's Extensions, which hashicorp/raft replicates with the entry and
// raft-wal stores with it. raft-wal checks a CRC only over a tail
// segment's last batch, when it opens it (v0.4.2, segment/writer.go
// recoverTail): a byte flipped inside any other entry is read back as if
// it were sound. The checksum catches it where an entry is read:
//   - a member applying an entry (checkedFSM) refuses a damaged one and
//     stops, as on a failed write (LogFailer), with one error naming the
//     segment file: its own log is damaged, and applying on would make its
//     state differ from the others';
//   - a leader reading an entry to send to a follower (checkedLog) never
//     sends a damaged one (Raft is told it is compacted away, and would
//     send a snapshot instead) and stops (RaftNode.LogDamaged), so that a
//     member whose log is sound takes over rather than the damage
//     spreading.
// Entries without a checksum (Raft's own, and those written before it)
// are not checked.

// entryChecksumV1 tags Extensions holding a CRC-32C of the entry's data.
const entryChecksumV1 = 1

var crc32c = crc32.MakeTable(crc32.Castagnoli)

// ErrDamagedEntry: an entry read from the Raft log does not match its
// checksum.
var ErrDamagedEntry = errors.New("raft log entry fails its checksum: the Raft log is damaged")

// Apply proposes data as a command entry with its checksum (see above).
func (n *RaftNode) Apply(data []byte, timeout time.Duration) raft.ApplyFuture {
	return n.Raft.ApplyLog(raft.Log{Data: data, Extensions: entryChecksum(data)}, timeout)
}

func entryChecksum(data []byte) []byte {
	ext := make([]byte, 5)
	ext[0] = entryChecksumV1
	binary.BigEndian.PutUint32(ext[1:], crc32.Checksum(data, crc32c))
	return ext
}

// entrySound says whether l matches its checksum; an entry without one is
// taken as it is.
func entrySound(l *raft.Log) bool {
	if len(l.Extensions) != 5 || l.Extensions[0] != entryChecksumV1 {
		return true
	}
	return binary.BigEndian.Uint32(l.Extensions[1:]) == crc32.Checksum(l.Data, crc32c)
}

// damagedEntryError names the entry and the file holding it: raft-wal's
// segment whose first index is the greatest at or below it (segment files
// are named by their first index, zero-padded).
func damagedEntryError(walDir string, l *raft.Log) error {
	file := walDir
	if segs, err := filepath.Glob(filepath.Join(walDir, "*.wal")); err == nil && len(segs) > 0 {
		sort.Strings(segs)
		want := fmt.Sprintf("%020d", l.Index)
		i := sort.Search(len(segs), func(i int) bool {
			base := filepath.Base(segs[i])
			return len(base) >= len(want) && base[:len(want)] > want
		})
		if i > 0 {
			file = segs[i-1]
		}
	}
	return &os.PathError{Op: fmt.Sprintf("read raft log entry %d (term %d)", l.Index, l.Term), Path: file, Err: ErrDamagedEntry}
}

// checkedFSM refuses to apply a damaged entry: the member stops instead
// (LogFailer), or, for a state machine without it, the entry's response
// is the error.
type checkedFSM struct {
	raft.FSM
	walDir string
	failer LogFailer // the broker's state machine under the wrappers, or nil
}

func (f checkedFSM) Apply(l *raft.Log) any {
	if !entrySound(l) {
		err := damagedEntryError(f.walDir, l)
		if f.failer != nil {
			return f.failer.LogFailed(err)
		}
		return err
	}
	return f.FSM.Apply(l)
}

// checkedLog is the member's log store as its replication reads it: while
// the member leads, a damaged entry reads as not found, so that it is never
// sent, and the member is told to stop (Damaged): its log cannot serve the
// followers, and a leader whose log is sound takes over. Otherwise a
// damaged entry is returned as it is, for checkedFSM to stop on.
type checkedLog struct {
	raft.LogStore
	walDir  string
	leading atomic.Pointer[func() bool]

	once    sync.Once
	err     error         // the first damage read while leading; set before damaged closes
	damaged chan struct{} // closed on it
}

func newCheckedLog(inner raft.LogStore, walDir string) *checkedLog {
	return &checkedLog{LogStore: inner, walDir: walDir, damaged: make(chan struct{})}
}

// IsMonotonic passes the WAL's answer on (see leaderLog's).
func (c *checkedLog) IsMonotonic() bool {
	m, ok := c.LogStore.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

func (c *checkedLog) GetLog(index uint64, l *raft.Log) error {
	if err := c.LogStore.GetLog(index, l); err != nil {
		return err
	}
	if entrySound(l) {
		return nil
	}
	if f := c.leading.Load(); f != nil && (*f)() {
		err := damagedEntryError(c.walDir, l)
		c.once.Do(func() {
			c.err = err
			close(c.damaged)
		})
		return raft.ErrLogNotFound
	}
	return nil
}
