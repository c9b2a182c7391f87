package main

import "golang.org/x/exp/trace"

// A follower's marks: its member stream's reader reading an AppendEntries
// (read: the second read after it wrote its last answer, the first being
// the one that found nothing), Raft's follower loop running (raft), the
// log's write and fdatasync and the sync's return (write, sync, syncEnd),
// the answer written (answer) and the state machine done (fsm).
var followerRole = role{mark: followerMark, rounds: followerRounds, intervals: []interval{
	{name: "read -> Raft's loop runs", from: "read", to: "raft"},
	{name: "Raft's loop runs -> log write", from: "raft", to: "write"},
	{name: "log write -> log sync", from: "write", to: "sync"},
	{name: "log sync", from: "sync", to: "syncEnd"},
	{name: "log sync done -> answer written", from: "syncEnd", to: "answer"},
	{name: "read -> answer written", from: "read", to: "answer"},
	{name: "log sync done -> state machine done", from: "syncEnd", to: "fsm"},
	{name: "answer written -> next read", from: "answer", to: "read", next: true},
}}

func followerMark(e trace.Event, s *state) (string, bool) {
	g, from, to := transition(e)
	if from == trace.GoRunning && to == trace.GoWaiting && stackHas(e, "runFollower") {
		s.role[g] = "raft"
	}
	switch {
	case from == trace.GoSyscall && s.inSyscall[g] == "sync": // the sync is Raft's loop's own
		delete(s.inSyscall, g)
		return "syncEnd", true
	case to == trace.GoRunning && s.role[g] == "raft":
		return "raft", true
	case from == trace.GoRunning && to == trace.GoWaiting && stackHas(e, "raft.(*Raft).runFSM"):
		return "fsm", true
	case to == trace.GoSyscall:
		switch {
		case stackHas(e, "Fdatasync", "StoreLogs"):
			s.inSyscall[g] = "sync"
			return "sync", true
		case stackHas(e, "memberTransport).serve", "Read"):
			return "read", true
		case stackHas(e, "memberTransport).serve", "Write"):
			return "answer", true
		case stackHas(e, "Write", "StoreLogs"):
			return "write", true
		}
	}
	return "", false
}

// followerRounds: a round opens with the second read after an answer (the
// first found nothing) and closes with the next answer after its sync.
func followerRounds(marks []mark) []round {
	var rounds []round
	var cur round
	reads := 0
	for _, m := range marks {
		switch m.kind {
		case "read":
			reads++
			if reads == 2 {
				rounds, cur = closeRound(rounds, cur), round{"read": m.t}
			}
		case "answer":
			reads = 0
			if cur.has("syncEnd") {
				cur.setFirst("answer", m.t)
			}
		case "raft", "write":
			if !cur.has("sync") {
				cur.setFirst(m.kind, m.t)
			}
		case "sync", "syncEnd":
			cur.setFirst(m.kind, m.t)
		case "fsm":
			if cur.has("syncEnd") {
				cur.setFirst("fsm", m.t)
			}
		}
	}
	return closeRound(rounds, cur)
}
