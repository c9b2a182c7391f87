package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/raftmq/raftmq/cluster/clustertest"
)

// A server runs again at its start with the monitor's GODEBUG setting, in
// the same process (its PID), keeping the user's own GODEBUG settings;
// with --sysmon deep-sleep, or a schedtrace of the user's, it does not.
func TestServersRunWithTheMonitorAwake(t *testing.T) {
	bin := buildBinary(t)
	for _, tc := range []struct {
		name, godebug string
		flags         []string
		want          string
	}{
		{"awake", "madvdontneed=1", nil, "madvdontneed=1," + sysmonAwake},
		{"awake, no GODEBUG", "", nil, sysmonAwake},
		{"deep-sleep", "madvdontneed=1", []string{"--sysmon", "deep-sleep"}, "madvdontneed=1"},
		{"the user's trace", "schedtrace=600000", nil, "schedtrace=600000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addrs := clustertest.FreeAddrs(t, 2)
			cmd := exec.Command(bin, append([]string{"namesrv", "--grpc", addrs[0], "--gossip", addrs[1], "--log-level", "warn"}, tc.flags...)...)
			cmd.Env = append(withoutVar(os.Environ(), "GODEBUG"), "GODEBUG="+tc.godebug)
			startServer(t, cmd, "namesrv ")
			environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", cmd.Process.Pid))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, kv := range bytes.Split(environ, []byte{0}) {
				if v, ok := strings.CutPrefix(string(kv), "GODEBUG="); ok {
					got = append(got, v)
				}
			}
			if len(got) != 1 || got[0] != tc.want {
				t.Fatalf("the running name server's GODEBUG: %q, want [%q]", got, tc.want)
			}
		})
	}
	out, err := exec.Command(bin, "broker", "--group", "g", "--id", "1", "--dir", t.TempDir(), "--sysmon", "sometimes").CombinedOutput()
	if err == nil || !strings.Contains(string(out), `--sysmon "sometimes": want awake or deep-sleep`) {
		t.Fatalf("--sysmon sometimes: %v, %s", err, out)
	}
}
