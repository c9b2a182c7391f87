package client

import (
	"sort"
)

// AllocateStrategy splits a topic's queues among a group's members: it
// returns the queues that member me gets. Every member computes it from the
// same sorted lists, so the shares are disjoint and cover every queue.
type AllocateStrategy func(me string, members []string, queues []MessageQueue) []MessageQueue

// AllocateAveragely gives each member a contiguous block of queues, the
// first len(queues) % len(members) members one more (RocketMQ's default).
func AllocateAveragely(me string, members []string, queues []MessageQueue) []MessageQueue {
	i := sort.SearchStrings(members, me)
	if i == len(members) || members[i] != me || len(queues) == 0 {
		return nil
	}
	n, m := len(queues), len(members)
	size := n / m
	start := i*size + min(i, n%m)
	if i < n%m {
		size++
	}
	return queues[start:min(start+size, n)]
}

// AllocateCircle deals the queues out like cards: queue k goes to member
// k % len(members) (RocketMQ's round-robin strategy).
func AllocateCircle(me string, members []string, queues []MessageQueue) []MessageQueue {
	i := sort.SearchStrings(members, me)
	if i == len(members) || members[i] != me {
		return nil
	}
	var out []MessageQueue
	for k := i; k < len(queues); k += len(members) {
		out = append(out, queues[k])
	}
	return out
}
