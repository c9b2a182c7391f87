package rocketmq

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
)

// byName decides a transaction by its body: commit-/rollback- at once,
// open- left unknown until the check-back, which answers as the name after
// open- says. It records the check-backs it was asked.
type byName struct {
	mu      sync.Mutex
	checked map[string]bool
}

func (l *byName) ExecuteLocalTransaction(m *primitive.Message) primitive.LocalTransactionState {
	switch b := string(m.Body); {
	case strings.HasPrefix(b, "commit-"):
		return primitive.CommitMessageState
	case strings.HasPrefix(b, "rollback-"):
		return primitive.RollbackMessageState
	}
	return primitive.UnkonwnState
}

func (l *byName) CheckLocalTransaction(m *primitive.MessageExt) primitive.LocalTransactionState {
	l.mu.Lock()
	l.checked[string(m.Body)] = true
	l.mu.Unlock()
	if strings.HasPrefix(string(m.Body), "open-commit-") {
		return primitive.CommitMessageState
	}
	return primitive.RollbackMessageState
}

// The official transaction producer against raftmq (codes 37 and 39): what
// it commits is delivered once, what it rolls back never, and the halves
// it leaves unknown are checked back on its connection and decided by its
// answers.
func TestOfficialTransactionProducerCommitsRollsBackAndIsCheckedBack(t *testing.T) {
	// The client heartbeats a broker 1 s after it starts and then every 30
	// s: the check interval gives a late first heartbeat time, before the
	// 15th check rolls an open half back.
	ns := startDev(t, "--transaction-timeout", "300ms", "--transaction-check-interval", "3s")
	raftmq(t, "topic", "create", "--namesrv", ns, "--name", "tx-rmq", "--queues", "2")
	waitRoute(t, ns, "tx-rmq")
	listener := &byName{checked: map[string]bool{}}
	p, err := rocketmq.NewTransactionProducer(listener, producer.WithNsResolver(primitive.NewPassthroughResolver([]string{ns})),
		producer.WithGroupName("tx-rmq-producers"), producer.WithRetry(2), producer.WithSendMsgTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown()
	const n = 4
	want := map[string]bool{}
	for i := range n {
		for _, kind := range []string{"commit", "rollback", "open-commit", "open-rollback"} {
			body := fmt.Sprintf("%s-%d", kind, i)
			r, err := p.SendMessageInTransaction(context.Background(), primitive.NewMessage("tx-rmq", []byte(body)))
			if err != nil || r.Status != primitive.SendOK {
				t.Fatalf("SendMessageInTransaction %s: %v %v", body, r, err)
			}
			if strings.HasSuffix(kind, "commit") {
				want[body] = true
			}
		}
	}
	got := consumeNatively(t, ns, "tx-rmq", len(want))
	for body := range got {
		if !want[body] {
			t.Errorf("%s delivered: it was rolled back", body)
		}
	}
	for body := range want {
		if got[body] == nil {
			t.Errorf("%s not delivered", body)
		}
	}
	waitUntil(t, 60*time.Second, "every open half checked back", func() bool {
		listener.mu.Lock()
		defer listener.mu.Unlock()
		return len(listener.checked) >= 2*n
	})
	// The open halves answered rollback ended: a consumer that reads the
	// topic again finds only the committed ones.
	again, err := raftmqOut("consume", "--namesrv", ns, "--topic", "tx-rmq", "--group", "again", "--count", fmt.Sprint(len(want)+1), "--timeout", "3s", "--json")
	read := 0
	for _, line := range strings.Split(again, "\n") {
		if strings.HasPrefix(line, "{") {
			read++
		}
	}
	if read != len(want) {
		t.Fatalf("the topic read again holds %d messages, want %d (%v):\n%s", read, len(want), err, again)
	}
}
