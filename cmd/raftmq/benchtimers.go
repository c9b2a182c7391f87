package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/spf13/cobra"

	"github.com/raftmq/raftmq/client"
	"github.com/raftmq/raftmq/message"
)

// timerBench is what `raftmq bench timers` adds to the shared flags.
type timerBench struct {
	rate, senders int
	delay, spread time.Duration
	topic         string
}

func benchTimersCommand(f *benchFlags) *cobra.Command {
	var tb timerBench
	cmd := &cobra.Command{
		Use:   "timers",
		Short: "schedule timer messages at a rate while ordinary sends go on; report how late the timers fire",
		Long: `For --duration, --timer-senders producers schedule --rate timer messages a second on
--timer-topic (default <topic>-timers), in batches of --batch, each due --delay plus a random
part of --spread after it is sent (TIMER_DELIVER_MS). Meanwhile --clients producers send
ordinary messages to --topic (--mode, --batch), from the start until every acknowledged timer
has fired, and a consumer group reads the timer topic. The summary gives the timers scheduled,
fired, fired twice and fired early (must be 0), how late they fired (the store time of the
delivered message against its due time, and the time it was received), and the ordinary sends'
rate and latency while timers fired. With --json: msgs_per_sec, p50_ms, p99_ms (the ordinary
sends while timers fired), timers_acked, timers_fired, timer_duplicates, timers_early,
fire_late_p50_ms, fire_late_p99_ms, fire_late_max_ms, recv_late_p50_ms, recv_late_p99_ms,
sent, failed.`,
		RunE: func(cmd *cobra.Command, _ []string) error { return runTimerBench(cmd.Context(), *f, tb) },
	}
	fl := cmd.Flags()
	fl.IntVar(&tb.rate, "rate", 10000, "timer messages scheduled a second")
	// Each sender waits for its batch's answer: on a saturated 2-CPU
	// cluster 8 of them could not keep the default 10k/s pace (7.4-7.9k/s),
	// 32 do (broker/README.md).
	fl.IntVar(&tb.senders, "timer-senders", 32, "producers scheduling timers")
	fl.DurationVar(&tb.delay, "delay", 5*time.Second, "each timer is due this long after it is sent")
	fl.DurationVar(&tb.spread, "spread", time.Second, "plus a random part of this")
	fl.StringVar(&tb.topic, "timer-topic", "", "topic of the timers (default <topic>-timers)")
	return cmd
}

// timerOutcomes collects the fired timers, from the consumer's goroutines.
type timerOutcomes struct {
	mu        sync.Mutex
	seen      map[string]bool // by ORIGIN_MESSAGE_ID
	fireLate  *hdrhistogram.Histogram
	recvLate  *hdrhistogram.Histogram // microseconds
	fired     atomic.Int64
	dups      atomic.Int64
	early     atomic.Int64
	firstFire atomic.Int64 // unix ns of the first fired timer received
}

