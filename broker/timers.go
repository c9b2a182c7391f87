package broker

import (
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/raftmq/raftmq/message"
	"github.com/raftmq/raftmq/storage"
)

// Timer messages, as RocketMQ 5 users send them: a message whose
// properties ask for delivery at a time (TIMER_DELIVER_MS), after a delay
// (TIMER_DELAY_SEC, TIMER_DELAY_MS) or at a delay level (DELAY) is held
// in the schedule topic until it is due, then stored as an ordinary
// message of its topic, with its tags, keys and properties, its due time
// in TIMER_OUT_MS and the id of its first stored copy in
// ORIGIN_MESSAGE_ID.
//
// The mechanism is the one the retry path already had (schedule.go):
// every queue of the schedule topic holds messages of one fixed delay, so
// a queue is in due order (each message is due at its store time plus the
// queue's delay) and the schedule service looks only at its head. Queues
// 0..timerQueueBase-1 are the delay levels (level n in queue n-1, as
// RocketMQ lays them out); from timerQueueBase on is the timer ladder,
// the delays k·8^i·TimerPrecision for k = 1..7, up to the longest hop. A
// timer goes into the ladder queue of the longest delay not past its time;
// when it comes due there, the service stores it in its topic if its time
// has come, and otherwise in the ladder queue for what remains. What
// remains after a hop is less than the hop's unit (8^i·TimerPrecision),
// so a timer takes at most one hop per power of 8, plus the repeated
// longest hops of a timer further out than the longest hop.
//
// Why queues rather than RocketMQ's timing wheel and timer log: every
// move is one Raft entry holding the moved messages and the queue's new
// cursor (and the cursor it was read from, which the state machine
// checks), so a new master resumes exactly where the old one stopped: no
// timer is lost or fired twice, and there is no wheel to checkpoint,
// recover and hand over (RocketMQ's wheel re-fires up to 3 s after a
// master change, and replays slots after a crash: the rocketmq5-messages
// note, A.6-A.7). Memory holds nothing per timer: the queues are on disk.
// The price is a copy of the message per hop, which is also what keeps a
// long timer ahead of commitlog retention (RocketMQ's roll does the same):
// no hop is longer than half the retention age.
//
// A timer is never delivered early; it is late by up to one
// TimerPrecision (a remainder shorter than the ladder's first step waits
// a whole step), plus the schedule interval and one commit.

// timerQueueBase is the first ladder queue of the schedule topic; the
// delay levels use the queues below it.
const timerQueueBase = 64

// timerLadder holds the delays of the ladder's queues, ascending; queue
// timerQueueBase+i holds delay i.
type timerLadder []time.Duration

// newTimerLadder builds the delays k·8^i·precision (k = 1..7) up to
// longest.
func newTimerLadder(precision, longest time.Duration) timerLadder {
	var l timerLadder
	for unit := precision; unit <= longest; unit *= 8 {
		for k := time.Duration(1); k < 8 && k*unit <= longest; k++ {
			l = append(l, k*unit)
		}
	}
	return l
}

// ladderFor is the ladder a broker with config c uses: no hop longer than
// the horizon or than half the commitlog's retention age, so that a hop's
// copy outlives its wait.
func ladderFor(c Config) timerLadder {
	longest := c.TimerHorizon
	retention := c.Store.RetentionAge
	if retention == 0 {
		retention = storage.DefaultRetentionAge
	}
	if retention > 0 {
		longest = min(longest, retention/2)
	}
	return newTimerLadder(c.TimerPrecision, max(longest, c.TimerPrecision))
}

// scheduleQueues is how many queues the schedule topic uses under c.
func scheduleQueues(c Config) int32 { return timerQueueBase + int32(len(ladderFor(c))) }

// queueFor is the ladder queue for a timer with remaining left to wait:
// that of the longest delay not past it, or the shortest delay.
func (l timerLadder) queueFor(remaining time.Duration) int32 {
	i := sort.Search(len(l), func(i int) bool { return l[i] > remaining })
	return timerQueueBase + int32(max(i-1, 0))
}

// scheduleDelay is the delay of a schedule queue, 0 for one in no use.
func (b *Broker) scheduleDelay(queue int32) time.Duration {
	switch {
	case queue >= 0 && queue < int32(len(b.delays)):
		return b.delays[queue]
	case queue >= timerQueueBase && queue-timerQueueBase < int32(len(b.ladder)):
		return b.ladder[queue-timerQueueBase]
	}
	return 0
}

