package main

import "golang.org/x/exp/trace"

// The client's marks (raftmq bench produce --mode sync --trace F): gRPC's
// reader reading the master's answers (read: the first read after the
// client last wrote), the SDK's send stream reader running (sdk), a sender
// running again after it waited for its answer (sender), and gRPC's
// writer writing sends (write).
var clientRole = role{mark: clientMark, rounds: clientRounds, intervals: []interval{
	{name: "answers read -> SDK's reader runs", from: "read", to: "sdk"},
	{name: "SDK's reader runs -> first sender runs", from: "sdk", to: "sender"},
	{name: "first sender runs -> last sender runs", from: "sender", to: "lastSender"},
	{name: "first sender runs -> first write", from: "sender", to: "write"},
	{name: "first write -> last write", from: "write", to: "lastWrite"},
	{name: "answers read -> last write", from: "read", to: "lastWrite"},
	{name: "last write -> next answers read", from: "lastWrite", to: "read", next: true},
	{name: "round", from: "read", to: "read", next: true},
}}

func clientMark(e trace.Event, s *state) (string, bool) {
	g, from, to := transition(e)
	switch {
	case from == trace.GoRunning && to == trace.GoWaiting:
		if stackHas(e, "sendStream).read") {
			s.role[g] = "sdk"
		} else if stackHas(e, "sendStream).send") {
			s.role[g] = "sender"
		}
		s.waiting[g] = true
	case to == trace.GoRunning && s.waiting[g]:
		delete(s.waiting, g)
		if r := s.role[g]; r != "" {
			return r, true
		}
	case to == trace.GoSyscall:
		switch {
		case stackHas(e, "loopyWriter", "Write"):
			return "write", true
		case stackHas(e, "http2Client).reader", "Read"):
			return "read", true
		}
	}
	return "", false
}

// clientRounds: a round opens with the first read after a write.
func clientRounds(marks []mark) []round {
	var rounds []round
	var cur round
	wrote := true
	for _, m := range marks {
		switch m.kind {
		case "read":
			if wrote {
				rounds, cur, wrote = closeRound(rounds, cur), round{"read": m.t}, false
			}
		case "sdk":
			cur.setFirst("sdk", m.t)
		case "sender":
			cur.setFirst("sender", m.t)
			cur.setLast("lastSender", m.t)
		case "write":
			cur.setFirst("write", m.t)
			cur.setLast("lastWrite", m.t)
			wrote = true
		}
	}
	return closeRound(rounds, cur)
}
