package broker

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/message"
)

// A timer taken down the ladder hop by hop, each hop the delay of the
// queue it goes into, arrives at its time or less than one precision
// later, in at most one hop per power of 8 plus the longest hops.
func TestTimerLadderNeverFiresEarly(t *testing.T) {
	const precision, horizon, longest = 100 * time.Millisecond, 7 * 24 * time.Hour, 36 * time.Hour
	l := newTimerLadder(precision, longest)
	if l[0] != precision || l[len(l)-1] > longest || len(l) != 46 {
		t.Fatalf("ladder from %s to %s, %d queues", l[0], l[len(l)-1], len(l))
	}
	for i := 1; i < len(l); i++ {
		if l[i] <= l[i-1] {
			t.Fatalf("ladder not ascending at %d: %s after %s", i, l[i], l[i-1])
		}
	}
	maxHops := int(horizon/l[len(l)-1]) + 1 + 7 // the longest hops, then one per power of 8 below
	rng := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		target := time.Duration(rng.Int64N(int64(horizon))) + time.Millisecond
		at, hops := time.Duration(0), 0
		for at < target {
			q := l.queueFor(target - at)
			at += l[q-timerQueueBase]
			hops++
		}
		if at-target >= precision || hops > maxHops {
			t.Fatalf("timer %s after %d hops at %s: %s late", target, hops, at, at-target)
		}
	}
}

// The properties are read as RocketMQ's broker reads them.
func TestDelayAskedReadsRocketMQsProperties(t *testing.T) {
	delays, _ := parseDelayLevels("1s 5s 10s")
	b := &Broker{cfg: Config{TimerHorizon: time.Hour}, delays: delays}
	now := time.UnixMilli(1_800_000_000_000)
	for _, c := range []struct {
		props map[string]string
		level int32
		due   time.Time
		bad   bool
	}{
		{props: nil},
		{props: map[string]string{"DELAY": "2"}, level: 2},
		{props: map[string]string{"DELAY": "9"}, level: 3}, // past the last level: the last
		{props: map[string]string{"DELAY": "0", "TIMER_DELAY_SEC": "5"}},
		{props: map[string]string{"DELAY": "1", "TIMER_DELAY_SEC": "5"}, level: 1},
		{props: map[string]string{"DELAY": "x"}, bad: true},
		{props: map[string]string{"TIMER_DELAY_SEC": "5"}, due: now.Add(5 * time.Second)},
		{props: map[string]string{"TIMER_DELAY_MS": "1500"}, due: now.Add(1500 * time.Millisecond)},
		{props: map[string]string{"TIMER_DELIVER_MS": strconv.FormatInt(now.UnixMilli()+42, 10)}, due: now.Add(42 * time.Millisecond)},
		{props: map[string]string{"TIMER_DELAY_SEC": "5", "TIMER_DELIVER_MS": "1"}, due: now.Add(5 * time.Second)},
		{props: map[string]string{"TIMER_DELIVER_MS": strconv.FormatInt(now.UnixMilli()-1, 10)}}, // due: ordinary
		{props: map[string]string{"TIMER_DELAY_MS": "0"}},
		{props: map[string]string{"TIMER_DELAY_SEC": "3601"}, bad: true},
		{props: map[string]string{"TIMER_DELAY_SEC": "9223372036854775807"}, bad: true},
		{props: map[string]string{"TIMER_DELAY_SEC": "10000000000"}, bad: true}, // overflows a Duration
		{props: map[string]string{"TIMER_DELAY_MS": "3600000"}, due: now.Add(time.Hour)},
		{props: map[string]string{"TIMER_DELIVER_MS": strconv.FormatInt(now.Add(time.Hour).UnixMilli()+1, 10)}, bad: true},
		{props: map[string]string{"TIMER_DELAY_MS": "-5"}, bad: true},
		{props: map[string]string{"TIMER_DELIVER_MS": "soon"}, bad: true},
	} {
		level, due, err := b.delayAsked(c.props, now)
		if (err != nil) != c.bad || level != c.level || !due.Equal(c.due) {
			t.Errorf("%v: level %d, due %v, err %v; want level %d, due %v, refused %v", c.props, level, due, err, c.level, c.due, c.bad)
		}
	}
}

// pullRecords reads topic@queue from offset 0 on replica i, up to its end.
func (g *group) pullRecords(i int, topic string, queue int32) []message.Record {
	g.t.Helper()
	var out []message.Record
	for off := int64(0); ; {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		res, err := g.client(i).PullMessage(ctx, &pb.PullMessageRequest{ConsumerGroup: "timer-check", Topic: topic, QueueId: queue,
			QueueOffset: off, MaxMessages: 32})
		cancel()
		if err != nil {
			g.t.Logf("pull %s@%d from %d: %v", topic, queue, off, err)
		}
		if err != nil || res.Status != pb.PullStatus_PULL_FOUND {
			return out
		}
		for _, raw := range res.Records {
			r, err := message.Decode(raw)
			if err != nil {
				g.t.Fatal(err)
			}
			out = append(out, r)
		}
		off = res.NextBeginOffset
	}
}

