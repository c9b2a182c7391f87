package client

import (
	"context"
	"errors"
	"io"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/raftmq/raftmq/cluster/pb"
)

// A producer's small sends go on one SendMessageStream per broker instead
// of an RPC each: a unary RPC costs gRPC a new HTTP/2 stream and its
// headers and trailers on both sides. In a bare gRPC program, 16 senders
// on one connection, 1 KiB, a 1 ms wait for each answer: 44 µs of the
// client's CPU and 48 µs of the server's per send as RPCs, 25 and 30 on a
// stream (broker/README.md, 2026-12-03 night).

// streamedSendMax is the largest send (its records' bytes) that goes on a
// stream. The sends on a stream share its HTTP/2 flow-control window, in
// which a large batch would hold the small sends behind it; a batch that
// large pays for its RPC many times over anyway.
const streamedSendMax = 32 << 10

// A message on a send stream batches at most batchSends sends and
// batchBytes of their records (pb.SendBatchesKey): enough for the sends of
// many synchronous senders that queue while one message is being written,
// and small beside gRPC's 4 MiB bound on a message.
const (
	batchSends = 64
	batchBytes = 256 << 10
)

// errNoSendStream says the broker has no send stream (one older than the
// stream answers Unimplemented, before it reads a send): the send goes as
// an RPC.
var errNoSendStream = errors.New("client: the broker serves no send stream")

// sendStreams are a producer's send streams, one per broker address.
type sendStreams struct {
	mu     sync.Mutex
	byAddr map[string]*sendStream
	closed bool
}

func newSendStreams() *sendStreams { return &sendStreams{byAddr: map[string]*sendStream{}} }

// of is addr's send stream; nil once closed.
func (ss *sendStreams) of(addr string) *sendStream {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.closed {
		return nil
	}
	s := ss.byAddr[addr]
	if s == nil {
		s = &sendStream{opening: make(chan struct{}, 1)}
		ss.byAddr[addr] = s
	}
	return s
}

// close ends every stream; sends in progress on them fail (codes.Canceled).
// A producer that does not stream has none.
func (ss *sendStreams) close() {
	if ss == nil {
		return
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.closed = true
	for _, s := range ss.byAddr {
		s.close()
	}
}

// sendStream is the stream to one broker, opened on the first send and
// again on the send after it ended.
type sendStream struct {
	opening     chan struct{} // held by the sender opening a stream
	mu          sync.Mutex
	cur         *openStream // nil: none open
	unsupported bool        // the broker has none: RPCs from now on
	closed      bool
}

// openStream is one stream's life: the sends awaiting its answers.
type openStream struct {
	stream  pb.Broker_SendMessageStreamClient
	cancel  context.CancelFunc
	pending map[uint64]chan<- streamAnswer
	next    uint64      // the last id given; guarded by sendStream.mu, as pending
	stuck   atomic.Bool // given up: a send blocked past its sender's context
	batches atomic.Bool // the broker reads batched sends (its header said so)

	// A gRPC stream's Send is not safe for concurrent use: one sender at a
	// time sends what is queued, its own send and those queued meanwhile.
	writeMu sync.Mutex
	queued  []queuedSend
	writing bool
}

// queuedSend is a send waiting to be written, with its sender's context.
type queuedSend struct {
	ctx context.Context
	req *pb.SendStreamRequest
}

// giveUp ends the stream whose broker stopped reading it.
func (o *openStream) giveUp() {
	o.stuck.Store(true)
	o.cancel()
}

type streamAnswer struct {
	resp *pb.SendMessageResponse
	err  error
}

// send sends req on the stream to the broker b is a client of and waits
// for its answer or ctx. errNoSendStream: send it as an RPC.
func (s *sendStream) send(ctx context.Context, b pb.BrokerClient, req *pb.SendMessageRequest) (*pb.SendMessageResponse, error) {
	answer := make(chan streamAnswer, 1)
	o, id, err := s.enter(ctx, b, answer)
	if err != nil {
		return nil, err
	}
	o.write(queuedSend{ctx, &pb.SendStreamRequest{Id: id, Send: req}})
	select {
	case a := <-answer:
		return a.resp, a.err
	case <-ctx.Done():
		s.leave(o, id)
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// write sends q on the stream, with the sends queued meanwhile, or, when
// another sender is writing, queues q for it. Send blocks only while
// HTTP/2's flow control holds the stream: the broker reads no more (its
// sends in progress at its bound, or it is frozen). Past the context of
// the first send in the message being written the stream is given up, so
// that neither the writer nor the senders whose sends it holds wait on a
// broker that does not read. A send whose sender stopped waiting before
// it was written is not written. A Send error means the stream ended
// (Send says io.EOF): its reader answers every pending send with why.
func (o *openStream) write(q queuedSend) {
	o.writeMu.Lock()
	o.queued = append(o.queued, q)
	if o.writing {
		o.writeMu.Unlock()
		return
	}
	o.writing = true
	// Let the senders the same answers woke queue first: without this
	// yield a message carried 1.02 sends under 16 synchronous senders,
	// with it about 5 (2026-12-04). A lone sender's yield finds nothing
	// else to run. One yield, not none or two, nor a wait for every
	// sender answered: sync16 0.844x without it and 0.873x with two (5
	// pairs each), and a wait for the company as group commit waits lost
	// more (2026-12-07). Likely because the round's first message lets
	// the master read and check its sends while the other senders build
	// theirs (broker/README.md, nineteenth sitting).
	o.writeMu.Unlock()
	runtime.Gosched()
	o.writeMu.Lock()
	for len(o.queued) > 0 {
		ctx, m := o.nextMessage()
		if m == nil {
			break
		}
		o.writeMu.Unlock()
		stop := context.AfterFunc(ctx, o.giveUp)
		_ = o.stream.Send(m)
		stop()
		o.writeMu.Lock()
	}
	o.writing = false
	o.writeMu.Unlock()
}

// nextMessage takes the next message's sends off the queue, with the
// context of its first: the first whose sender still waits, and when the
// broker reads batches, those after it to the same topic (the access
// policy checks a message's sends together), up to batchSends and
// batchBytes. Sends whose senders stopped waiting are dropped. nil: none
// is left.
func (o *openStream) nextMessage() (context.Context, *pb.SendStreamRequest) {
	for len(o.queued) > 0 && o.queued[0].ctx.Err() != nil {
		o.queued = o.queued[1:]
	}
	if len(o.queued) == 0 {
		o.queued = nil
		return nil, nil
	}
	first := o.queued[0].req
	n, size := 1, len(first.Send.GetRecords())
	if o.batches.Load() {
		for n < len(o.queued) && len(first.More)+1 < batchSends {
			next := o.queued[n].req
			if next.Send.GetTopic() != first.Send.GetTopic() || size+len(next.Send.GetRecords()) > batchBytes {
				break
			}
			if o.queued[n].ctx.Err() == nil {
				size += len(next.Send.GetRecords())
				first.More = append(first.More, next)
			}
			n++
		}
	}
	ctx := o.queued[0].ctx
	o.queued = o.queued[n:]
	if len(o.queued) == 0 {
		o.queued = nil // the next sends start at the backing array's front
	}
	return ctx, first
}

// enter registers a send on the open stream, opening one if none is.
func (s *sendStream) enter(ctx context.Context, b pb.BrokerClient, answer chan<- streamAnswer) (*openStream, uint64, error) {
	for {
		s.mu.Lock()
		switch {
		case s.closed:
			s.mu.Unlock()
			return nil, 0, errClosed
		case s.unsupported:
			s.mu.Unlock()
			return nil, 0, errNoSendStream
		case s.cur != nil:
			o := s.cur
			o.next++
			id := o.next
			o.pending[id] = answer
			s.mu.Unlock()
			return o, id, nil
		}
		s.mu.Unlock()
		// None is open: one sender opens it, the others wait for it.
		select {
		case s.opening <- struct{}{}:
		case <-ctx.Done():
			return nil, 0, status.FromContextError(ctx.Err()).Err()
		}
		err := s.open(ctx, b)
		<-s.opening
		if err != nil {
			return nil, 0, err
		}
	}
}

// open opens a stream unless one is open (another sender opened it while
// this one waited); the sender's ctx bounds the opening.
func (s *sendStream) open(ctx context.Context, b pb.BrokerClient) error {
	s.mu.Lock()
	none := s.cur == nil && !s.closed && !s.unsupported
	s.mu.Unlock()
	if !none {
		return nil
	}
	sctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), pb.SendBatchesKey, "1"))
	stop := context.AfterFunc(ctx, cancel)
	stream, err := b.SendMessageStream(sctx)
	if !stop() { // ctx ended while opening
		cancel()
		return status.FromContextError(ctx.Err()).Err()
	}
	if err != nil {
		cancel()
		return err
	}
	o := &openStream{stream: stream, cancel: cancel, pending: map[uint64]chan<- streamAnswer{}}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		cancel()
		return errClosed
	}
	s.cur = o
	go s.read(o)
	return nil
}

