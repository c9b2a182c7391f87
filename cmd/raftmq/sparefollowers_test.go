package main

import (
	"testing"
	"time"
)

// --raft-spare-followers auto paces spares only when the whole group runs
// on this host; a duration sets the interval, off turns it off.
func TestSpareFollowerInterval(t *testing.T) {
	loopback := map[string]string{"1": "127.0.0.1:1", "2": "127.0.0.1:2", "3": "127.0.0.1:3"}
	hosts := map[string]string{"1": "broker-a-1:10921", "2": "broker-a-2:10921", "3": "broker-a-3:10921"}
	twoHere := map[string]string{"1": "10.0.0.5:1", "2": "10.0.0.5:2", "3": "10.0.0.6:1"}
	alone := map[string]string{"1": "127.0.0.1:1"}
	for _, tc := range []struct {
		what, mode, own string
		peers           map[string]string
		want            time.Duration
	}{
		{"auto, the group on loopback", "auto", "127.0.0.1:1", loopback, autoSpareInterval},
		{"auto, a replica a host", "auto", "broker-a-1:10921", hosts, 0},
		{"auto, two of three on this host", "auto", "10.0.0.5:1", twoHere, 0},
		{"auto, a group of one", "auto", "127.0.0.1:1", alone, 0},
		{"a duration, a replica a host", "7ms", "broker-a-1:10921", hosts, 7 * time.Millisecond},
		{"the longest", "100ms", "127.0.0.1:1", loopback, 100 * time.Millisecond},
		{"off, the group on loopback", "off", "127.0.0.1:1", loopback, 0},
	} {
		got, err := spareFollowerInterval(tc.mode, tc.own, tc.peers)
		if err != nil || got != tc.want {
			t.Errorf("%s: spareFollowerInterval(%q) = %v, %v; want %v", tc.what, tc.mode, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "0s", "-1ms", "101ms", "soon", "Auto"} {
		if got, err := spareFollowerInterval(bad, "127.0.0.1:1", loopback); err == nil {
			t.Errorf("spareFollowerInterval(%q) = %v, want an error", bad, got)
		}
	}
}
