package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/spf13/cobra"

	"github.com/raftmq/raftmq/client"
)

// benchFlags are the settings shared by the bench commands.
type benchFlags struct {
	ns, topic, group, mode string
	size, clients, batch   int
	count                  int64
	duration               time.Duration
	json                   bool
	producerIDs            bool   // --producer-ids
	sendStreams            bool   // --send-streams
	cpuProfile             string // --cpuprofile
	trace                  string // --trace
	rate                   int    // --rate (produce, e2e): messages a second over all clients, 0 for no limit
}

func benchCommand() *cobra.Command {
	var f benchFlags
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "measure produce, consume and end-to-end throughput and latency",
		Long: `Like RocketMQ's benchmark and nats bench. A line each second shows the rate,
average and max latency and failures of that second; the summary gives totals, msgs/s, MB/s and
latency p50/p90/p99/p999/max and mean. With --json the summary is one JSON object on the
last line: msgs_per_sec, mb_per_sec, p50_ms, p90_ms, p99_ms, p999_ms, max_ms,
mean_ms, sent, failed (consume reports received as sent), cpu_seconds (the CPU time, user and
system, the bench process spent, its setup included: the client's share of a run's CPU).`,
	}
	fl := cmd.PersistentFlags()
	namesrvFlag(cmd, &f.ns)
	fl.StringVar(&f.topic, "topic", "bench", "topic (create it first outside dev mode)")
	fl.IntVar(&f.size, "size", 1024, "message body size in bytes")
	fl.IntVar(&f.clients, "clients", 16, "concurrent producers (or consumers' workers)")
	fl.Int64Var(&f.count, "count", 0, "messages in all (0: run for --duration)")
	fl.DurationVar(&f.duration, "duration", 10*time.Second, "how long to run when --count is 0")
	fl.StringVar(&f.mode, "mode", "sync", "sync, async or batch")
	fl.IntVar(&f.batch, "batch", 32, "messages per send in batch mode")
	fl.BoolVar(&f.json, "json", false, "print the summary as one JSON object on the last line")
	fl.StringVar(&f.group, "group", "bench", "consumer group (consume, e2e)")
	fl.StringVar(&f.cpuProfile, "cpuprofile", "", "write the bench's own CPU profile to this file (go tool pprof)")
	fl.StringVar(&f.trace, "trace", "", "write the bench's own execution trace to this file (go tool trace; deploy/roundtrace reads a sync bench's rounds from it)")
	fl.BoolVar(&f.producerIDs, "producer-ids", true, "producers ask for producer ids and number their sends (false: retries are known by unique keys only)")
	fl.BoolVar(&f.sendStreams, "send-streams", true, "producers send sends of up to 32 KiB on a stream per broker rather than an RPC each (client.WithSendStreams)")
	produce := &cobra.Command{Use: "produce", Short: "send messages as fast as they are acknowledged (or at --rate)",
		RunE: func(cmd *cobra.Command, _ []string) error { return runBench(cmd.Context(), f, true, false) }}
	e2e := &cobra.Command{Use: "e2e", Short: "produce and consume together; latency is send to receive",
		Long: `Produce and consume together; latency is send to receive. With --rate the
producers send at that rate (a low load, say 1000 a second, shows the latency a
message takes when nothing queues).`,
		RunE: func(cmd *cobra.Command, _ []string) error { return runBench(cmd.Context(), f, true, true) }}
	for _, c := range []*cobra.Command{produce, e2e} {
		c.Flags().IntVar(&f.rate, "rate", 0, "messages a second over all clients (0: as fast as they are acknowledged)")
	}
	cmd.AddCommand(
		produce,
		&cobra.Command{Use: "consume", Short: "consume messages with a push consumer from the first offset",
			RunE: func(cmd *cobra.Command, _ []string) error { return runBench(cmd.Context(), f, false, true) }},
		e2e,
		benchTimersCommand(&f),
		benchHostCommand(&f),
	)
	return cmd
}

// startCPUProfile profiles this process into path until the returned
// stop; nothing when path is empty. The bench shares the machine with the
// brokers it measures, so what the client costs is part of the figure.
func startCPUProfile(path string) (stop func(), err error) {
	return recordInto(path, "--cpuprofile", pprof.StartCPUProfile, pprof.StopCPUProfile)
}

