package main

import "golang.org/x/exp/trace"

// The master's marks: the gRPC server reading a producer's connection
// (read), the Raft log writer's fdatasync and its return (sync, syncEnd),
// a replicator writing an AppendEntries (ae) and reading its answer (resp:
// the replicator's second read after its write, the first being the one
// that found nothing and parked), the state machine done with what Raft
// gave it (fsm), and gRPC's writer writing to a producer (answer).
var masterRole = role{mark: masterMark, rounds: masterRounds, intervals: []interval{
	{name: "first send read -> last send read", from: "read", to: "lastRead"},
	{name: "last send read -> first AppendEntries", from: "lastRead", to: "ae"},
	{name: "first AppendEntries -> second", from: "ae", to: "ae2"},
	{name: "first AppendEntries -> log sync", from: "ae", to: "sync"},
	{name: "log sync", from: "sync", to: "syncEnd"},
	{name: "first AppendEntries -> first answer", from: "ae", to: "resp"},
	{name: "first answer -> state machine done", from: "resp", to: "fsm"},
	{name: "state machine done -> answers written", from: "fsm", to: "answer"},
	{name: "answers written -> next sends read", from: "answer", to: "read", next: true},
	{name: "round", from: "read", to: "read", next: true},
}}

func masterMark(e trace.Event, s *state) (string, bool) {
	g, from, to := transition(e)
	switch {
	case from == trace.GoRunning && to == trace.GoWaiting && stackHas(e, "raft.(*Raft).runFSM"):
		return "fsm", true
	case to == trace.GoSyscall:
		switch {
		case stackHas(e, "Fdatasync", "leaderLog).write"):
			s.inSyscall[g] = "sync"
			return "sync", true
		case stackHas(e, "memberConn).call", "Write"):
			s.role[g] = "replicator0"
			return "ae", true
		case stackHas(e, "readAppendAnswer"):
			if s.role[g] == "replicator0" {
				s.role[g] = "replicator1"
				return "", false
			}
			if s.role[g] == "replicator1" {
				s.role[g] = ""
				return "resp", true
			}
		case stackHas(e, "loopyWriter", "Write"):
			return "answer", true
		case stackHas(e, "http2Server", "Read"):
			return "read", true
		}
	case from == trace.GoSyscall && s.inSyscall[g] == "sync":
		delete(s.inSyscall, g)
		return "syncEnd", true
	}
	return "", false
}

// masterRounds: a round opens with the first AppendEntries written after
// answers went out, and holds the sends read since those answers.
func masterRounds(marks []mark) []round {
	var rounds []round
	var cur round
	var reads []int64 // since the last round's answers went out (none open)
	for _, m := range marks {
		switch m.kind {
		case "read":
			if cur.has("answer") {
				rounds, cur = append(rounds, cur), nil
			}
			if cur == nil { // reads while an entry is out are the reader finding nothing
				reads = append(reads, m.t)
			}
		case "ae":
			if cur == nil && len(reads) > 0 {
				cur = round{"read": reads[0], "lastRead": reads[len(reads)-1], "ae": m.t}
				reads = nil
			} else {
				cur.setFirst("ae2", m.t)
			}
		case "sync", "syncEnd", "resp":
			cur.setFirst(m.kind, m.t)
		case "fsm", "answer":
			if cur.has("resp") {
				cur.setFirst(m.kind, m.t)
			}
		}
	}
	return closeRound(rounds, cur)
}