// leave forgets a send whose caller stopped waiting.
func (s *sendStream) leave(o *openStream, id uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(o.pending, id)
}

// read delivers o's answers until it ends, then answers its pending sends
// with why it ended.
func (s *sendStream) read(o *openStream) {
	// The broker's header comes as the stream opens; one older than
	// batching sends it with its first answer, and its sends go one to a
	// message until then, and after.
	if md, err := o.stream.Header(); err == nil && slices.Contains(md.Get(pb.SendBatchesKey), "1") {
		o.batches.Store(true)
	}
	answered := false
	var chans []chan<- streamAnswer
	for {
		resp, err := o.stream.Recv()
		if err != nil {
			s.ended(o, err, answered)
			return
		}
		answered = true
		answers := resp.Answers()
		chans = chans[:0]
		s.mu.Lock()
		for _, r := range answers {
			chans = append(chans, o.pending[r.Id])
			delete(o.pending, r.Id)
		}
		s.mu.Unlock()
		for i, r := range answers {
			if chans[i] == nil { // its sender stopped waiting
				continue
			}
			a := streamAnswer{err: r.Err()}
			if a.err == nil {
				a.resp = r.Result
			}
			chans[i] <- a
		}
	}
}

func (s *sendStream) ended(o *openStream, err error, answered bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o.cancel()
	if s.cur == o {
		s.cur = nil
	}
	if status.Code(err) == codes.Unimplemented && !answered {
		// The broker has no such method and read none of the sends: they
		// go as RPCs, as every send to it from now on.
		s.unsupported = true
		err = errNoSendStream
	} else if errors.Is(err, io.EOF) { // the broker ended the stream with no error
		err = status.Error(codes.Unavailable, "client: the broker ended the send stream")
	} else if o.stuck.Load() { // the outcome of its sends is unknown: they are retried
		err = status.Error(codes.Unavailable, "client: the broker stopped reading the send stream")
	}
	for id, ch := range o.pending {
		ch <- streamAnswer{err: err}
		delete(o.pending, id)
	}
}

func (s *sendStream) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.cur != nil {
		s.cur.cancel() // its reader answers its pending sends
	}
}
