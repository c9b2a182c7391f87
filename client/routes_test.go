package client

import (
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// The client's connections grant static flow-control windows, announced
// as a connection opens: a stream's in the client's SETTINGS, the
// connection's in a WINDOW_UPDATE right after them over HTTP/2's initial
// 64 KiB. gRPC's dynamic windows, its default, announce neither: they
// start at 64 KiB and grow behind bandwidth pings. The peer here only
// reads what the client sends first.
func TestConnectionsGrantStaticWindows(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	addr := lis.Addr().String()
	o, err := buildOptions([]Option{WithNameServers(addr), WithFlowControlWindows(2<<20, 12<<20)})
	if err != nil {
		t.Fatal(err)
	}
	r := newRouter(o)
	defer r.close()
	c, err := r.conn(addr)
	if err != nil {
		t.Fatal(err)
	}
	c.Connect()
	_ = lis.(*net.TCPListener).SetDeadline(time.Now().Add(5 * time.Second))
	peer, err := lis.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	_ = peer.SetDeadline(time.Now().Add(5 * time.Second))
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(peer, preface); err != nil || string(preface) != http2.ClientPreface {
		t.Fatalf("the client's preface: %q, %v", preface, err)
	}
	fr := http2.NewFramer(peer, peer)
	f, err := fr.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	settings, ok := f.(*http2.SettingsFrame)
	if !ok {
		t.Fatalf("the client's first frame: %v, want its SETTINGS", f.Header())
	}
	if v, ok := settings.Value(http2.SettingInitialWindowSize); !ok || v != 2<<20 {
		t.Fatalf("the client's SETTINGS grant a stream %d bytes (set: %v), want %d", v, ok, 2<<20)
	}
	f, err = fr.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	if wu, ok := f.(*http2.WindowUpdateFrame); !ok || wu.StreamID != 0 || wu.Increment != 12<<20-65535 {
		t.Fatalf("the client's second frame: %v, want a WINDOW_UPDATE of the connection by %d", f, 12<<20-65535)
	}
}

// Windows outside 64 KiB to 1 GiB are refused as the options are built,
// not left to gRPC, which ignores a small one.
func TestFlowControlWindowsOutOfBoundsAreRefused(t *testing.T) {
	for _, w := range [][2]int{{32 << 10, 8 << 20}, {1 << 20, 1000}, {2 << 30, 8 << 20}, {1 << 20, -1}} {
		_, err := buildOptions([]Option{WithNameServers("127.0.0.1:1"), WithFlowControlWindows(w[0], w[1])})
		if err == nil || !strings.Contains(err.Error(), "flow-control windows") {
			t.Errorf("windows %d and %d: %v, want them refused", w[0], w[1], err)
		}
	}
}