// delayAsked is what a message's properties ask of the schedule: a delay
// level (level > 0), a time (due non-zero), or nothing. As RocketMQ's
// HookUtils: a delay level wins over the timer properties, a level past
// the last is the last, and the timer properties are read in the order
// TIMER_DELAY_SEC, TIMER_DELAY_MS, TIMER_DELIVER_MS, relative ones from
// now (the master's clock at the send).
func (b *Broker) delayAsked(props map[string]string, now time.Time) (level int32, due time.Time, err error) {
	if v := props[message.PropertyDelayLevel]; v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return 0, time.Time{}, fmt.Errorf("property %s=%q is not a delay level", message.PropertyDelayLevel, v)
		}
		if n <= 0 {
			return 0, time.Time{}, nil
		}
		return int32(min(n, len(b.delays))), time.Time{}, nil
	}
	horizon := b.cfg.TimerHorizon
	for _, p := range []struct {
		name string
		max  int64 // the value at the horizon: checked before the arithmetic, which could overflow
		at   func(n int64) time.Time
	}{
		{message.PropertyTimerDelaySec, int64(horizon / time.Second), func(n int64) time.Time { return now.Add(time.Duration(n) * time.Second) }},
		{message.PropertyTimerDelayMS, int64(horizon / time.Millisecond), func(n int64) time.Time { return now.Add(time.Duration(n) * time.Millisecond) }},
		{message.PropertyTimerDeliverMS, now.Add(horizon).UnixMilli(), time.UnixMilli},
	} {
		v := props[p.name]
		if v == "" {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		switch {
		case err != nil || n < 0:
			return 0, time.Time{}, fmt.Errorf("property %s=%q is not a time", p.name, v)
		case n > p.max:
			return 0, time.Time{}, fmt.Errorf("property %s=%q asks for delivery past the timer horizon (%s)", p.name, v, horizon)
		}
		due = p.at(n)
		if !due.After(now) {
			return 0, time.Time{}, nil // due already: an ordinary message, as RocketMQ stores it
		}
		return 0, due, nil
	}
	return 0, time.Time{}, nil
}

// scheduleSend turns m, as a producer sent it, into its copy in the
// schedule topic if it asks for a delay, and says whether it did. The
// copy's properties are fresh; m's are not changed.
func (b *Broker) scheduleSend(m *message.Message, now time.Time) (bool, error) {
	level, due, err := b.delayAsked(m.Properties, now)
	if err != nil || (level == 0 && due.IsZero()) {
		return false, err
	}
	props := message.CopyProperties(m.Properties, 3)
	props[message.PropertyRealTopic], props[message.PropertyRealQueue] = m.Topic, strconv.Itoa(int(m.QueueID))
	m.Topic, m.Properties = message.ScheduleTopic, props
	if level > 0 {
		// The level's queue, as RocketMQ; the timer properties go.
		delete(props, message.PropertyTimerDelaySec)
		delete(props, message.PropertyTimerDelayMS)
		delete(props, message.PropertyTimerDeliverMS)
		props[message.PropertyDelayLevel] = strconv.Itoa(int(level))
		m.QueueID = level - 1
		return true, nil
	}
	props[message.PropertyTimerOutMS] = strconv.FormatInt(due.UnixMilli(), 10)
	m.QueueID = b.ladder.queueFor(due.Sub(now))
	return true, nil
}

// dueMessage is what becomes of r, at the head of schedule queue queue and
// due there at now: the message stored in its topic, or, for a timer
// whose time is still ahead, its copy in the ladder queue for what
// remains. False for a message without a destination, which is dropped.
func (b *Broker) dueMessage(r message.Record, queue int32, now time.Time) (message.Message, bool) {
	props := message.CopyProperties(r.Properties, 1)
	if props[message.PropertyOriginMsgID] == "" {
		props[message.PropertyOriginMsgID] = message.FormatID(b.cfg.Group, r.Offset)
	}
	msg := message.Message{Tags: r.Tags, Keys: r.Keys, Properties: props, Body: r.Body, Flag: r.Flag, BornTime: r.BornTime}
	if queue >= timerQueueBase {
		due, err := strconv.ParseInt(props[message.PropertyTimerOutMS], 10, 64)
		if remaining := time.UnixMilli(due).Sub(now); err == nil && remaining > 0 {
			msg.Topic, msg.QueueID = message.ScheduleTopic, b.ladder.queueFor(remaining)
			return msg, true
		}
	}
	topic, qid := props[message.PropertyRealTopic], props[message.PropertyRealQueue]
	for _, p := range []string{message.PropertyRealTopic, message.PropertyRealQueue, message.PropertyDelayLevel,
		message.PropertyTimerDelaySec, message.PropertyTimerDelayMS, message.PropertyTimerDeliverMS} {
		delete(props, p)
	}
	id, err := strconv.Atoi(qid)
	if err != nil || id < 0 || !message.ValidTopic(topic) {
		b.log.Warn("schedule service: dropping a delayed message without a destination", "queue", queue, "offset", r.QueueOffset)
		return msg, false
	}
	msg.Topic, msg.QueueID = topic, int32(id)
	return msg, true
}
