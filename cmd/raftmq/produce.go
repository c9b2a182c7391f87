package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/raftmq/raftmq/client"
)

func produceCommand() *cobra.Command {
	var (
		ns, topic, tag, key, body, mode string
		count, size, batchSize          int
		asJSON                          bool
		timeout, delay                  time.Duration
		deliverAt                       string
		delayLevel                      int
		transaction, producerGroup      string
	)
	cmd := &cobra.Command{
		Use:   "produce",
		Short: "send messages: --body, --count N --size B, or one per line of stdin",
		Long: `Send messages to a topic. With --body, send it (--count times, default once);
with --count and --size, send that many generated bodies of that size; with
neither, send each line of stdin as one message.

--mode batch sends --batch messages at a time (the last batch may be
shorter), each batch stored atomically, in order, in one queue.

Timer messages: --delay D delivers each message D after the broker stores
it, --deliver-at T at the time T (RFC 3339), --delay-level N after
RocketMQ's delay level N (1s 5s 10s 30s 1m ... 2h). The ack comes at once,
naming the message's copy held until it is due; the delivered message
carries that id in its ORIGIN_MESSAGE_ID property.

Transactional messages: --transaction commit|rollback|unknown sends each
message as a half message of producer group --producer-group, then ends its
transaction so (unknown leaves it open: the broker checks it back with the
group's producers, and rolls it back after its last check when none
answers). Each prints OK <msgId> <group> <queue> <queueOffset> <outcome>:
the committed message's id and offsets for commit, the half's otherwise;
with --json, "transaction" and "halfMsgId" are added. --mode sync only.

Each acknowledged message prints one line: OK <msgId> <group> <queue> <queueOffset>
(one-way sends print nothing per message). With --json each prints one JSON
object {"body","msgId","group","queue","queueOffset"}, and each failure one
with an "error" field. The exit status is 1 when any send failed.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if topic == "" {
				return errors.New("--topic is required")
			}
			if mode != "sync" && mode != "async" && mode != "oneway" && mode != "batch" {
				return fmt.Errorf("--mode %q: want sync, async, oneway or batch", mode)
			}
			if batchSize < 1 {
				return fmt.Errorf("--batch %d: want at least 1", batchSize)
			}
			if body != "" && cmd.Flags().Changed("size") {
				return errors.New("give --body or --size, not both")
			}
			var due time.Time
			if deliverAt != "" {
				var err error
				if due, err = time.Parse(time.RFC3339Nano, deliverAt); err != nil {
					return fmt.Errorf("--deliver-at %q: want an RFC 3339 time, like 2026-12-24T18:00:00Z", deliverAt)
				}
			}
			if asked := btoi(delay != 0) + btoi(!due.IsZero()) + btoi(delayLevel != 0); asked > 1 {
				return errors.New("give one of --delay, --deliver-at and --delay-level")
			}
			if delay < 0 || delayLevel < 0 {
				return errors.New("--delay and --delay-level must not be negative")
			}
			txState, err := localTransactionState(transaction)
			if err != nil {
				return err
			}
			if transaction != "" && mode != "sync" {
				return fmt.Errorf("--transaction sends with --mode sync only, not %s", mode)
			}
			newMessage := func(b string) *client.Message {
				m := &client.Message{Topic: topic, Tags: tag, Body: []byte(b)}
				if key != "" {
					m.Keys = []string{key}
				}
				switch {
				case delay > 0:
					m.WithDelay(delay)
				case !due.IsZero():
					m.WithDeliverTime(due)
				case delayLevel > 0:
					m.WithDelayTimeLevel(delayLevel)
				}
				return m
			}
			nsAddrs, err := nameServerAddrs(ns)
			if err != nil {
				return err
			}
			opts, err := clientOptions(nsAddrs, client.WithSendTimeout(timeout))
			if err != nil {
				return err
			}
			out := &producePrinter{json: asJSON}
			if transaction != "" {
				return produceInTransaction(cmd.Context(), append(opts, client.WithGroup(producerGroup)), txState, out,
					func() <-chan string { return bodies(body, count, size) }, newMessage)
			}
			p, err := client.NewProducer(opts...)
			if err != nil {
				return err
			}
			if err := p.Start(); err != nil {
				return err
			}
			ctx := cmd.Context()
			var wg sync.WaitGroup
			var batch []string
			flush := func() {
				if len(batch) == 0 {
					return
				}
				msgs := make([]*client.Message, len(batch))
				for i, b := range batch {
					msgs[i] = newMessage(b)
				}
				rs, err := p.SendBatch(ctx, msgs)
				for i, b := range batch {
					if err != nil {
						out.print(b, nil, err)
					} else {
						out.print(b, rs[i], nil)
					}
				}
				batch = batch[:0]
			}
			for b := range bodies(body, count, size) {
				if mode == "batch" {
					if batch = append(batch, b); len(batch) == batchSize {
						flush()
					}
					continue
				}
				m := newMessage(b)
				switch mode {
				case "sync":
					r, err := p.Send(ctx, m)
					out.print(b, r, err)
				case "async":
					wg.Add(1)
					err := p.SendAsync(ctx, m, func(r *client.SendResult, err error) {
						defer wg.Done()
						out.print(b, r, err)
					})
					if err != nil {
						wg.Done()
						out.print(b, nil, err)
					}
				case "oneway":
					if err := p.SendOneway(ctx, m); err != nil {
						out.print(b, nil, err)
					}
				}
			}
			flush()
			wg.Wait()
			if err := p.Shutdown(); err != nil {
				return err
			}
			if out.failed > 0 {
				return fmt.Errorf("%d of the sends failed", out.failed)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&ns, "namesrv", "", "name server addresses HOST:PORT[,HOST:PORT] (default $RAFTMQ_NAMESRV)")
	clientTLSFlags(cmd)
	fl.StringVar(&topic, "topic", "", "topic")
	fl.StringVar(&tag, "tag", "", "tag of every message")
	fl.StringVar(&key, "key", "", "key of every message")
	fl.StringVar(&body, "body", "", "message body")
	fl.IntVar(&count, "count", 0, "number of messages")
	fl.IntVar(&size, "size", 128, "body size of generated messages (with --count)")
	fl.StringVar(&mode, "mode", "sync", "sync, async, oneway or batch")
	fl.IntVar(&batchSize, "batch", 32, "messages per batch (--mode batch)")
	fl.BoolVar(&asJSON, "json", false, "print one JSON object per message")
	fl.DurationVar(&timeout, "timeout", 3*time.Second, "per-send timeout, retries included")
	fl.DurationVar(&delay, "delay", 0, "deliver each message this long after the broker stores it")
	fl.StringVar(&deliverAt, "deliver-at", "", "deliver each message at this time (RFC 3339)")
	fl.IntVar(&delayLevel, "delay-level", 0, "deliver each message after this RocketMQ delay level (1-18)")
	fl.StringVar(&transaction, "transaction", "", "send each message in a transaction and end it so: commit, rollback or unknown")
	fl.StringVar(&producerGroup, "producer-group", "raftmq-cli", "producer group of --transaction's half messages")
	return cmd
}

// bodies yields the bodies produce sends: body count times, count
// generated ones of size bytes, or the lines of stdin.
func bodies(body string, count, size int) <-chan string {
	out := make(chan string)
	go func() {
		defer close(out)
		switch {
		case body != "":
			for i := 0; i < max(count, 1); i++ {
				out <- body
			}
		case count > 0:
			for i := 0; i < count; i++ {
				out <- generatedBody(i, size)
			}
		default:
			sc := bufio.NewScanner(os.Stdin)
			sc.Buffer(make([]byte, 64<<10), 8<<20)
			for sc.Scan() {
				out <- sc.Text()
			}
		}
	}()
	return out
}

func localTransactionState(s string) (client.LocalTransactionState, error) {
	switch s {
	case "", "unknown":
		return client.UnknownState, nil
	case "commit":
		return client.CommitMessageState, nil
	case "rollback":
		return client.RollbackMessageState, nil
	}
	return 0, fmt.Errorf("--transaction %q: want commit, rollback or unknown", s)
}

// fixedOutcome is the CLI's transaction listener: every local transaction
// ends as --transaction says; a check-back finds nothing to say.
type fixedOutcome client.LocalTransactionState

func (o fixedOutcome) ExecuteLocalTransaction(*client.Message) client.LocalTransactionState {
	return client.LocalTransactionState(o)
}

func (fixedOutcome) CheckLocalTransaction(*client.MessageExt) client.LocalTransactionState {
	return client.UnknownState
}

// produceInTransaction sends each body as a half message and ends it as
// state says.
func produceInTransaction(ctx context.Context, opts []client.Option, state client.LocalTransactionState, out *producePrinter,
	bodies func() <-chan string, newMessage func(string) *client.Message) error {
	tp, err := client.NewTransactionProducer(fixedOutcome(state), opts...)
	if err != nil {
		return err
	}
	if err := tp.Start(); err != nil {
		return err
	}
	for b := range bodies() {
		r, err := tp.SendMessageInTransaction(ctx, newMessage(b))
		out.printTransaction(b, r, err)
	}
	if err := tp.Shutdown(); err != nil {
		return err
	}
	if out.failed > 0 {
		return fmt.Errorf("%d of the sends failed", out.failed)
	}
	return nil
}

// generatedBody is body i of size bytes: a recognizable prefix, padded.
func generatedBody(i, size int) string {
	s := fmt.Sprintf("message-%d", i)
	if len(s) >= size {
		return s
	}
	return s + strings.Repeat("x", size-len(s))
}

// producePrinter prints send outcomes, one line each, from any goroutine.
type producePrinter struct {
	mu     sync.Mutex
	json   bool
	failed int
}

func (p *producePrinter) print(body string, r *client.SendResult, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.failed++
	}
	if !p.json {
		if err != nil {
			fmt.Fprintf(os.Stderr, "FAILED %v\n", err)
		} else {
			fmt.Printf("OK %s %s %d %d\n", r.MsgID, r.Queue.Group, r.Queue.QueueID, r.QueueOffset)
		}
		return
	}
	obj := map[string]any{"body": jsonBody(body)}
	if err != nil {
		obj["error"] = err.Error()
	} else {
		obj["msgId"], obj["group"], obj["queue"], obj["queueOffset"] = r.MsgID, r.Queue.Group, r.Queue.QueueID, r.QueueOffset
	}
	b, _ := json.Marshal(obj)
	fmt.Println(string(b))
}

// printTransaction prints a transactional send: the committed message
// for a commit, the half otherwise, with the outcome.
func (p *producePrinter) printTransaction(body string, r *client.TransactionSendResult, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.failed++
	}
	var shown *client.SendResult
	if r != nil {
		shown = &r.SendResult
		if r.Committed != nil {
			shown = r.Committed
		}
	}
	if !p.json {
		if shown == nil {
			fmt.Fprintf(os.Stderr, "FAILED %v\n", err)
			return
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "FAILED to end the transaction of %s (a check-back will): %v\n", r.MsgID, err)
			return
		}
		fmt.Printf("OK %s %s %d %d %s\n", shown.MsgID, shown.Queue.Group, shown.Queue.QueueID, shown.QueueOffset, r.State)
		return
	}
	obj := map[string]any{"body": jsonBody(body)}
	if err != nil {
		obj["error"] = err.Error()
	}
	if shown != nil {
		obj["msgId"], obj["group"], obj["queue"], obj["queueOffset"] = shown.MsgID, shown.Queue.Group, shown.Queue.QueueID, shown.QueueOffset
		obj["transaction"], obj["halfMsgId"] = r.State.String(), r.MsgID
	}
	b, _ := json.Marshal(obj)
	fmt.Println(string(b))
}

func jsonBody(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
