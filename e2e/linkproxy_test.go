package e2e

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftmq/raftmq/cluster/clustertest"
)

// linkProxy is a TCP proxy in front of one replica's Raft port (its peers
// dial the proxy, which the replica advertises), whose link can be made
// slow or lossy while it runs: what tc netem would do, which this machine
// does not have. Every chunk forwarded, either way, waits latency, and
// then as long as bytesPerSec allows; a connection older than resetAfter
// is cut, both ways (a peer that times out, or a link that drops).
type linkProxy struct {
	lis         net.Listener
	target      string
	latency     atomic.Int64 // ns
	bytesPerSec atomic.Int64 // 0: no limit
	resetAfter  atomic.Int64 // ns; 0: never
	forwarded   atomic.Int64 // bytes, both ways
	cuts        atomic.Int64 // connections the link dropped

	mu     sync.Mutex
	conns  map[net.Conn]bool
	closed bool
	wg     sync.WaitGroup
}

// startLinkProxy proxies addr (a free one) to target until the test ends.
func startLinkProxy(t *testing.T, addr, target string) *linkProxy {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	p := &linkProxy{lis: lis, target: target, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// set changes the link's faults; zeros make it a plain link again.
func (p *linkProxy) set(latency time.Duration, bytesPerSec int64, resetAfter time.Duration) {
	p.latency.Store(int64(latency))
	p.bytesPerSec.Store(bytesPerSec)
	p.resetAfter.Store(int64(resetAfter))
}

func (p *linkProxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.lis.Accept()
		if err != nil {
			return
		}
		out, err := net.DialTimeout("tcp", p.target, 2*time.Second)
		if err != nil {
			in.Close()
			continue
		}
		if !p.track(in, out) {
			return
		}
		born := time.Now()
		p.wg.Add(2)
		go p.forward(in, out, born)
		go p.forward(out, in, born)
	}
}

// track records a connection pair, false once the proxy is closed.
func (p *linkProxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		for _, c := range conns {
			c.Close()
		}
		return false
	}
	for _, c := range conns {
		p.conns[c] = true
	}
	return true
}

// forward copies from src to dst, chunk by chunk, with the link's faults,
// until either side ends; then it closes both.
func (p *linkProxy) forward(src, dst net.Conn, born time.Time) {
	defer p.wg.Done()
	defer src.Close()
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		if r := time.Duration(p.resetAfter.Load()); r > 0 {
			left := time.Until(born.Add(r))
			if left <= 0 {
				p.cuts.Add(1)
				return // the link drops
			}
			src.SetReadDeadline(time.Now().Add(left))
		} else {
			src.SetReadDeadline(time.Time{})
		}
		n, err := src.Read(buf)
		if n > 0 {
			wait := time.Duration(p.latency.Load())
			if bps := p.bytesPerSec.Load(); bps > 0 {
				wait += time.Duration(int64(n) * int64(time.Second) / bps)
			}
			if wait > 0 {
				time.Sleep(wait) // the link's delay: a chosen fault, not a wait for a condition
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
			p.forwarded.Add(int64(n))
		}
		var ne net.Error
		switch {
		case err == nil:
		case errors.As(err, &ne) && ne.Timeout():
			// The reset deadline passed, or the fault changed: look again.
		case errors.Is(err, io.EOF), err != nil:
			return
		}
	}
}

func (p *linkProxy) close() {
	p.mu.Lock()
	p.closed = true
	p.lis.Close()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// Slow and lossy links between the replicas, under load, through a proxy
// in front of each replica's Raft port: for 5 s every link adds 30 ms to
// each chunk it forwards and carries at most 1 MiB/s, then for 5 s one
// follower's links drop every 300 ms. Nothing acknowledged is lost, the
// replicas end identical, and writes go on (the drill's gap limit).
func TestDrillSlowAndLossyRaftLinks(t *testing.T) {
	c := procClusterAddrs(t)
	c.raftVia = clustertest.FreeAddrs(t, 3)
	var proxies []*linkProxy
	for i := range c.raft {
		proxies = append(proxies, startLinkProxy(t, c.raftVia[i], c.raft[i]))
	}
	c.run()
	var follower int
	runDrill(t, "raft links slow 5 s, then a follower's lossy 5 s", c, func() {
		for _, p := range proxies {
			p.set(30*time.Millisecond, 1<<20, 0)
		}
		time.Sleep(5 * time.Second) // the slow links
		for _, p := range proxies {
			p.set(0, 0, 0)
		}
		follower = (c.master() + 1) % 3
		proxies[follower].set(0, 0, 300*time.Millisecond)
		time.Sleep(5 * time.Second) // the lossy link
		proxies[follower].set(0, 0, 0)
	})
	// The faults were on the replicas' links: Raft went through the
	// proxies (the master dials its followers', so at least two carry
	// it), and the lossy one dropped connections.
	carried := 0
	for _, p := range proxies {
		if p.forwarded.Load() > 0 {
			carried++
		}
	}
	if carried < 2 {
		t.Errorf("Raft traffic went through %d of the 3 proxies", carried)
	}
	if proxies[follower].cuts.Load() == 0 {
		t.Errorf("the lossy link dropped no connection")
	}
	t.Logf("bytes through the proxies %d %d %d; the lossy link dropped %d connections",
		proxies[0].forwarded.Load(), proxies[1].forwarded.Load(), proxies[2].forwarded.Load(), proxies[follower].cuts.Load())
}
