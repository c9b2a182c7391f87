package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftmq/raftmq/client"
	"github.com/raftmq/raftmq/cluster/clustertest"
)

// byPrefix is a transaction listener that decides by the body's prefix:
// commit-/rollback- at once, open- not yet (left to a check-back); on a
// check-back, when answering is on, as the name after open- says (a
// commit-/rollback- half is checked back when its end failed). It records
// the checks it was asked.
type byPrefix struct {
	answer  bool
	mu      sync.Mutex
	checked map[string]int
}

func (l *byPrefix) ExecuteLocalTransaction(m *client.Message) client.LocalTransactionState {
	switch b := string(m.Body); {
	case strings.HasPrefix(b, "commit-"):
		return client.CommitMessageState
	case strings.HasPrefix(b, "rollback-"):
		return client.RollbackMessageState
	}
	return client.UnknownState
}

func (l *byPrefix) CheckLocalTransaction(m *client.MessageExt) client.LocalTransactionState {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.checked[string(m.Body)]++
	if !l.answer {
		return client.UnknownState
	}
	switch b := strings.TrimPrefix(string(m.Body), "open-"); {
	case strings.HasPrefix(b, "commit-"):
		return client.CommitMessageState
	case strings.HasPrefix(b, "rollback-"):
		return client.RollbackMessageState
	}
	return client.UnknownState
}

// checkedOpen is how many open- halves it was asked about.
func (l *byPrefix) checkedOpen() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for b := range l.checked {
		if strings.HasPrefix(b, "open-") {
			n++
		}
	}
	return n
}

// Transactions through a real 3-replica group, its master killed -9 in the
// middle: every committed message is stored once, no rolled-back one is,
// and halves the first producer left open are checked back with a second
// producer instance of its group, started after the first one died, whose
// answers decide them.
func TestTransactionsAcrossMasterKill(t *testing.T) {
	c := procClusterAddrs(t)
	c.brokerFlags = []string{"--transaction-timeout", "500ms", "--transaction-check-interval", "500ms", "--transaction-check-max", "100"}
	c.run()
	c.createTopic(t, "tx", 2)
	opts := append([]client.Option{client.WithNameServers(c.nameServers()...), client.WithGroup("tx-producers"),
		client.WithSendTimeout(10 * time.Second), client.WithAttemptTimeout(time.Second), client.WithRetries(20)}, c.clientOptions()...)
	first := &byPrefix{checked: map[string]int{}}
	tp, err := client.NewTransactionProducer(first, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := tp.Start(); err != nil {
		t.Fatal(err)
	}
	const n = 20
	ctx := context.Background()
	var ended, failedEnds int
	send := func(from, to int) {
		for i := from; i < to; i++ {
			for _, kind := range []string{"commit", "rollback", "open-commit", "open-rollback"} {
				r, err := tp.SendMessageInTransaction(ctx, &client.Message{Topic: "tx", Body: []byte(fmt.Sprintf("%s-%d", kind, i))})
				switch {
				case r == nil:
					t.Fatalf("half %s-%d not stored: %v", kind, i, err)
				case err != nil:
					failedEnds++ // the half is stored; a check-back ends it
				case r.State != client.UnknownState:
					ended++
				}
			}
		}
	}
	send(0, n/2)
	victim := c.master()
	c.kill(victim)
	send(n/2, n)
	if err := tp.Shutdown(); err != nil { // the first producer dies, open halves left behind
		t.Fatal(err)
	}
	c.start(victim)
	t.Logf("%d transactions ended by the first producer, %d ends failed", ended, failedEnds)

	second := &byPrefix{answer: true, checked: map[string]int{}}
	tp2, err := client.NewTransactionProducer(second, append(opts, client.WithTransactionTopics("tx"))...)
	if err != nil {
		t.Fatal(err)
	}
	if err := tp2.Start(); err != nil {
		t.Fatal(err)
	}
	defer tp2.Shutdown()

	want := map[string]bool{}
	for i := range n {
		want[fmt.Sprintf("commit-%d", i)] = true
		want[fmt.Sprintf("open-commit-%d", i)] = true
	}
	var stored map[string]int
	clustertest.WaitFor(t, 60*time.Second, "every committed message stored", func() bool {
		stored = readTopic(t, opts, "tx")
		for b := range want {
			if stored[b] == 0 {
				return false
			}
		}
		return true
	})
	// The open halves answered rollback are ended too: none is left to check.
	clustertest.WaitFor(t, 30*time.Second, "every open half checked back with the second producer", func() bool {
		return second.checkedOpen() == 2*n
	})
	stored = readTopic(t, opts, "tx")
	for b, copies := range stored {
		switch {
		case !want[b]:
			t.Errorf("%s stored %d times: it was rolled back", b, copies)
		case copies != 1:
			t.Errorf("%s stored %d times", b, copies)
		}
	}
	if n := first.checkedOpen(); n != 0 {
		t.Logf("the first producer was asked about %d open halves before it stopped", n)
	}
	if len(stored) != len(want) {
		t.Fatalf("%d messages stored, want %d", len(stored), len(want))
	}
}

// readTopic reads every queue of topic from its first offset and counts
// each body's copies.
func readTopic(t *testing.T, opts []client.Option, topic string) map[string]int {
	pc, err := client.NewPullConsumer(append(opts, client.WithGroup("tx-readback"))...)
	if err != nil {
		t.Fatal(err)
	}
	pc.Start()
	defer pc.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := map[string]int{}
	queues, err := pc.Queues(ctx, topic)
	if err != nil {
		t.Logf("queues of %s: %v", topic, err)
		return out
	}
	for _, mq := range queues {
		for off := int64(0); ; {
			r, err := pc.Pull(ctx, mq, "*", off, 32)
			if err != nil {
				t.Logf("pull %v at %d: %v", mq, off, err)
				return out
			}
			if len(r.Messages) == 0 {
				break
			}
			for _, m := range r.Messages {
				out[string(m.Body)]++
			}
			off = r.NextOffset
		}
	}
	return out
}