// startTrace starts an execution trace of this process into path until the
// returned stop; nothing when path is empty. A CPU profile says what the
// client spends its CPU on; under sync sends the client mostly waits, and
// only a trace says when each step of a round happens (deploy/roundtrace).
// About 1 MB a second under 16 sync senders.
func startTrace(path string) (stop func(), err error) {
	return recordInto(path, "--trace", trace.Start, trace.Stop)
}

// recordInto starts a recording of this process (start) into a new file at
// path and returns what stops it (stop) and closes the file; flag names
// the option in errors.
func recordInto(path, flag string, start func(io.Writer) error, stop func()) (func(), error) {
	if path == "" {
		return func() {}, nil
	}
	out, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	if err := start(out); err != nil {
		out.Close()
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	return func() { stop(); out.Close() }, nil
}

// benchRunProperty marks the messages of one e2e run.
const benchRunProperty = "RAFTMQ_BENCH_RUN"

// recorder counts and times operations from many goroutines.
type recorder struct {
	mu       sync.Mutex
	hist     *hdrhistogram.Histogram // microseconds, whole run
	window   *hdrhistogram.Histogram // microseconds, the current second
	done     atomic.Int64
	bytes    atomic.Int64 // bodies' bytes of the done messages
	failed   atomic.Int64
	lastDone int64
	// lastFailed: the failures up to the last line; each line reports
	// the last second's, as it does messages (the summary has the total).
	lastFailed int64
}

func newRecorder() *recorder {
	return &recorder{hist: hdrhistogram.New(1, 60_000_000, 3), window: hdrhistogram.New(1, 60_000_000, 3)}
}

func (r *recorder) record(n int, bytes int64, d time.Duration) {
	r.bytes.Add(bytes)
	us := max(d.Microseconds(), 1)
	r.mu.Lock()
	for i := 0; i < n; i++ {
		r.hist.RecordValue(us)
		r.window.RecordValue(us)
	}
	r.mu.Unlock()
	r.done.Add(int64(n))
}

// tick prints the last second's line.
func (r *recorder) tick(elapsed time.Duration, total int64) {
	r.mu.Lock()
	avg, mx := r.window.Mean()/1000, float64(r.window.Max())/1000
	r.window.Reset()
	r.mu.Unlock()
	done, failed := r.done.Load(), r.failed.Load()
	rate, failedRate := done-r.lastDone, failed-r.lastFailed
	r.lastDone, r.lastFailed = done, failed
	progress := ""
	if total > 0 {
		progress = fmt.Sprintf(" [%-20s] %3d%%", strings.Repeat("#", int(20*min(done, total)/total)), 100*min(done, total)/total)
	}
	fmt.Fprintf(os.Stderr, "%5.0fs %9d msgs/s  avg %7.2f ms  max %8.2f ms  failed %d%s\n",
		elapsed.Seconds(), rate, avg, mx, failedRate, progress)
}

func runBench(ctx context.Context, f benchFlags, produce, consume bool) error {
	nsAddrs, err := nameServerAddrs(f.ns)
	if err != nil {
		return err
	}
	if f.mode != "sync" && f.mode != "async" && f.mode != "batch" {
		return fmt.Errorf("--mode %q: want sync, async or batch", f.mode)
	}
	if f.size < 1 || f.clients < 1 || f.batch < 1 {
		return errors.New("--size, --clients and --batch must be positive")
	}
	if f.rate < 0 {
		return errors.New("--rate must not be negative")
	}
	stop, err := startCPUProfile(f.cpuProfile)
	if err != nil {
		return err
	}
	defer stop()
	stopTrace, err := startTrace(f.trace)
	if err != nil {
		return err
	}
	defer stopTrace()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if f.count == 0 {
		var c context.CancelFunc
		ctx, c = context.WithTimeout(ctx, f.duration)
		defer c()
	}
	rec := newRecorder()
	start := time.Now()
	var wg sync.WaitGroup
	var consumer *client.PushConsumer
	// e2e counts only what this run sent: each message carries the run's
	// id (benchRunProperty), and queues new to the group start at the
	// run's start rather than at their end, so messages sent before the
	// consumer has its queues (a topic the first send creates) count too.
	// (Issue #14: on a new topic e2e waited forever; on a backlog it
	// counted old messages as latency.)
	runID := fmt.Sprintf("%d-%d", os.Getpid(), start.UnixNano())
	if consume {
		cfg := client.PushConfig{ConsumeFrom: client.ConsumeFromFirst, Workers: f.clients, BatchSize: 32}
		if produce {
			cfg.ConsumeFrom, cfg.ConsumeFromTime = client.ConsumeFromTime, start.Add(-time.Second)
		}
		opts, err := clientOptions(nsAddrs, client.WithGroup(f.group))
		if err != nil {
			return err
		}
		consumer, err = client.NewPushConsumer(cfg, opts...)
		if err != nil {
			return err
		}
		err = consumer.Subscribe(f.topic, "*", func(_ context.Context, msgs []*client.MessageExt) client.ConsumeResult {
			for _, m := range msgs {
				// e2e: from the send (the born time); consume: from the
				// store time, so a backlog shows as its age.
				lat := time.Since(m.StoreTime)
				if produce {
					if m.Properties[benchRunProperty] != runID {
						continue // not this run's
					}
					lat = time.Since(m.BornTime)
				}
				rec.record(1, int64(len(m.Body)), lat)
			}
			if f.count > 0 && rec.done.Load() >= f.count && !produce {
				cancel()
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
	}
	if produce {
		p, err := startBenchProducer(nsAddrs, f)
		if err != nil {
			return err
		}
		defer p.Shutdown()
		prec := rec
		if consume {
			prec = newRecorder() // e2e reports what was received
		}
		body := []byte(strings.Repeat("x", f.size))
		var issued atomic.Int64
		pace := newPacer(f.rate, time.Now())
		take := func(n int64) bool {
			return (f.count == 0 || issued.Add(n) <= f.count+n-1) && pace.wait(ctx, n)
		}
		for i := 0; i < f.clients; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				produceLoop(ctx, p, f, body, runID, prec, take)
			}()
		}
		if consume {
			defer func() { rec.failed.Add(prec.failed.Load()) }()
		}
	}
	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	producersDone := make(chan struct{})
	go func() { wg.Wait(); close(producersDone) }()
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-producersDone:
			if !consume {
				break loop
			}
			producersDone = nil
		case <-ticker.C:
			rec.tick(time.Since(start), f.count)
		}
		if f.count > 0 && rec.done.Load() >= f.count {
			break
		}
	}
	cancel()
	wg.Wait()
	elapsed := time.Since(start)
	return printSummary(os.Stdout, rec, elapsed, f)
}

