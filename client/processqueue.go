package client

import (
	"sort"
	"sync"
)

// processQueue holds one queue's messages between pull and consume, in
// offset order (RocketMQ's ProcessQueue). The offset the group may commit
// is the smallest one still in flight: every message below it is
// consumed.
type processQueue struct {
	mu       sync.Mutex
	msgs     map[int64]*MessageExt
	offsets  []int64 // sorted offsets in msgs
	bytes    int64
	next     int64 // the offset after the last message pulled
	dropped  bool
	consumed int64 // messages consumed, for tests and stats
}

func newProcessQueue(start int64) *processQueue {
	return &processQueue{msgs: map[int64]*MessageExt{}, next: start}
}

// put adds pulled messages (ascending offsets, past any already held).
func (pq *processQueue) put(msgs []*MessageExt, next int64) {
	pq.mu.Lock()
	defer pq.mu.Unlock()
	for _, m := range msgs {
		if _, dup := pq.msgs[m.QueueOffset]; dup {
			continue
		}
		pq.msgs[m.QueueOffset] = m
		pq.offsets = append(pq.offsets, m.QueueOffset)
		pq.bytes += int64(len(m.Body))
	}
	if !sort.SliceIsSorted(pq.offsets, func(i, j int) bool { return pq.offsets[i] < pq.offsets[j] }) {
		sort.Slice(pq.offsets, func(i, j int) bool { return pq.offsets[i] < pq.offsets[j] })
	}
	pq.next = max(pq.next, next)
}

// remove drops consumed messages and returns the offset to commit.
func (pq *processQueue) remove(msgs []*MessageExt) int64 {
	pq.mu.Lock()
	defer pq.mu.Unlock()
	for _, m := range msgs {
		if held, ok := pq.msgs[m.QueueOffset]; !ok || held != m {
			continue // not held, or the same offset pulled again after a move
		}
		delete(pq.msgs, m.QueueOffset)
		pq.bytes -= int64(len(m.Body))
		pq.consumed++
		i := sort.Search(len(pq.offsets), func(i int) bool { return pq.offsets[i] >= m.QueueOffset })
		pq.offsets = append(pq.offsets[:i], pq.offsets[i+1:]...)
	}
	return pq.commitOffsetLocked()
}

// nextOffset is where the next pull of the queue starts.
func (pq *processQueue) nextOffset() int64 {
	pq.mu.Lock()
	defer pq.mu.Unlock()
	return pq.next
}

// commitOffset is the smallest offset in flight, or next when none is.
func (pq *processQueue) commitOffset() int64 {
	pq.mu.Lock()
	defer pq.mu.Unlock()
	return pq.commitOffsetLocked()
}

func (pq *processQueue) commitOffsetLocked() int64 {
	if len(pq.offsets) > 0 {
		return pq.offsets[0]
	}
	return pq.next
}

// load reports what flow control looks at: messages and bytes held, and
// the span between the first and last offset held.
func (pq *processQueue) load() (count int, bytes int64, span int64) {
	pq.mu.Lock()
	defer pq.mu.Unlock()
	if n := len(pq.offsets); n > 0 {
		span = pq.offsets[n-1] - pq.offsets[0]
	}
	return len(pq.offsets), pq.bytes, span
}

// moveTo forgets what the queue holds and goes on from next: the broker
// said the offset moved (an offset reset, or messages retention removed).
// Messages already handed to the listener are still consumed; removing
// them later changes nothing here.
func (pq *processQueue) moveTo(next int64) {
	pq.mu.Lock()
	defer pq.mu.Unlock()
	clear(pq.msgs)
	pq.offsets, pq.bytes, pq.next = pq.offsets[:0], 0, next
}

func (pq *processQueue) drop() {
	pq.mu.Lock()
	pq.dropped = true
	pq.mu.Unlock()
}

func (pq *processQueue) isDropped() bool {
	pq.mu.Lock()
	defer pq.mu.Unlock()
	return pq.dropped
}
