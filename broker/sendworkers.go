package broker

import "context"

// sendWorkers run the sends read from send streams (sendstream.go) on
// goroutines kept from one send to the next. A goroutine of its own for
// each send grew its stack on every send: runtime.newstack was 7% of the
// master's CPU under 16 synchronous senders on streams (pprof, 2026-12-03
// night), as it was for RPC handlers before gRPC's stream workers
// (Config.StreamWorkers, whose count this takes too).
type sendWorkers struct{ tasks chan func() }

// startSendWorkers starts n workers, which stop with the broker's context.
func (b *Broker) startSendWorkers(n int) *sendWorkers {
	w := &sendWorkers{tasks: make(chan func())}
	for range n {
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			w.run(b.ctx)
		}()
	}
	return w
}

func (w *sendWorkers) run(ctx context.Context) {
	for {
		select {
		case f := <-w.tasks:
			f()
		case <-ctx.Done():
			return
		}
	}
}

// do runs f on an idle worker, or on a goroutine of its own when none is
// idle (all busy, or stopped).
func (w *sendWorkers) do(f func()) {
	select {
	case w.tasks <- f:
	default:
		go f()
	}
}
