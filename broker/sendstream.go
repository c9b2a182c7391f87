package broker

import (
	"context"
	"errors"
	"io"
	"runtime"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	grpcmd "google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/storage"
)

// SendMessageStream serves a producer's sends on one stream, each as
// SendMessage serves it and answered by the id it came with, in the order
// the sends finish. An RPC per send costs gRPC a new HTTP/2 stream with
// its headers and trailers, on both sides: in a bare gRPC program (16
// senders on one connection, 1 KiB, a 1 ms wait for each answer) 44 µs
// of the client's CPU and 48 µs of the server's per send, against 25 and
// 30 on a stream (README, 2026-12-03 night).
//
// Each request is checked on its own: the access policy (a refused one
// is answered with its refusal, each send batched in it too, and the
// stream reads on), then each send for everything SendMessage checks, a
// failed store first. The stream reads its next request
// while its connection has fewer than MaxConcurrentStreams streamed sends
// in progress; past that, HTTP/2's flow control holds the producer back.
// A request may batch sends (pb.SendBatchesKey: the stream's header says
// this broker reads them), each checked and answered as if it came alone,
// with a slot of its own, but served together (streamedSends); to a
// producer that asked, the answers that finish while one is being sent go
// together in the next message.
// The stream ends when the producer ends it or the broker closes (a
// stream open would hold gRPC's graceful stop); a replica that stops
// being master answers each send NOT_LEADER, as SendMessage does.
func (s *service) SendMessageStream(stream pb.Broker_SendMessageStreamServer) error {
	ctx := stream.Context()
	// Say at once that this broker reads batched sends: the producer
	// batches none before it knows.
	if err := stream.SendHeader(grpcmd.Pairs(pb.SendBatchesKey, "1")); err != nil {
		return err
	}
	slots := s.streamedSendSlots(ctx)
	release := func(n int) {
		for range n {
			<-slots
		}
	}
	read := make(chan streamedSends)
	ended := make(chan error, 1)
	go receiveSends(stream, slots, read, ended)
	var inProgress sync.WaitGroup
	defer inProgress.Wait() // nothing is sent on the stream once this returns
	answers := &streamAnswers{stream: stream, batches: readsBatches(ctx)}
	for {
		select {
		case <-s.b.closing:
			return statusError(codes.Unavailable, pb.ErrorReason_NOT_LEADER, "the broker is shutting down", nil)
		case err := <-ended:
			return err
		case r := <-read:
			if r.refused != nil {
				outs := make([]*pb.SendStreamResponse, len(r.sends))
				for i, send := range r.sends {
					outs[i] = pb.SendStreamAnswer(send.Id, nil, cluster.BoundError(r.refused))
				}
				err := answers.send(outs...)
				release(len(r.sends))
				if err != nil {
					return err
				}
				continue
			}
			inProgress.Add(1)
			s.b.sendWorkers.do(func() {
				defer inProgress.Done()
				defer release(len(r.sends))
				// An answer that cannot be sent belongs to a stream that
				// has ended: the receiver says so to the loop.
				_ = answers.send(s.streamedSends(ctx, r.sends)...)
			})
		}
	}
}

// streamedSends are sends read together from a send stream (one request's,
// or as many of them as found a slot at once), or sends the access policy
// refused.
type streamedSends struct {
	sends   []*pb.SendStreamRequest
	refused error
}

// receiveSends reads the stream's requests while a slot is free and hands
// the sends in them to read, each with a slot taken for it; it says on
// ended (nil: the producer sends no more) why it stopped, once the stream
// ended. The sends batched in a request go on together as far as slots
// are free at once; the rest wait for slots and go on as they get them,
// so a batch larger than the bound is served as the sends before it
// finish.
func receiveSends(stream pb.Broker_SendMessageStreamServer, slots chan struct{}, read chan<- streamedSends, ended chan<- error) {
	ctx := stream.Context()
	stop := func() { ended <- status.FromContextError(ctx.Err()).Err() }
	takeSlot := func() bool {
		select {
		case slots <- struct{}{}:
			return true
		case <-ctx.Done():
			stop()
			return false
		}
	}
	for {
		if !takeSlot() {
			return
		}
		req := new(pb.SendStreamRequest)
		err := stream.RecvMsg(req)
		var refused *cluster.RefusedRequest
		var refusal error
		switch {
		case errors.As(err, &refused):
			refusal = refused.Err
		case err != nil:
			<-slots
			if errors.Is(err, io.EOF) { // the producer sends no more
				err = nil
			}
			ended <- err
			return
		}
		sends := req.Sends() // the first has its slot, taken before reading
		from := 0
		for i := 1; i <= len(sends); i++ {
			if i < len(sends) {
				select {
				case slots <- struct{}{}:
					continue // sends[i] goes with those before it
				default:
				}
			}
			select {
			case read <- streamedSends{sends: sends[from:i], refused: refusal}:
			case <-ctx.Done():
				for range i - from {
					<-slots
				}
				stop()
				return
			}
			from = i
			if i < len(sends) && !takeSlot() {
				return
			}
		}
	}
}

