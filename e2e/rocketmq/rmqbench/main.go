// Command rmqbench measures RocketMQ's official Go client against a
// cluster, as `raftmq bench` measures raftmq's own SDK, and prints the
// same one-line JSON summary, so deploy/bench-local.sh --rocketmq puts the
// two side by side:
//
//	rmqbench produce --namesrv ADDR --topic T --clients 16 --mode sync|batch [--batch 64] --duration 15s --size 1024
//	rmqbench consume --namesrv ADDR --topic T --group G --clients 4 --count N
//
// produce: one producer (the client's API is safe for concurrent use),
// --clients goroutines each sending as fast as answers come (SendSync of
// one message, or of a batch of --batch), for --duration; the latency of
// each send. consume: a push consumer of a new group from the first
// offset, --clients consuming goroutines, until --count messages arrived.
// The summary: {"msgs_per_sec","mb_per_sec","p50_ms","p90_ms","p99_ms","max_ms","sent","failed"}.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
)

type options struct {
	namesrv, topic, mode, group string
	clients, batch, size, count int
	duration                    time.Duration
}

type summary struct {
	MsgsPerSec float64  `json:"msgs_per_sec"`
	MBPerSec   float64  `json:"mb_per_sec"`
	P50        *float64 `json:"p50_ms"` // null for consume, which measures no latency
	P90        *float64 `json:"p90_ms"`
	P99        *float64 `json:"p99_ms"`
	Max        *float64 `json:"max_ms"`
	Sent       int64    `json:"sent"`
	Failed     int64    `json:"failed"`
}

func main() {
	if len(os.Args) < 2 || (os.Args[1] != "produce" && os.Args[1] != "consume") {
		fmt.Fprintln(os.Stderr, "usage: rmqbench produce|consume [flags] (see the package doc)")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	var o options
	fs.StringVar(&o.namesrv, "namesrv", "127.0.0.1:9876", "name server address")
	fs.StringVar(&o.topic, "topic", "bench", "topic")
	fs.StringVar(&o.mode, "mode", "sync", "produce: sync or batch")
	fs.StringVar(&o.group, "group", "rmqbench", "consumer group (consume)")
	fs.IntVar(&o.clients, "clients", 16, "sending goroutines (produce) or consuming goroutines (consume)")
	fs.IntVar(&o.batch, "batch", 64, "messages per send in batch mode")
	fs.IntVar(&o.size, "size", 1024, "body size in bytes")
	fs.IntVar(&o.count, "count", 0, "consume: messages to receive")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "produce: how long to send")
	fs.Parse(os.Args[2:])
	rlog.SetLogLevel("error")
	var (
		s   summary
		err error
	)
	if os.Args[1] == "produce" {
		s, err = produce(o)
	} else {
		s, err = consume(o)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "rmqbench:", err)
		os.Exit(1)
	}
	line, _ := json.Marshal(s)
	fmt.Println(string(line))
}

func produce(o options) (summary, error) {
	p, err := producer.NewDefaultProducer(producer.WithNsResolver(primitive.NewPassthroughResolver([]string{o.namesrv})),
		producer.WithGroupName("rmqbench"), producer.WithRetry(2), producer.WithSendMsgTimeout(10*time.Second))
	if err != nil {
		return summary{}, err
	}
	if err := p.Start(); err != nil {
		return summary{}, err
	}
	defer p.Shutdown()
	per := 1
	if o.mode == "batch" {
		per = o.batch
	} else if o.mode != "sync" {
		return summary{}, fmt.Errorf("--mode %q: sync or batch", o.mode)
	}
	body := make([]byte, o.size)
	for i := range body {
		body[i] = 'a' + byte(i%26)
	}
	// The route first: a client's first sends to a topic fail until it is known.
	warm, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	for {
		if r, err := p.SendSync(warm, primitive.NewMessage(o.topic, body)); err == nil && r.Status == primitive.SendOK {
			break
		}
		if warm.Err() != nil {
			cancel()
			return summary{}, fmt.Errorf("no send to %s succeeded within 10 s", o.topic)
		}
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	var (
		sent, failed atomic.Int64
		mu           sync.Mutex
		lat          []time.Duration
		wg           sync.WaitGroup
	)
	start := time.Now()
	end := start.Add(o.duration)
	for c := 0; c < o.clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			msgs := make([]*primitive.Message, per)
			for time.Now().Before(end) {
				for i := range msgs {
					msgs[i] = primitive.NewMessage(o.topic, body)
				}
				t0 := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				r, err := p.SendSync(ctx, msgs...)
				cancel()
				if err != nil || r.Status != primitive.SendOK {
					failed.Add(int64(per))
					continue
				}
				mine = append(mine, time.Since(t0))
				sent.Add(int64(per))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return summarize(sent.Load(), failed.Load(), o.size, time.Since(start), lat), nil
}

func consume(o options) (summary, error) {
	if o.count <= 0 {
		return summary{}, fmt.Errorf("consume needs --count")
	}
	var got atomic.Int64
	done := make(chan struct{})
	var once sync.Once
	c, err := consumer.NewPushConsumer(consumer.WithNsResolver(primitive.NewPassthroughResolver([]string{o.namesrv})),
		consumer.WithGroupName(o.group), consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
		consumer.WithConsumeGoroutineNums(o.clients))
	if err != nil {
		return summary{}, err
	}
	err = c.Subscribe(o.topic, consumer.MessageSelector{Type: consumer.TAG, Expression: "*"}, func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		if got.Add(int64(len(msgs))) >= int64(o.count) {
			once.Do(func() { close(done) })
		}
		return consumer.ConsumeSuccess, nil
	})
	if err != nil {
		return summary{}, err
	}
	start := time.Now()
	if err := c.Start(); err != nil {
		return summary{}, err
	}
	defer c.Shutdown()
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		return summary{}, fmt.Errorf("%d of %d messages in 5 minutes", got.Load(), o.count)
	}
	return summarize(got.Load(), 0, o.size, time.Since(start), nil), nil
}

func summarize(n, failed int64, size int, took time.Duration, lat []time.Duration) summary {
	s := summary{Sent: n, Failed: failed, MsgsPerSec: float64(n) / took.Seconds()}
	s.MBPerSec = s.MsgsPerSec * float64(size) / (1 << 20)
	if len(lat) > 0 {
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		q := func(p float64) *float64 {
			ms := float64(lat[int(p*float64(len(lat)-1))]) / float64(time.Millisecond)
			return &ms
		}
		s.P50, s.P90, s.P99, s.Max = q(0.5), q(0.9), q(0.99), q(1)
	}
	return s
}
