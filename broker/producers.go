package broker

import (
	"errors"
	"math"
	"sort"
	"sync"

	"google.golang.org/grpc/codes"

	"github.com/raftmq/raftmq/cluster/pb"
)

// producerTable is idempotent producers' state, Kafka's design (KIP-98):
// the group issues a producer an id and an epoch (InitProducer, through
// Raft), the producer numbers its messages per topic and queue, and a send
// carries its producer, epoch and first sequence. A retry carries the same
// numbers; the state machine finds them stored already and answers with
// the first copy instead of storing it again, on whichever replica is the
// master by then.
//
// Per producer and queue the table keeps one past the highest sequence
// stored (next) and a bitmap of the seqWindow sequences below it. Unlike
// Kafka it does not require sequences in order: sends of one producer
// from many goroutines reach the master in any order (the SDK is safe for
// concurrent use, and a RocketMQ producer promises no order across
// concurrent sends either), and a send that failed for good leaves a gap.
// So a send whose sequences are all unseen is stored, one whose sequences
// are all seen is a retry, and a mix is refused. Below the window, where
// the bitmap no longer says, the records' unique keys decide, as for
// producers without ids (storage/dedup.go): the SDK sends both.
//
// A producer silent for longer than the window (DedupWindow) is
// forgotten. Expiry follows the newest store time applied (clock), never a
// replica's own clock, so every replica forgets alike; the table is in the
// snapshot. A new epoch (InitProducer with the id) fences the older ones
// and starts the producer's sequences afresh.
type producerTable struct {
	mu        sync.Mutex
	window    int64 // DedupWindow in ms
	max       int   // MaxProducers: ids remembered at once
	nextID    int64 // every id below it was issued
	clock     int64 // the newest store time applied (unix ms)
	producers map[int64]*producerState
}

// seqWindow is how many sequences below a queue's highest the table
// remembers one by one: a retry overtaken by more sends of its producer on
// its queue than this is decided by its unique keys.
const seqWindow = 64 * seqWords

const seqWords = 4

type producerState struct {
	epoch  int32
	last   int64 // store time of its last send or init
	queues map[seqQueue]*queueSeqs
}

type seqQueue struct {
	topic string
	queue int32
}

// queueSeqs: next is one past the highest sequence stored; bit i of seen
// (word i/64) says whether sequence next-1-i is stored.
type queueSeqs struct {
	next int64
	seen [seqWords]uint64
}

// sendSeq is what a send says of its producer: id (0: none), epoch, the
// first message's sequence, how many messages, on which topic and queue.
type sendSeq struct {
	producer int64
	epoch    int32
	first    int64
	n        int
	topic    string
	queue    int32
}

// seqVerdict is what the table makes of a send's sequences.
type seqVerdict uint8

const (
	seqNew     seqVerdict = iota // none stored: store it
	seqStored                    // all stored before: a retry, answered with the copies
	seqOld                       // below the window: the unique keys decide
	seqFenced                    // an epoch older than the producer's
	seqUnknown                   // an id or epoch never issued, or forgotten with the table full
	seqInvalid                   // partly stored, or a negative sequence
)

var (
	errUnknownProducer  = errors.New("producer id not issued by this group, or forgotten: init a new one")
	errTooManyProducers = errors.New("the group remembers as many producers as MaxProducers")
)

func newProducerTable(window int64, max int) *producerTable {
	return &producerTable{window: window, max: max, nextID: 1, producers: map[int64]*producerState{}}
}

// init issues a producer id (id 0), or a new epoch of id, at store time
// now.
func (t *producerTable) init(id, now int64) (int64, int32, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.tick(now)
	if id == 0 {
		if !t.room() {
			return 0, 0, errTooManyProducers
		}
		id = t.nextID
		t.nextID++
		t.producers[id] = &producerState{last: t.clock, queues: map[seqQueue]*queueSeqs{}}
		return id, 0, nil
	}
	p := t.live(id)
	if p == nil {
		return 0, 0, errUnknownProducer
	}
	p.epoch++
	p.last = t.clock
	clear(p.queues) // a new epoch numbers its sends from scratch
	return id, p.epoch, nil
}

// sequence decides a send at store time now and, when it is to be
// stored, records its sequences.
func (t *producerTable) sequence(now int64, s sendSeq) seqVerdict {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.tick(now)
	if s.first < 0 || s.n <= 0 || s.first > math.MaxInt64-int64(s.n) {
		return seqInvalid
	}
	p := t.live(s.producer)
	if p == nil {
		if s.producer <= 0 || s.producer >= t.nextID || !t.room() {
			return seqUnknown
		}
		// Issued and forgotten after a silence longer than the window:
		// taken up again as it comes.
		p = &producerState{epoch: s.epoch, queues: map[seqQueue]*queueSeqs{}}
		t.producers[s.producer] = p
	}
	switch {
	case s.epoch < p.epoch:
		return seqFenced
	case s.epoch > p.epoch:
		return seqUnknown
	}
	p.last = t.clock
	k := seqQueue{s.topic, s.queue}
	q := p.queues[k]
	if q == nil {
		q = &queueSeqs{}
		p.queues[k] = q
	}
	return q.take(s.first, s.first+int64(s.n)-1)
}

