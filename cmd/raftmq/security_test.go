package main

import (
	"bufio"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/remoting"
)

// A node refuses to serve plaintext beyond loopback unless told to;
// loopback needs nothing, and TLS or the gossip key lifts the refusal for
// what they secure.
func TestPlaintextOnlyOnLoopbackUnlessAllowed(t *testing.T) {
	local := map[string]string{"grpc": "127.0.0.1:10911", "raft": "[::1]:10921"}
	wide := map[string]string{"grpc": "0.0.0.0:10911"}
	gossipWide := map[string]string{"gossip": "10.0.0.5:10931"}
	for _, tc := range []struct {
		name          string
		insecure      bool
		tls, key      bool
		plain, gossip map[string]string
		refusedFlag   string
	}{
		{name: "loopback", plain: local, gossip: map[string]string{"gossip": "localhost:10931"}},
		{name: "gRPC on every address", plain: wide, refusedFlag: "--grpc"},
		{name: "gRPC on every address with TLS", tls: true, plain: wide},
		{name: "gossip beyond loopback without a key", tls: true, plain: wide, gossip: gossipWide, refusedFlag: "--gossip"},
		{name: "gossip beyond loopback with a key", tls: true, key: true, plain: wide, gossip: gossipWide},
		{name: "allowed", insecure: true, plain: wide, gossip: gossipWide},
		{name: "unparsable address", plain: map[string]string{"raft": "nonsense"}, refusedFlag: "--raft"},
	} {
		err := nodeSecurity{Insecure: tc.insecure}.checkPlaintext(tc.tls, tc.key, tc.plain, tc.gossip)
		switch {
		case tc.refusedFlag == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.refusedFlag != "" && (err == nil || !strings.Contains(err.Error(), tc.refusedFlag) || !strings.Contains(err.Error(), "--insecure-plaintext")):
			t.Errorf("%s: %v, want a refusal naming %s and --insecure-plaintext", tc.name, err, tc.refusedFlag)
		}
	}
}

// A name server serves RocketMQ's route query on its gRPC port unless
// --no-remoting, when the port speaks gRPC only.
func TestNoRemotingTurnsTheProtocolOff(t *testing.T) {
	for _, off := range []bool{false, true} {
		addrs := clustertest.FreeAddrs(t, 2)
		args := []string{"namesrv", "--grpc", addrs[0], "--gossip", addrs[1], "--log-level", "error"}
		if off {
			args = append(args, "--no-remoting")
		}
		cmd := exec.Command(buildBinary(t), args...)
		startServer(t, cmd, "namesrv ")
		conn, err := net.Dial("tcp", addrs[0])
		if err != nil {
			t.Fatal(err)
		}
		frame, _ := (&remoting.Command{Code: remoting.CodeGetRouteInfo, Opaque: 1, ExtFields: map[string]string{"topic": "t"}}).Encode(nil)
		conn.Write(frame)
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := remoting.ReadCommand(bufio.NewReader(conn), remoting.DefaultMaxFrame)
		conn.Close()
		cmd.Process.Kill()
		cmd.Wait()
		switch {
		case !off && (err != nil || resp.Code != remoting.CodeTopicNotExist):
			t.Fatalf("remoting on: %+v %v, want RocketMQ's topic-not-exist answer", resp, err)
		case off && err == nil:
			t.Fatalf("--no-remoting: answered %+v", resp)
		}
	}
}
