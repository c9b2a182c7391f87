package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
)

// checkpoint says how far the derived files (consume queues and index) are
// known durable: every record below dispatched has its entries fsynced, and
// the commitlog itself is fsynced at least that far. Recovery re-dispatches
// from dispatched on. The other fields describe the state at dispatched, so
// recovery can check that what it finds on disk matches:
//   - raftIndex and last: the Raft index and the commitlog offset of the
//     last batch's last record (last -1: no record);
//   - queueEntries: the sum over all consume queues of their next offset;
//   - indexLast: the commitlog offset of the newest record in the key index
//     (-1: none).
type checkpoint struct {
	dispatched   int64
	raftIndex    uint64
	last         int64
	queueEntries int64
	indexLast    int64
}

const (
	checkpointFile  = "checkpoint"
	checkpointMagic = 0x52514350 // "RQCP"
	checkpointSize  = 4 + 5*8 + 4
)

// emptyLog is the state of a log holding nothing from offset start on.
// castagnoli is the CRC32-C table of the checkpoint file.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func emptyLog(start int64) checkpoint {
	return checkpoint{dispatched: start, last: -1, indexLast: -1}
}

// readCheckpoint returns the checkpoint in dir; ok is false when there is
// none or it is damaged (recovery then rebuilds from the whole commitlog).
func readCheckpoint(dir string) (cp checkpoint, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, checkpointFile))
	if errors.Is(err, os.ErrNotExist) {
		return cp, false, nil
	}
	if err != nil {
		return cp, false, fmt.Errorf("storage: read checkpoint: %w", err)
	}
	be := binary.BigEndian
	if len(b) != checkpointSize || be.Uint32(b) != checkpointMagic ||
		be.Uint32(b[44:]) != crc32.Checksum(b[:44], castagnoli) {
		return cp, false, nil
	}
	return checkpoint{
		dispatched:   int64(be.Uint64(b[4:])),
		raftIndex:    be.Uint64(b[12:]),
		last:         int64(be.Uint64(b[20:])),
		queueEntries: int64(be.Uint64(b[28:])),
		indexLast:    int64(be.Uint64(b[36:])),
	}, true, nil
}

// writeCheckpoint replaces the checkpoint atomically and durably.
func writeCheckpoint(dir string, cp checkpoint) error {
	b := make([]byte, checkpointSize)
	be := binary.BigEndian
	be.PutUint32(b, checkpointMagic)
	be.PutUint64(b[4:], uint64(cp.dispatched))
	be.PutUint64(b[12:], cp.raftIndex)
	be.PutUint64(b[20:], uint64(cp.last))
	be.PutUint64(b[28:], uint64(cp.queueEntries))
	be.PutUint64(b[36:], uint64(cp.indexLast))
	be.PutUint32(b[44:], crc32.Checksum(b[:44], castagnoli))
	tmp := filepath.Join(dir, checkpointFile+".tmp")
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("storage: write checkpoint: %w", err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, checkpointFile))
	}
	if err != nil {
		return fmt.Errorf("storage: write checkpoint: %w", err)
	}
	return syncDir(dir)
}