// take decides sequences [first, last] and records them when they are
// new.
func (q *queueSeqs) take(first, last int64) seqVerdict {
	if first < q.next-seqWindow {
		return seqOld
	}
	stored := 0
	for s := first; s <= last && s < q.next; s++ {
		if q.has(s) {
			stored++
		}
	}
	switch {
	case stored == int(last-first+1):
		return seqStored
	case stored > 0:
		return seqInvalid
	}
	if last >= q.next {
		q.shift(last + 1 - q.next)
		q.next = last + 1
	}
	for s := max(first, q.next-seqWindow); s <= last; s++ { // a send longer than the window marks its end
		i := q.next - 1 - s
		q.seen[i/64] |= 1 << (i % 64)
	}
	return seqNew
}

func (q *queueSeqs) has(s int64) bool {
	i := q.next - 1 - s
	return q.seen[i/64]&(1<<(i%64)) != 0
}

// shift moves the bitmap d sequences down, as next grows by d.
func (q *queueSeqs) shift(d int64) {
	if d >= seqWindow {
		q.seen = [seqWords]uint64{}
		return
	}
	words, bits := int(d/64), uint(d%64)
	for w := seqWords - 1; w >= 0; w-- {
		var v uint64
		if src := w - words; src >= 0 {
			v = q.seen[src] << bits
			if bits > 0 && src > 0 {
				v |= q.seen[src-1] >> (64 - bits)
			}
		}
		q.seen[w] = v
	}
}

// tick moves the table's clock to now if now is later.
func (t *producerTable) tick(now int64) { t.clock = max(t.clock, now) }

// live is producer id's state, nil when unknown or silent for longer than
// the window (then it is dropped).
func (t *producerTable) live(id int64) *producerState {
	p := t.producers[id]
	if p != nil && t.clock-p.last > t.window {
		delete(t.producers, id)
		return nil
	}
	return p
}

// room says whether one more producer may be remembered, forgetting the
// silent ones first if the table is full.
func (t *producerTable) room() bool {
	if len(t.producers) < t.max {
		return true
	}
	for id := range t.producers {
		t.live(id)
	}
	return len(t.producers) < t.max
}

// size is how many producers the table remembers.
func (t *producerTable) size() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.producers)
}

func (t *producerTable) snapshot() *pb.ProducerTable {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := &pb.ProducerTable{NextId: t.nextID, Clock: t.clock}
	for id, p := range t.producers {
		ps := &pb.ProducerState{Id: id, Epoch: p.epoch, Last: p.last}
		for k, q := range p.queues {
			ps.Queues = append(ps.Queues, &pb.QueueSequences{Topic: k.topic, QueueId: k.queue, Next: q.next, Seen: append([]uint64(nil), q.seen[:]...)})
		}
		sort.Slice(ps.Queues, func(i, j int) bool {
			a, b := ps.Queues[i], ps.Queues[j]
			return a.Topic < b.Topic || a.Topic == b.Topic && a.QueueId < b.QueueId
		})
		out.Producers = append(out.Producers, ps)
	}
	sort.Slice(out.Producers, func(i, j int) bool { return out.Producers[i].Id < out.Producers[j].Id })
	return out
}

// restore replaces the table with a snapshot's (nil: a snapshot from
// before producer ids, an empty table).
func (t *producerTable) restore(s *pb.ProducerTable) {
	fresh := map[int64]*producerState{}
	nextID, clock := int64(1), int64(0)
	if s != nil {
		nextID, clock = max(s.NextId, 1), s.Clock
		for _, ps := range s.Producers {
			p := &producerState{epoch: ps.Epoch, last: ps.Last, queues: map[seqQueue]*queueSeqs{}}
			for _, qs := range ps.Queues {
				q := &queueSeqs{next: qs.Next}
				copy(q.seen[:], qs.Seen)
				p.queues[seqQueue{qs.Topic, qs.QueueId}] = q
			}
			fresh[ps.Id] = p
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.producers, t.nextID, t.clock = fresh, nextID, clock
}

// refusal is the error a send gets for a verdict that refuses it, nil for
// the others.
func (v seqVerdict) refusal() error {
	switch v {
	case seqFenced:
		return statusError(codes.FailedPrecondition, pb.ErrorReason_PRODUCER_FENCED,
			"producer epoch is older than the group's: another instance took this producer id over", nil)
	case seqUnknown:
		return statusError(codes.FailedPrecondition, pb.ErrorReason_UNKNOWN_PRODUCER, errUnknownProducer.Error(), nil)
	case seqInvalid:
		return invalid(pb.ErrorReason_SEQUENCE_INVALID, "sequences partly stored before and partly not, or negative")
	}
	return nil
}

// producerIDs counts the producer ids each client connection was issued
// (MaxProducersPerConn): ids are the group's to share, so one client may
// not take them all. A connection's count goes when it closes.
type producerIDs struct {
	mu   sync.Mutex
	max  int
	conn map[*grpcConn]int
}

func newProducerIDs(max int) *producerIDs {
	return &producerIDs{max: max, conn: map[*grpcConn]int{}}
}

// take counts one more id issued on c, unless c had its share. A call on
// no gRPC connection (an in-process one) is not counted.
func (p *producerIDs) take(c *grpcConn) bool {
	if c == nil {
		return true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn[c] >= p.max {
		return false
	}
	p.conn[c]++
	return true
}

// closed forgets c.
func (p *producerIDs) closed(c *grpcConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conn, c)
}
