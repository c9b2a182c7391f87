package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/raftmq/raftmq/client"
)

// consumerChildEnv makes the test binary a push consumer of the drill's
// group (runConsumerChild): a process a drill can kill -9.
const consumerChildEnv = "RAFTMQ_E2E_PUSH_CONSUMER"

// consumerSpec is what a consumer child needs.
type consumerSpec struct {
	NameServers []string
	ClientID    string
}

// consumed is one line of a consumer child's stdout: a message it
// consumed.
type consumed struct {
	Body   string
	Queue  string
	Offset int64
}

// runConsumerChild runs a push consumer of group drill on topic drill, as
// the drill's own consumers are configured, and prints each message it
// consumes as a JSON line, until it is killed.
func runConsumerChild(spec string) {
	var s consumerSpec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		fmt.Println("bad spec:", err)
		os.Exit(2)
	}
	pc, err := client.NewPushConsumer(client.PushConfig{ConsumeFrom: client.ConsumeFromFirst, ClientID: s.ClientID,
		RebalanceInterval: 200 * time.Millisecond, HeartbeatInterval: 100 * time.Millisecond, CommitInterval: 100 * time.Millisecond,
		PullSuspend: time.Second, ErrorBackoff: 200 * time.Millisecond}, client.WithNameServers(s.NameServers...), client.WithGroup("drill"))
	if err != nil {
		fmt.Println("consumer:", err)
		os.Exit(2)
	}
	var mu sync.Mutex
	out := json.NewEncoder(os.Stdout)
	pc.Subscribe("drill", "*", func(_ context.Context, msgs []*client.MessageExt) client.ConsumeResult {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			out.Encode(consumed{Body: string(m.Body), Queue: fmt.Sprintf("%s/%d", m.Queue.Group, m.Queue.QueueID), Offset: m.QueueOffset})
		}
		return client.ConsumeSuccess
	})
	if err := pc.Start(); err != nil {
		fmt.Println("consumer:", err)
		os.Exit(2)
	}
	select {}
}

// startConsumer starts a consumer child named id and records what it
// consumes in h until it ends. The returned function kill -9s it and waits
// until everything it printed is recorded.
func startConsumer(t *testing.T, nameServers []string, id string, h *History) (kill func()) {
	spec, _ := json.Marshal(consumerSpec{NameServers: nameServers, ClientID: id})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), consumerChildEnv+"="+string(spec))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var c consumed
			if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
				t.Errorf("consumer %s printed %q", id, sc.Text())
				continue
			}
			h.Delivered(Delivery{Body: c.Body, Queue: c.Queue, Offset: c.Offset, Consumer: id})
		}
	}()
	var once sync.Once
	kill = func() {
		once.Do(func() {
			cmd.Process.Kill()
			<-read
			cmd.Wait()
		})
	}
	t.Cleanup(kill)
	return kill
}

// Consumers killed (kill -9) while their group rebalances: three times a
// new member joins, the group starts moving queues to it, and it dies
// before the move settles, holding queues and uncommitted messages. The
// group takes its queues back at once (its broker connection closed)
// rather than when its heartbeats expire (ConsumerExpiry, 2 minutes), so
// every acknowledged message is consumed; what the dead member consumed
// and had not committed is delivered again, and counted.
func TestDrillConsumersKilledMidRebalance(t *testing.T) {
	c := newProcCluster(t)
	runDrillWith(t, "consumers killed mid-rebalance x3", c, func(h *History) {
		for round := range 3 {
			kill := startConsumer(t, c.nameServers(), fmt.Sprintf("k%d", round), h)
			time.Sleep(700 * time.Millisecond) // mid-rebalance: a chosen moment
			kill()
			time.Sleep(500 * time.Millisecond)
		}
	})
}