// Timers and delay levels, sent as records and as messages, arrive in
// their topic once each, never before they are due, with what the
// producer gave them and the id it was answered with.
func TestTimerMessagesArriveWhenDue(t *testing.T) {
	g := newGroup(t, 3, func(c *Config) {
		c.DelayLevels = "300ms 600ms"
		c.ScheduleInterval = 10 * time.Millisecond
		c.TimerPrecision = 20 * time.Millisecond
	})
	g.createTopic("timed", 2)
	m := g.master()
	ctx := context.Background()
	sentAt := time.Now()
	var recs []byte
	for _, p := range []map[string]string{
		{message.PropertyTimerDelayMS: "400"},
		{message.PropertyTimerDeliverMS: strconv.FormatInt(sentAt.Add(900*time.Millisecond).UnixMilli(), 10)},
		{}, // an ordinary message in the same batch
	} {
		p[message.PropertyUniqKey] = fmt.Sprint("u-", len(recs))
		p["app"] = "kept"
		var err error
		if recs, err = message.Append(recs, &message.Message{Topic: "timed", QueueID: 1, Tags: "tag", Keys: []string{"k"}, Properties: p, Body: []byte("r")}); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := g.client(m).SendMessage(ctx, &pb.SendMessageRequest{Topic: "timed", QueueId: 1, Records: recs})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, r := range resp.Results {
		ids[r.MsgId] = true
	}
	resp, err = g.client(m).SendMessage(ctx, &pb.SendMessageRequest{Topic: "timed", QueueId: 1, Messages: []*pb.Message{
		{Body: []byte("m"), Tags: "tag", Keys: []string{"k"}, Properties: map[string]string{message.PropertyTimerDelaySec: "1", "app": "kept"}},
		{Body: []byte("m"), Tags: "tag", Keys: []string{"k"}, Properties: map[string]string{message.PropertyDelayLevel: "2", "app": "kept"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range resp.Results {
		ids[r.MsgId] = true
	}
	if got := g.pullRecords(m, "timed", 1); len(got) != 1 {
		t.Fatalf("%d messages in the topic at once, want the ordinary one only", len(got))
	}
	var got []message.Record
	waitFor(t, 10*time.Second, func() bool {
		got = g.pullRecords(m, "timed", 1)
		return len(got) >= 5
	})
	seen := map[string]bool{}
	for _, r := range got[1:] {
		origin := r.Properties[message.PropertyOriginMsgID]
		due, err := strconv.ParseInt(r.Properties[message.PropertyTimerOutMS], 10, 64)
		if r.Properties[message.PropertyDelayLevel] == "" && r.Properties[message.PropertyTimerOutMS] == "" {
			due, err = sentAt.Add(600*time.Millisecond).UnixMilli(), nil // level 2
		}
		switch {
		case !ids[origin] || seen[origin]:
			t.Errorf("delivered with origin %q, sent ids %v, seen before %v", origin, ids, seen[origin])
		case err != nil || r.StoreTime < due:
			t.Errorf("%s stored at %d, due at %d (%v)", origin, r.StoreTime, due, err)
		case r.StoreTime-due > 2000:
			t.Errorf("%s stored %d ms late", origin, r.StoreTime-due)
		case r.Tags != "tag" || len(r.Keys) != 1 || r.Keys[0] != "k" || r.Properties["app"] != "kept" || r.QueueID != 1:
			t.Errorf("%s delivered as %+v", origin, r)
		}
		for _, p := range []string{message.PropertyRealTopic, message.PropertyRealQueue, message.PropertyDelayLevel,
			message.PropertyTimerDelayMS, message.PropertyTimerDelaySec, message.PropertyTimerDeliverMS} {
			if _, ok := r.Properties[p]; ok {
				t.Errorf("%s delivered with %s", origin, p)
			}
		}
		seen[origin] = true
	}
	if len(got) != 5 {
		t.Fatalf("%d messages in the topic, want 5", len(got))
	}
	g.checkIdentical(nil)
}

// A timer asking for what the broker cannot do is refused with a reason,
// whether it comes as a record or as a message.
func TestTimerRequestsOutOfBoundsAreRefused(t *testing.T) {
	g := newGroup(t, 1, func(c *Config) { c.TimerHorizon = time.Hour })
	g.createTopic("timed", 1)
	for _, p := range []map[string]string{
		{message.PropertyTimerDelaySec: "3601"},
		{message.PropertyTimerDeliverMS: strconv.FormatInt(time.Now().Add(2*time.Hour).UnixMilli(), 10)},
		{message.PropertyTimerDelayMS: "-1"},
		{message.PropertyTimerDeliverMS: "tomorrow"},
		{message.PropertyDelayLevel: "two"},
	} {
		rec, err := message.Append(nil, &message.Message{Topic: "timed", Properties: p, Body: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		for _, req := range []*pb.SendMessageRequest{
			{Topic: "timed", Records: rec},
			{Topic: "timed", Messages: []*pb.Message{{Body: []byte("x"), Properties: p}}},
		} {
			_, err := g.client(0).SendMessage(context.Background(), req)
			if reason, _ := ReasonOf(err); status.Code(err) != codes.InvalidArgument || reason != pb.ErrorReason_ILLEGAL_ARGUMENT {
				t.Errorf("%v: %v", p, err)
			}
		}
	}
	for q := int32(0); q < scheduleQueues(g.brokers[0].cfg); q++ {
		if _, end := g.brokers[0].store.QueueOffsets(message.ScheduleTopic, q); end != 0 {
			t.Fatalf("%d refused timers stored in schedule queue %d", end, q)
		}
	}
}

// A move read from cursors that have moved on since is not applied: the
// state machine's check that makes a move happen once, even when the
// schedule service proposes it again after an unknown outcome.
func TestAStaleScheduleMoveIsNotApplied(t *testing.T) {
	g := newGroup(t, 3, nil)
	g.createTopic("moved", 1)
	b := g.brokers[g.master()]
	move := func(from, to int64) error {
		return b.apply(context.Background(), &pb.RaftCommand{Command: &pb.RaftCommand_Send{Send: &pb.SendBatch{
			StoreTimestamp:  time.Now().UnixMilli(),
			Messages:        []*pb.StoredMessage{{Message: &pb.Message{Topic: "moved", Body: []byte(fmt.Sprint(from))}}},
			ScheduleOffsets: map[int32]int64{timerQueueBase + 1: to}, ScheduleFrom: map[int32]int64{timerQueueBase + 1: from},
		}}})
	}
	if err := move(3, 5); err == nil {
		t.Fatal("a move from cursor 3 applied at cursor 0")
	}
	if err := move(0, 5); err != nil {
		t.Fatal(err)
	}
	if err := move(0, 5); err == nil {
		t.Fatal("the same move applied twice")
	}
	g.quiesce()
	for i := range g.brokers {
		if got := g.brokers[i].meta.scheduleOffset(timerQueueBase + 1); got != 5 {
			t.Errorf("replica %d: cursor %d, want 5", i+1, got)
		}
		if got := g.pullRecords(i, "moved", 0); len(got) != 1 {
			t.Errorf("replica %d holds %d moved messages, want 1", i+1, len(got))
		}
	}
}

// Timers fire once each, never early, while the master is killed (SIGKILL)
// with some of them fired and others still waiting, and restarted: the
// new master resumes each queue where the old one's last committed move
// left it.
func TestTimersFireOnceAcrossMasterKill(t *testing.T) {
	g := makeGroup(t, 3, true, nil)
	g.createTopic("timed", 1)
	m := g.master()
	const n = 300
	due := map[string]int64{}
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < n; i += 10 {
		var recs []byte
		for j := i; j < i+10; j++ {
			body := fmt.Sprint("timer-", j)
			delay := 300 + rng.IntN(2700) // ms
			var err error
			recs, err = message.Append(recs, &message.Message{Topic: "timed", Body: []byte(body),
				Properties: map[string]string{message.PropertyTimerDelayMS: strconv.Itoa(delay)}})
			if err != nil {
				t.Fatal(err)
			}
		}
		resp, _, err := g.sendRedirecting(m, &pb.SendMessageRequest{Topic: "timed", Records: recs}, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range resp.Results {
			due[r.MsgId] = 0
		}
	}
	// Kill the master once some timers have fired and most have not.
	waitFor(t, 10*time.Second, func() bool { return len(g.pullRecords(m, "timed", 0)) >= 20 })
	g.procs[m].Process.Signal(syscall.SIGKILL)
	g.procs[m].Wait()
	g.procs[m] = nil
	g.start(m)
	var got []message.Record
	waitFor(t, 30*time.Second, func() bool {
		got = g.pullRecords(g.master(), "timed", 0)
		return len(got) >= n
	})
	seen := map[string]int{}
	for _, r := range got {
		seen[r.Properties[message.PropertyOriginMsgID]]++
		out, err := strconv.ParseInt(r.Properties[message.PropertyTimerOutMS], 10, 64)
		if err != nil || r.StoreTime < out {
			t.Errorf("%s stored at %d, due at %d (%v)", r.Body, r.StoreTime, out, err)
		}
	}
	for id := range due {
		if seen[id] != 1 {
			t.Errorf("timer %s fired %d times", id, seen[id])
		}
	}
	if len(got) != n {
		t.Fatalf("%d timers fired, want %d", len(got), n)
	}
	g.checkIdentical(nil)
}