// startBenchProducer starts the producer the bench commands share among
// their sending goroutines.
func startBenchProducer(nsAddrs []string, f benchFlags) (*client.Producer, error) {
	opts, err := clientOptions(nsAddrs, client.WithSendTimeout(10*time.Second), client.WithProducerIDs(f.producerIDs), client.WithSendStreams(f.sendStreams))
	if err != nil {
		return nil, err
	}
	p, err := client.NewProducer(opts...)
	if err != nil {
		return nil, err
	}
	if err := p.Start(); err != nil {
		return nil, err
	}
	return p, nil
}

// pacer spaces the sends of every producing goroutine to one rate: the
// n-th message is due n/rate seconds after the start. A sender behind
// its schedule sends at once.
type pacer struct {
	start    time.Time
	interval time.Duration // between two messages
	issued   atomic.Int64
}

// newPacer paces to rate messages a second from start; nil (no pacing)
// when rate is 0.
func newPacer(rate int, start time.Time) *pacer {
	if rate <= 0 {
		return nil
	}
	return &pacer{start: start, interval: time.Second / time.Duration(rate)}
}

// due is when the next n messages may go, and counts them as issued.
func (p *pacer) due(n int64) time.Time {
	return p.start.Add(time.Duration(p.issued.Add(n)-n) * p.interval)
}

