package client

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftmq/raftmq/broker"
)

// Client-side throughput against an in-process group of 3 replicas (real
// gRPC on loopback, real Raft, fsync on). Run:
//
//	go test ./client -run '^$' -bench . -benchtime 20000x -count 3

func benchCluster(b *testing.B) *testCluster {
	c := newCluster(b, 1, 3, func(cfg *broker.Config) {
		cfg.Store.SegmentSize = 256 << 20
		cfg.Store.IndexSlots, cfg.Store.IndexEntries, cfg.Store.QueueEntriesPerFile = 0, 0, 0
	})
	c.createTopic("bench", 8)
	return c
}

func peakRSS(b *testing.B) {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			kb, _ := strconv.Atoi(strings.Fields(line)[1])
			b.ReportMetric(float64(kb)/1024, "peakRSS_MB")
		}
	}
}

func benchBody() []byte { return []byte(strings.Repeat("x", 1024)) }

// BenchmarkClientProduce: 1 KiB messages, sync with 16 senders, async, and
// batches of 32.
func BenchmarkClientProduce(b *testing.B) {
	for _, mode := range []string{"sync16", "async", "batch32"} {
		b.Run(mode, func(b *testing.B) {
			c := benchCluster(b)
			p := c.producer(WithSendTimeout(10 * time.Second))
			defer p.Shutdown()
			body := benchBody()
			ctx := context.Background()
			var failed atomic.Int64
			b.SetBytes(1024)
			b.ResetTimer()
			start := time.Now()
			switch mode {
			case "sync16":
				var next atomic.Int64
				var wg sync.WaitGroup
				for s := 0; s < 16; s++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for next.Add(1) <= int64(b.N) {
							if _, err := p.Send(ctx, &Message{Topic: "bench", Body: body}); err != nil {
								failed.Add(1)
							}
						}
					}()
				}
				wg.Wait()
			case "async":
				var wg sync.WaitGroup
				sem := make(chan struct{}, 256) // bound what is in flight
				for i := 0; i < b.N; i++ {
					sem <- struct{}{}
					wg.Add(1)
					p.SendAsync(ctx, &Message{Topic: "bench", Body: body}, func(_ *SendResult, err error) {
						if err != nil {
							failed.Add(1)
						}
						<-sem
						wg.Done()
					})
				}
				wg.Wait()
			case "batch32":
				var next atomic.Int64
				var wg sync.WaitGroup
				for s := 0; s < 8; s++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						batch := make([]*Message, 32)
						for i := range batch {
							batch[i] = &Message{Topic: "bench", Body: body}
						}
						for next.Add(32) <= int64(b.N)+31 {
							if _, err := p.SendBatch(ctx, batch); err != nil {
								failed.Add(32)
							}
						}
					}()
				}
				wg.Wait()
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
			b.ReportMetric(float64(failed.Load()), "failed")
			peakRSS(b)
		})
	}
}

// BenchmarkClientConsume: a push consumer reading b.N stored 1 KiB
// messages from the first offset.
func BenchmarkClientConsume(b *testing.B) {
	c := benchCluster(b)
	p := c.producer(WithSendTimeout(10 * time.Second))
	batch := make([]*Message, 256)
	for i := range batch {
		batch[i] = &Message{Topic: "bench", Body: benchBody()}
	}
	for sent := 0; sent < b.N; sent += len(batch) {
		if _, err := p.SendBatch(context.Background(), batch); err != nil {
			b.Fatal(err)
		}
	}
	p.Shutdown()
	var got atomic.Int64
	done := make(chan struct{})
	b.SetBytes(1024)
	b.ResetTimer()
	start := time.Now()
	cfg := fastPush(fmt.Sprint("bench-", b.N))
	cfg.BatchSize = 32
	pc := c.pushConsumer(cfg, "bench", func(_ context.Context, msgs []*MessageExt) ConsumeResult {
		if got.Add(int64(len(msgs))) >= int64(b.N) {
			select {
			case <-done:
			default:
				close(done)
			}
		}
		return ConsumeSuccess
	})
	<-done
	b.ReportMetric(float64(got.Load())/time.Since(start).Seconds(), "msgs/s")
	b.StopTimer()
	pc.Shutdown()
	peakRSS(b)
}
