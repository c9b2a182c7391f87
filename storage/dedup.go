package storage

import (
	"bytes"
	"encoding/binary"

	"github.com/raftmq/raftmq/message"
)

// Deduplication of producers' retries (Config.DedupWindow). A producer
// gives every message a unique key (UNIQ_KEY, RocketMQ's client message
// id) and keeps it when it sends the message again after an unknown
// outcome: a timeout, a master that failed before answering. A record
// marked message.SysFlagDedup (the broker marks what producers send, and
// nothing it writes itself: retries sent back by consumers and moved
// timers keep their first copy's key) whose key a record stored in the
// window before it already has is written dropped (message.SysFlagDropped:
// no read returns it); the append answers with the stored record's
// offsets, as if it were that append. Only a
// copy on the same topic counts: a message sent on elsewhere with its key
// (a dead letter resent to its group's retry topic, a delivered message a
// consumer forwards) is a new message. NATS
// JetStream deduplicates by message id over a window the same way
// (Nats-Msg-Id, 2 minutes by default).
//
// The stored copies are found through the key index, which the store
// writes with every append and rebuilds from the commitlog at recovery, so
// every replica, and a replica restarted, decides alike. (Only retention
// could make replicas disagree: a replica whose disk-ratio retention
// deleted the segment holding a copy younger than the window would store
// the retry again. That needs a retained commitlog shorter than the window.)

// dupRef says what a record of a batch is a duplicate of.
type dupRef struct {
	dup    bool
	batch  int          // an earlier record of the batch, or -1
	stored AppendResult // the stored copy, when batch is -1
}

// duplicates returns, for each record of the batch, what it duplicates,
// or nil when none is a duplicate. A record dropped already (results) is
// neither a retry nor what a retry duplicates: its sender was refused.
func (s *Store) duplicates(records []byte, views []message.View, results []AppendResult) []dupRef {
	var out []dupRef
	seen := s.dedupSeen // unique key hash -> the first record with it in this batch
	clear(seen)
	window := s.cfg.DedupWindow.Milliseconds()
	for i, p := 0, 0; i < len(views); i++ {
		v, rec := views[i], records[p:]
		p += int(binary.BigEndian.Uint32(rec))
		if len(v.UniqKey) == 0 || message.HeaderSysFlag(rec)&message.SysFlagDedup == 0 || results[i].Dropped {
			continue
		}
		ref := dupRef{batch: -1}
		h := keyHash(v.UniqKey)
		if j, ok := seen[h]; ok && bytes.Equal(views[j].UniqKey, v.UniqKey) && bytes.Equal(views[j].Topic, v.Topic) {
			ref.dup, ref.batch = true, j
			if out != nil && out[j].dup { // the first is itself a retry
				ref = out[j]
			}
		} else {
			seen[h] = i
			ref.stored, ref.dup = s.storedWithKey(v.Topic, v.UniqKey, v.StoreTime-window, v.StoreTime)
		}
		if ref.dup {
			if out == nil {
				out = make([]dupRef, len(views))
			}
			out[i] = ref
		}
	}
	return out
}

// StoredWithKey finds the newest stored record of topic with unique key
// key and a store time in [begin, end] (unix ms): what a producer's retry
// is answered with, and where a transaction's commit asked again stored
// its message.
func (s *Store) StoredWithKey(topic, key string, begin, end int64) (AppendResult, bool) {
	if s.closed.Load() {
		return AppendResult{}, false
	}
	return s.storedWithKey([]byte(topic), []byte(key), begin, end)
}

// storedWithKey finds the newest stored record of topic with unique key
// key and a store time in [begin, end].
func (s *Store) storedWithKey(topic, key []byte, begin, end int64) (AppendResult, bool) {
	for _, off := range s.index.recent(key, 4, begin, end) {
		rec, err := s.cl.readRecord(off)
		if err != nil {
			continue
		}
		_, v, err := message.Frame(rec, true)
		if err != nil || !bytes.Equal(v.UniqKey, key) || !bytes.Equal(v.Topic, topic) {
			continue // another key with the same hash, or a copy sent elsewhere
		}
		return AppendResult{Offset: off, Size: int32(len(rec)), QueueOffset: message.HeaderQueueOffset(rec),
			Topic: string(v.Topic), QueueID: v.QueueID, TagHash: message.TagHash(v.Tags), Duplicate: true}, true
	}
	return AppendResult{}, false
}

// answerDuplicates answers each retry of an appended batch with the
// record it duplicates: the stored copy, or the result of an earlier
// record of the batch.
func answerDuplicates(results []AppendResult, dups []dupRef) {
	for i, d := range dups {
		switch {
		case !d.dup:
		case d.batch >= 0:
			results[i] = results[d.batch]
			results[i].Duplicate = true
		default:
			results[i] = d.stored
		}
	}
}