func (o *timerOutcomes) record(m *client.MessageExt, now time.Time) {
	due, ok := m.DueTime()
	if !ok {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	id := m.Properties[message.PropertyOriginMsgID]
	if o.seen[id] {
		o.dups.Add(1)
		return
	}
	o.seen[id] = true
	o.fired.Add(1)
	o.firstFire.CompareAndSwap(0, now.UnixNano())
	if m.StoreTime.Before(due) {
		o.early.Add(1)
	}
	o.fireLate.RecordValue(max(m.StoreTime.Sub(due).Microseconds(), 1))
	o.recvLate.RecordValue(max(now.Sub(due).Microseconds(), 1))
}

func runTimerBench(ctx context.Context, f benchFlags, tb timerBench) error {
	nsAddrs, err := nameServerAddrs(f.ns)
	if err != nil {
		return err
	}
	if f.mode != "sync" && f.mode != "async" && f.mode != "batch" {
		return fmt.Errorf("--mode %q: want sync, async or batch", f.mode)
	}
	if tb.rate < 1 || tb.senders < 1 || tb.delay <= 0 || tb.spread < 0 || f.size < 1 || f.clients < 0 || f.batch < 1 {
		return errors.New("--rate, --timer-senders, --delay, --size and --batch must be positive, --spread and --clients not negative")
	}
	if tb.topic == "" {
		tb.topic = f.topic + "-timers"
	}
	start := time.Now()
	runID := fmt.Sprintf("%d-%d", start.UnixNano(), rand.Int64())
	out := &timerOutcomes{seen: map[string]bool{}, fireLate: hdrhistogram.New(1, 3_600_000_000, 3), recvLate: hdrhistogram.New(1, 3_600_000_000, 3)}

	copts, err := clientOptions(nsAddrs, client.WithGroup(f.group+"-timers"))
	if err != nil {
		return err
	}
	consumer, err := client.NewPushConsumer(client.PushConfig{ConsumeFrom: client.ConsumeFromTime, ConsumeFromTime: start.Add(-time.Second),
		Workers: 8, BatchSize: 32}, copts...)
	if err != nil {
		return err
	}
	err = consumer.Subscribe(tb.topic, "*", func(_ context.Context, msgs []*client.MessageExt) client.ConsumeResult {
		now := time.Now()
		for _, m := range msgs {
			if m.Properties[benchRunProperty] == runID {
				out.record(m, now)
			}
		}
		return client.ConsumeSuccess
	})
	if err != nil {
		return err
	}
	if err := consumer.Start(); err != nil {
		return err
	}
	defer consumer.Shutdown()

	p, err := startBenchProducer(nsAddrs, f)
	if err != nil {
		return err
	}
	defer p.Shutdown()

	// Ordinary sends, from the start until every timer has fired.
	sendCtx, stopSends := context.WithCancel(ctx)
	defer stopSends()
	sends := newRecorder()
	// The ordinary sends counted from the first second a timer fired in.
	sendsAtFirstFire, firingFrom := int64(-1), time.Time{}
	body := []byte(strings.Repeat("x", f.size))
	var wg sync.WaitGroup
	for range f.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			produceLoop(sendCtx, p, f, body, runID, sends, func(int64) bool { return true })
		}()
	}

	// Timers, paced to --rate for --duration.
	var scheduled, acked, timerFailed atomic.Int64
	schedCtx, stopScheduling := context.WithTimeout(ctx, f.duration)
	defer stopScheduling()
	var swg sync.WaitGroup
	for range tb.senders {
		swg.Add(1)
		go func() {
			defer swg.Done()
			for schedCtx.Err() == nil {
				due := int64(time.Since(start).Seconds() * float64(tb.rate))
				if scheduled.Load()+int64(f.batch) > due {
					time.Sleep(time.Millisecond)
					continue
				}
				scheduled.Add(int64(f.batch))
				batch := make([]*client.Message, f.batch)
				for i := range batch {
					at := time.Now().Add(tb.delay + time.Duration(rand.Int64N(int64(tb.spread)+1)))
					batch[i] = (&client.Message{Topic: tb.topic, Body: body, Properties: map[string]string{benchRunProperty: runID}}).WithDeliverTime(at)
				}
				if _, err := p.SendBatch(ctx, batch); err != nil {
					timerFailed.Add(int64(f.batch))
					continue
				}
				acked.Add(int64(f.batch))
			}
		}()
	}
	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	scheduling := make(chan struct{})
	go func() { swg.Wait(); close(scheduling) }()
	deadline := time.Time{}
	var lastFired int64
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-scheduling:
			scheduling = nil
			deadline = time.Now().Add(tb.delay + tb.spread + time.Minute)
		case <-ticker.C:
			if out.firstFire.Load() != 0 && firingFrom.IsZero() {
				sendsAtFirstFire, firingFrom = sends.done.Load(), time.Now()
			}
			fired := out.fired.Load()
			fmt.Fprintf(os.Stderr, "%5.0fs  timers scheduled %d  acked %d  fired %d (+%d)  ordinary sends %d\n",
				time.Since(start).Seconds(), scheduled.Load(), acked.Load(), fired, fired-lastFired, sends.done.Load())
			lastFired = fired
			if !deadline.IsZero() && (fired >= acked.Load() || time.Now().After(deadline)) {
				done = true
			}
		}
	}
	lastFire := time.Now()
	stopSends()
	wg.Wait()
	return printTimerSummary(f, tb, out, sends, sendsAtFirstFire, lastFire.Sub(firingFrom), acked.Load(), timerFailed.Load())
}

func printTimerSummary(f benchFlags, tb timerBench, out *timerOutcomes, sends *recorder, atFirst int64, firing time.Duration, acked, timerFailed int64) error {
	out.mu.Lock()
	defer out.mu.Unlock()
	sends.mu.Lock()
	defer sends.mu.Unlock()
	ms := func(h *hdrhistogram.Histogram, q float64) float64 { return float64(h.ValueAtQuantile(q)) / 1000 }
	window := firing.Seconds()
	rate := 0.0
	if atFirst >= 0 && window > 0 {
		rate = float64(sends.done.Load()-atFirst) / window
	}
	sum := map[string]any{
		"timers_acked": acked, "timers_fired": out.fired.Load(), "timer_duplicates": out.dups.Load(), "timers_early": out.early.Load(),
		"fire_late_p50_ms": ms(out.fireLate, 50), "fire_late_p99_ms": ms(out.fireLate, 99), "fire_late_max_ms": float64(out.fireLate.Max()) / 1000,
		"recv_late_p50_ms": ms(out.recvLate, 50), "recv_late_p99_ms": ms(out.recvLate, 99),
		"msgs_per_sec": rate, "p50_ms": ms(sends.hist, 50), "p99_ms": ms(sends.hist, 99),
		"sent": sends.done.Load(), "failed": sends.failed.Load() + timerFailed,
	}
	fmt.Printf("timers: %d acked at %d/s for %s (%d failed), %d fired, %d fired twice, %d early\n", acked, tb.rate, f.duration,
		timerFailed, out.fired.Load(), out.dups.Load(), out.early.Load())
	fmt.Printf("fire lateness ms (store time - due): p50 %.1f  p99 %.1f  max %.1f; received - due: p50 %.1f  p99 %.1f\n",
		sum["fire_late_p50_ms"], sum["fire_late_p99_ms"], sum["fire_late_max_ms"], sum["recv_late_p50_ms"], sum["recv_late_p99_ms"])
	fmt.Printf("ordinary sends while timers fired (%.1fs): %.0f msgs/s, p50 %.2f ms, p99 %.2f ms; %d sent in all, %d failed\n",
		window, rate, sum["p50_ms"], sum["p99_ms"], sends.done.Load(), sends.failed.Load())
	if f.json {
		b, _ := json.Marshal(sum)
		fmt.Println(string(b))
	}
	return nil
}