// streamedSends serves sends read together from a stream on the caller's
// goroutine and returns their answers: each send checked as SendMessage
// checks it, those that pass handed to group commit together and waited
// for here (a send per goroutine put a hand-off to it and one back from
// group commit on every send).
func (s *service) streamedSends(ctx context.Context, sends []*pb.SendStreamRequest) []*pb.SendStreamResponse {
	outs := make([]*pb.SendStreamResponse, len(sends))
	checked := make([]checkedSend, 0, len(sends))
	at := make([]int, 0, len(sends)) // checked[j] is sends[at[j]]
	for i, send := range sends {
		if send.Send == nil {
			outs[i] = pb.SendStreamAnswer(send.Id, nil, cluster.BoundError(invalid(pb.ErrorReason_ILLEGAL_ARGUMENT, "a streamed send carries no send")))
			continue
		}
		c, err := s.checkSend(ctx, send.Send) // refuses on a failed store first, as refuseUnaryWhenFailed does an RPC (requireMaster)
		if err != nil {
			outs[i] = pb.SendStreamAnswer(send.Id, nil, cluster.BoundError(err))
			continue
		}
		checked = append(checked, c)
		at = append(at, i)
	}
	switch len(checked) {
	case 0:
		return outs
	case 1: // alone, as SendMessage serves it
		c, i := checked[0], at[0]
		res, start, err := s.submit(ctx, c)
		outs[i] = s.streamedAnswer(sends[i].Id, c.req, res, start, err)
		return outs
	}
	reqs := make([]*sendReq, len(checked))
	for j, c := range checked {
		reqs[j] = &sendReq{records: c.records, n: c.n, seq: c.seq, done: make(chan sendOutcome, 1)}
	}
	start := time.Now()
	s.b.batcher.submitAll(reqs)
	deadlines := make([]time.Time, len(checked))
	for j, c := range checked {
		deadlines[j] = start.Add(c.timeout)
	}
	for j, o := range awaitAll(ctx, reqs, deadlines) {
		i := at[j]
		outs[i] = s.streamedAnswer(sends[i].Id, checked[j].req, o.results, start, o.err)
	}
	return outs
}

// streamedAnswer is the answer to the streamed send with id: req stored
// as res since start, or err.
func (s *service) streamedAnswer(id uint64, req *pb.SendMessageRequest, res []storage.AppendResult, start time.Time, err error) *pb.SendStreamResponse {
	if err != nil {
		return pb.SendStreamAnswer(id, nil, cluster.BoundError(err))
	}
	return pb.SendStreamAnswer(id, s.sent(req, res, start), nil)
}

// readsBatches is whether the producer on the stream of ctx reads answers
// batched (pb.SendBatchesKey in its request metadata).
func readsBatches(ctx context.Context) bool {
	md, _ := grpcmd.FromIncomingContext(ctx)
	return slices.Contains(md.Get(pb.SendBatchesKey), "1")
}

// streamedSendSlots is the channel whose tokens count the streamed sends
// in progress on the stream's connection (clientconns.go).
func (s *service) streamedSendSlots(ctx context.Context) chan struct{} {
	if c := grpcConnOf(ctx); c != nil {
		return c.streamedSends
	}
	return make(chan struct{}, s.b.cfg.MaxConcurrentStreams)
}

// streamAnswers sends a stream's answers, one message at a time: a gRPC
// stream's Send is not safe for concurrent use. To a producer that reads
// batches, answers that come while one is being sent wait for it and go
// together in the next message, sent by the sender that finds none in
// progress (the sends of one Raft entry finish together); a lone answer
// goes at once, as before.
type streamAnswers struct {
	mu      sync.Mutex
	stream  pb.Broker_SendMessageStreamServer
	batches bool // the producer reads batched answers
	queued  []*pb.SendStreamResponse
	sending bool  // a sender is sending what is queued
	err     error // the stream's Send failed: it has ended
}

// send sends outs, or queues them for the sender in progress; an error
// says the stream has ended.
func (a *streamAnswers) send(outs ...*pb.SendStreamResponse) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.batches {
		for _, out := range outs {
			if err := a.stream.Send(out); err != nil {
				return err
			}
		}
		return nil
	}
	a.queued = append(a.queued, outs...)
	if a.sending {
		return a.err
	}
	a.sending = true
	// Let the other sends of the same entry, woken with this one, queue
	// their answers first: a message carried about 7.6 answers with this
	// yield under 16 synchronous senders (2026-12-04). Without it sync16
	// was 1.067x in 5 pairs, then 0.941x in 8 (2026-12-07,
	// broker/README.md).
	a.mu.Unlock()
	runtime.Gosched()
	a.mu.Lock()
	for len(a.queued) > 0 && a.err == nil {
		first := a.queued[0]
		first.More = a.queued[1:]
		a.queued = nil
		a.mu.Unlock()
		err := a.stream.Send(first)
		a.mu.Lock()
		a.err = err
	}
	a.sending = false
	return a.err
}