// wait blocks until the next n messages may go; false if ctx ended first.
func (p *pacer) wait(ctx context.Context, n int64) bool {
	if p == nil {
		return true
	}
	d := time.Until(p.due(n))
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// produceLoop sends until ctx ends or take says the count is reached.
func produceLoop(ctx context.Context, p *client.Producer, f benchFlags, body []byte, runID string, rec *recorder, take func(int64) bool) {
	size := int64(len(body))
	msg := func() *client.Message {
		return &client.Message{Topic: f.topic, Body: body, Properties: map[string]string{benchRunProperty: runID}}
	}
	inflight := make(chan struct{}, 64) // async: bounded per client
	var wg sync.WaitGroup
	defer wg.Wait()
	for ctx.Err() == nil {
		switch f.mode {
		case "sync":
			if !take(1) {
				return
			}
			t := time.Now()
			if _, err := p.Send(ctx, msg()); err != nil {
				if !ended(ctx) {
					rec.failed.Add(1)
				}
				continue
			}
			rec.record(1, size, time.Since(t))
		case "async":
			if !take(1) {
				return
			}
			select {
			case inflight <- struct{}{}:
			case <-ctx.Done():
				return
			}
			t := time.Now()
			wg.Add(1)
			err := p.SendAsync(ctx, msg(), func(_ *client.SendResult, err error) {
				defer wg.Done()
				<-inflight
				if err != nil {
					if !ended(ctx) {
						rec.failed.Add(1)
					}
					return
				}
				rec.record(1, size, time.Since(t))
			})
			if err != nil {
				wg.Done()
				<-inflight
				rec.failed.Add(1)
			}
		case "batch":
			if !take(int64(f.batch)) {
				return
			}
			batch := make([]*client.Message, f.batch)
			for i := range batch {
				batch[i] = msg()
			}
			t := time.Now()
			if _, err := p.SendBatch(ctx, batch); err != nil {
				if !ended(ctx) {
					rec.failed.Add(int64(f.batch))
				}
				continue
			}
			rec.record(f.batch, int64(f.batch)*size, time.Since(t))
		}
	}
}

// printSummary writes the run's summary to w: two lines for people and,
// with --json, one JSON object for scripts (deploy/bench-local.sh reads
// mean_ms beside the brokers' own histograms, to tell where a send's time
// went).
func printSummary(w io.Writer, rec *recorder, elapsed time.Duration, f benchFlags) error {
	rec.mu.Lock()
	h := rec.hist
	q := func(p float64) float64 { return float64(h.ValueAtQuantile(p)) / 1000 }
	sum := map[string]any{
		"msgs_per_sec": float64(rec.done.Load()) / elapsed.Seconds(),
		"mb_per_sec":   float64(rec.bytes.Load()) / elapsed.Seconds() / 1e6,
		"p50_ms":       q(50), "p90_ms": q(90), "p99_ms": q(99), "p999_ms": q(99.9),
		"max_ms": float64(h.Max()) / 1000, "mean_ms": h.Mean() / 1000,
		"sent": rec.done.Load(), "failed": rec.failed.Load(),
		"cpu_seconds": processCPU(),
	}
	rec.mu.Unlock()
	size := int64(0) // the bodies' mean size, as received or sent
	if n := rec.done.Load(); n > 0 {
		size = rec.bytes.Load() / n
	}
	fmt.Fprintf(w, "%d messages of %d B in %.1fs: %.0f msgs/s, %.2f MB/s, %d failed\n", sum["sent"], size, elapsed.Seconds(),
		sum["msgs_per_sec"], sum["mb_per_sec"], sum["failed"])
	fmt.Fprintf(w, "latency ms: p50 %.2f  p90 %.2f  p99 %.2f  p999 %.2f  max %.2f  mean %.2f\n", sum["p50_ms"], sum["p90_ms"], sum["p99_ms"], sum["p999_ms"], sum["max_ms"], sum["mean_ms"])
	if f.json {
		b, _ := json.Marshal(sum)
		fmt.Fprintln(w, string(b))
	}
	return nil
}

// processCPU is the CPU time, user and system, this process has spent, in
// seconds; 0 where the system does not say.
func processCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}
