package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/raftmq/raftmq/client"
	"github.com/raftmq/raftmq/cluster/pb"
)

func consumeCommand() *cobra.Command {
	var (
		ns, topic, group, tag, from string
		count                       int
		timeout                     time.Duration
		asJSON                      bool
	)
	cmd := &cobra.Command{
		Use:   "consume",
		Short: "print a topic's messages as a consumer group reads them",
		Long: `Read a topic's queues as consumer group --group and print one line per message:
<msgId> <group>/<queue>@<queueOffset> tags=<tags> keys=<keys> body=<body>
With --json, one object per message: topic, group, queue, queueOffset, msgId,
tags, keys, properties, reconsumeTimes, bornTime and storeTime (unix ms), body
(a string when it is UTF-8, else base64 with "bodyBase64": true).

A queue the group has a committed offset for resumes there; others start at
--from: first, last, or a time (RFC 3339, or unix milliseconds). Stops after
--count messages, at --timeout, or on Ctrl-C, committing offsets first.
This command reads every queue itself; the push consumer with rebalancing
among a group's members is the client SDK's.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if topic == "" || group == "" {
				return errors.New("--topic and --group are required")
			}
			nsAddrs, err := nameServerAddrs(ns)
			if err != nil {
				return err
			}
			opts, err := clientOptions(nsAddrs, client.WithGroup(group))
			if err != nil {
				return err
			}
			pc, err := client.NewPullConsumer(opts...)
			if err != nil {
				return err
			}
			if err := pc.Start(); err != nil {
				return err
			}
			defer pc.Shutdown()
			ctx, cancel := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer cancel()
			if timeout > 0 {
				var tcancel context.CancelFunc
				ctx, tcancel = context.WithTimeout(ctx, timeout)
				defer tcancel()
			}
			return consume(ctx, pc, topic, tag, from, count, asJSON)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&ns, "namesrv", "", "name server addresses HOST:PORT[,HOST:PORT] (default $RAFTMQ_NAMESRV)")
	clientTLSFlags(cmd)
	fl.StringVar(&topic, "topic", "", "topic")
	fl.StringVar(&group, "group", "", "consumer group")
	fl.StringVar(&tag, "tag", "*", `tag expression: "*" or "TagA || TagB"`)
	fl.StringVar(&from, "from", "first", "where a queue without a committed offset starts: first, last, or a time")
	fl.IntVar(&count, "count", 0, "stop after this many messages (0: no limit)")
	fl.DurationVar(&timeout, "timeout", 0, "stop after this long (0: no limit)")
	fl.BoolVar(&asJSON, "json", false, "print one JSON object per message")
	return cmd
}

// startOffset is where the group reads mq from.
func startOffset(ctx context.Context, pc *client.PullConsumer, mq client.MessageQueue, from string) (int64, error) {
	if off, err := pc.FetchOffset(ctx, mq); err != nil || off >= 0 {
		return off, err
	}
	min, max, err := pc.Offsets(ctx, mq)
	if err != nil {
		return 0, err
	}
	switch from {
	case "first":
		return min, nil
	case "last":
		return max, nil
	}
	t, err := time.Parse(time.RFC3339, from)
	if err != nil {
		ms, perr := strconv.ParseInt(from, 10, 64)
		if perr != nil {
			return 0, fmt.Errorf("--from %q: want first, last, an RFC 3339 time or unix milliseconds", from)
		}
		t = time.UnixMilli(ms)
	}
	return pc.OffsetForTime(ctx, mq, t)
}

func consume(ctx context.Context, pc *client.PullConsumer, topic, tag, from string, count int, asJSON bool) error {
	// A topic created a moment ago (on first send, in dev) reaches the name
	// servers' routes within a second or two: wait for it a little.
	mqs, err := pc.Queues(ctx, topic)
	for deadline := time.Now().Add(10 * time.Second); err != nil && time.Now().Before(deadline); {
		if reason, _ := pb.ReasonOf(err); reason != pb.ErrorReason_TOPIC_NOT_FOUND {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
		if ctx.Err() != nil {
			break
		}
		mqs, err = pc.Queues(ctx, topic)
	}
	if reason, _ := pb.ReasonOf(err); reason == pb.ErrorReason_TOPIC_NOT_FOUND || err != nil && ctx.Err() != nil && len(mqs) == 0 {
		return fmt.Errorf("topic %q does not exist: no name server routes it", topic)
	}
	if err != nil {
		return err
	}
	type pulled struct {
		msgs []*client.MessageExt
	}
	results := make(chan pulled)
	pullCtx, stopPulls := context.WithCancel(ctx)
	var wg sync.WaitGroup
	next := map[client.MessageQueue]int64{} // next offset to commit, per queue
	for _, mq := range mqs {
		off, err := startOffset(ctx, pc, mq, from)
		if err != nil {
			stopPulls()
			wg.Wait()
			return fmt.Errorf("queue %s/%d: %w", mq.Group, mq.QueueID, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for pullCtx.Err() == nil {
				r, err := pc.PullBlocking(pullCtx, mq, tag, off, 32, 15*time.Second)
				if err != nil {
					if !ended(pullCtx) {
						fmt.Fprintf(os.Stderr, "pull %s/%d: %v\n", mq.Group, mq.QueueID, err)
						select {
						case <-pullCtx.Done():
						case <-time.After(time.Second):
						}
					}
					continue
				}
				off = r.NextOffset
				if len(r.Messages) == 0 {
					continue
				}
				select {
				case results <- pulled{r.Messages}:
				case <-pullCtx.Done():
					return
				}
			}
		}()
	}
	printed := 0
loop:
	for count == 0 || printed < count {
		select {
		case <-ctx.Done():
			break loop
		case p := <-results:
			for _, m := range p.msgs {
				if count > 0 && printed == count {
					break
				}
				printMessage(m, asJSON)
				next[m.Queue] = m.QueueOffset + 1
				printed++
			}
		}
	}
	stopPulls()
	wg.Wait()
	// Commit what was printed, even after Ctrl-C.
	commitCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for mq, off := range next {
		if err := pc.CommitOffset(commitCtx, mq, off); err != nil {
			return fmt.Errorf("commit offset of %s/%d: %w", mq.Group, mq.QueueID, err)
		}
	}
	return nil
}

func printMessage(m *client.MessageExt, asJSON bool) {
	if !asJSON {
		fmt.Printf("%s %s/%d@%d tags=%s keys=%s body=%s\n", m.MsgID, m.Queue.Group, m.Queue.QueueID, m.QueueOffset,
			m.Tags, strings.Join(m.Keys, ","), strconv.Quote(string(m.Body)))
		return
	}
	keys := m.Keys
	if keys == nil {
		keys = []string{}
	}
	obj := map[string]any{
		"topic": m.Topic, "group": m.Queue.Group, "queue": m.Queue.QueueID, "queueOffset": m.QueueOffset,
		"msgId": m.MsgID, "tags": m.Tags, "keys": keys, "properties": m.Properties, "reconsumeTimes": m.ReconsumeTimes,
		"bornTime": m.BornTime.UnixMilli(), "storeTime": m.StoreTime.UnixMilli(),
	}
	if utf8.Valid(m.Body) {
		obj["body"] = string(m.Body)
	} else {
		obj["body"], obj["bodyBase64"] = base64.StdEncoding.EncodeToString(m.Body), true
	}
	b, _ := json.Marshal(obj)
	fmt.Println(string(b))
}

// ended reports whether ctx is done or past its deadline: gRPC may fail a
// call on the deadline a moment before the context itself says so.
func ended(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}
