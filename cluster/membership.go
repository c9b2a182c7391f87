package cluster

import (
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// MembershipConfig configures a member of the gossip pool (name servers and
// broker replicas alike).
type MembershipConfig struct {
	// Name is the member's unique, stable name (a restarted member comes
	// back under the same name).
	Name string
	// BindAddr is the gossip address (TCP and UDP). AdvertiseAddr is what
	// others reach (default BindAddr; containers must set it: a wildcard
	// bind address would make memberlist guess an interface).
	BindAddr      string
	AdvertiseAddr string
	// Join lists members to join at start (none: start a pool).
	Join []string
	// SecretKey, 16, 24 or 32 bytes, encrypts gossip when set.
	SecretKey []byte
	// Meta is the member's first metadata.
	Meta MemberMeta
	// Fast uses tight timings for tests (tens of milliseconds) instead of
	// memberlist's LAN defaults.
	Fast   bool
	Logger *slog.Logger
}

// EventKind is what happened to a member.
type EventKind int

const (
	MemberJoined EventKind = iota
	MemberUpdated
	MemberLeft // left or failed: gone from the pool
)

// MemberEvent is one change in the pool.
type MemberEvent struct {
	Kind EventKind
	Name string
	Addr string // gossip address
	Meta MemberMeta
}

// Membership is a started gossip member. Its events arrive on Events in
// order; the queue behind it is unbounded, so memberlist's callbacks never
// block, and the channel must be read until Close.
type Membership struct {
	ml  *memberlist.Memberlist
	log *slog.Logger

	metaMu sync.Mutex
	meta   []byte

	queue  *eventQueue
	Events <-chan MemberEvent

	// live are the members as memberlist's callbacks last told of them,
	// copied under its lock: memberlist's Members returns pointers to
	// nodes it goes on changing (a data race under -race).
	liveMu sync.Mutex
	live   map[string]MemberEvent

	stop     chan struct{} // closed by Close: ends rejoin
	stopOnce sync.Once
	closeErr error          // Close's, set once under stopOnce
	joined   sync.WaitGroup // rejoin
}

// StartMembership creates the member and joins the pool.
func StartMembership(cfg MembershipConfig) (*Membership, error) {
	if cfg.Name == "" || cfg.BindAddr == "" {
		return nil, errors.New("cluster: membership needs Name and BindAddr")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	meta, err := cfg.Meta.Encode()
	if err != nil {
		return nil, err
	}
	mc := memberlist.DefaultLANConfig()
	// A full state exchange with a random member every 5 s, not
	// memberlist's 30 s: a change of what a member announces (a new
	// master) travels by a few gossip messages to random members, and one
	// that missed a name server was healed only by this exchange. In CI
	// (2026-12-05, the container drills, 8 members starting together) a
	// name server still routed broker-a without its master 20 s after the
	// master announced itself, while the other name server routed it. A
	// member's whole state is a few hundred bytes here, and a broker
	// cluster has tens of members, not the thousands 30 s was chosen for.
	mc.PushPullInterval = 5 * time.Second
	if cfg.Fast {
		mc = memberlist.DefaultLocalConfig()
		mc.ProbeInterval = 50 * time.Millisecond
		mc.ProbeTimeout = 25 * time.Millisecond
		mc.GossipInterval = 10 * time.Millisecond
		mc.PushPullInterval = 500 * time.Millisecond
		mc.SuspicionMult = 2
		mc.TCPTimeout = 500 * time.Millisecond
		// Every message memberlist compresses takes a new LZW writer,
		// a 64 KiB table (memberlist's compressPayload). Gossip every
		// 10 ms among a test's or dev's members on one host made that
		// most of the CPU of the client package's tests under -race on
		// a VM whose page faults are dear (2026-12-05: the failover test
		// acked 5 sends a second and timed out; 57% of its samples were
		// the race detector's reads, page faults and TLB flushes under
		// compressPayload). On one host the bytes cost nothing. A
		// receiver reads compressed and plain messages alike.
		mc.EnableCompression = false
	}
	mc.Name = cfg.Name
	host, port, err := splitHostPort(cfg.BindAddr)
	if err != nil {
		return nil, fmt.Errorf("cluster: gossip address: %w", err)
	}
	mc.BindAddr, mc.BindPort = host, port
	adv := cfg.AdvertiseAddr
	if adv == "" {
		adv = cfg.BindAddr
	}
	if mc.AdvertiseAddr, mc.AdvertisePort, err = splitHostPort(adv); err != nil {
		return nil, fmt.Errorf("cluster: gossip advertise address: %w", err)
	}
	if net.ParseIP(mc.AdvertiseAddr) == nil {
		// memberlist wants an IP: resolve a name (a container's, say) once.
		ips, err := net.LookupIP(mc.AdvertiseAddr)
		if err != nil || len(ips) == 0 {
			return nil, fmt.Errorf("cluster: resolve gossip advertise host %q: %v", mc.AdvertiseAddr, err)
		}
		mc.AdvertiseAddr = ips[0].String()
	}
	// A restarted member may come back with another address at once.
	mc.DeadNodeReclaimTime = time.Second
	mc.SecretKey = cfg.SecretKey
	mc.Logger = log.New(slogWriter{cfg.Logger, "gossip"}, "", 0)
	m := &Membership{log: cfg.Logger, meta: meta, queue: newEventQueue(), stop: make(chan struct{}), live: map[string]MemberEvent{}}
	m.Events = m.queue.out
	mc.Delegate = delegate{m}
	mc.Events = delegate{m}
	if m.ml, err = memberlist.Create(mc); err != nil {
		m.queue.close()
		return nil, fmt.Errorf("cluster: start gossip: %w", err)
	}
	if len(cfg.Join) > 0 {
		if _, err := m.ml.Join(cfg.Join); err != nil {
			// Not fatal, and not the end of it: the others may start
			// later (a broker before its name servers, which never join
			// brokers), or a loaded machine may have timed the join out.
			cfg.Logger.Warn("gossip join failed; trying again until it succeeds", "join", cfg.Join, "err", err)
			m.joined.Add(1)
			go m.rejoin(cfg.Join)
		}
	}
	return m, nil
}

// Rejoin backoff: the first retry soon, then at most every rejoinMax.
const (
	rejoinFirst = 100 * time.Millisecond
	rejoinMax   = 5 * time.Second
)

// rejoin tries the join again, backing off, until one succeeds or Close.
func (m *Membership) rejoin(addrs []string) {
	defer m.joined.Done()
	wait := rejoinFirst
	for {
		select {
		case <-m.stop:
			return
		case <-time.After(wait):
		}
		if _, err := m.ml.Join(addrs); err == nil {
			m.log.Info("gossip joined", "join", addrs)
			return
		}
		wait = min(2*wait, rejoinMax)
	}
}

func splitHostPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return "", 0, err
	}
	return host, port, nil
}

// Join joins the pool through any of addrs.
func (m *Membership) Join(addrs []string) error {
	_, err := m.ml.Join(addrs)
	return err
}

// UpdateMeta changes the member's metadata and gossips it.
func (m *Membership) UpdateMeta(meta MemberMeta) error {
	b, err := meta.Encode()
	if err != nil {
		return err
	}
	m.metaMu.Lock()
	m.meta = b
	m.metaMu.Unlock()
	return m.ml.UpdateNode(time.Second)
}

// Members returns the live members with their metadata (not to be called
// from an event handler of memberlist's; ours run on their own goroutine).
func (m *Membership) Members() []MemberEvent {
	m.liveMu.Lock()
	defer m.liveMu.Unlock()
	out := make([]MemberEvent, 0, len(m.live))
	for _, e := range m.live {
		e.Kind = MemberJoined
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// LocalName is this member's name.
func (m *Membership) LocalName() string { return m.ml.LocalNode().Name }

// Close leaves the pool (telling the others) and stops. Calls after the
// first return its error: memberlist panics on a Leave after its Shutdown.
func (m *Membership) Close() error {
	m.stopOnce.Do(func() {
		close(m.stop)
		m.joined.Wait()
		m.closeErr = m.ml.Leave(time.Second)
		if serr := m.ml.Shutdown(); m.closeErr == nil {
			m.closeErr = serr
		}
		m.queue.close()
	})
	return m.closeErr
}

// delegate is what memberlist calls: metadata only (no user messages or
// state), and events, which it queues and returns at once.
type delegate struct{ m *Membership }

func (d delegate) NodeMeta(limit int) []byte {
	d.m.metaMu.Lock()
	defer d.m.metaMu.Unlock()
	if len(d.m.meta) > limit {
		return nil // Encode keeps it under 512; never hand memberlist more
	}
	return d.m.meta
}
func (delegate) NotifyMsg([]byte)                  {}
func (delegate) GetBroadcasts(_, _ int) [][]byte   { return nil }
func (delegate) LocalState(bool) []byte            { return nil }
func (delegate) MergeRemoteState(_ []byte, _ bool) {}
func (d delegate) NotifyJoin(n *memberlist.Node)   { d.m.enqueue(MemberJoined, n) }
func (d delegate) NotifyLeave(n *memberlist.Node)  { d.m.enqueue(MemberLeft, n) }
func (d delegate) NotifyUpdate(n *memberlist.Node) { d.m.enqueue(MemberUpdated, n) }

func (m *Membership) enqueue(kind EventKind, n *memberlist.Node) {
	meta, err := DecodeMemberMeta(n.Meta)
	if err != nil {
		m.log.Warn("gossip member with undecodable metadata", "member", n.Name)
		m.liveMu.Lock()
		delete(m.live, n.Name)
		m.liveMu.Unlock()
		return
	}
	e := MemberEvent{Kind: kind, Name: n.Name, Addr: n.Address(), Meta: meta}
	m.liveMu.Lock()
	if kind == MemberLeft {
		delete(m.live, n.Name)
	} else {
		m.live[n.Name] = e
	}
	m.liveMu.Unlock()
	m.queue.push(e)
}

// eventQueue is an unbounded FIFO between memberlist's callbacks (which
// must not block) and the reader of Events.
type eventQueue struct {
	mu     sync.Mutex
	items  []MemberEvent
	signal chan struct{}
	out    chan MemberEvent
	done   chan struct{}
	closed sync.Once
	wg     sync.WaitGroup
}

func newEventQueue() *eventQueue {
	q := &eventQueue{signal: make(chan struct{}, 1), out: make(chan MemberEvent), done: make(chan struct{})}
	q.wg.Add(1)
	go q.pump()
	return q
}

func (q *eventQueue) push(e MemberEvent) {
	q.mu.Lock()
	q.items = append(q.items, e)
	q.mu.Unlock()
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

func (q *eventQueue) pump() {
	defer q.wg.Done()
	defer close(q.out)
	for {
		q.mu.Lock()
		var e MemberEvent
		have := len(q.items) > 0
		if have {
			e = q.items[0]
			q.items = q.items[1:]
		}
		q.mu.Unlock()
		if !have {
			select {
			case <-q.signal:
				continue
			case <-q.done:
				return
			}
		}
		select {
		case q.out <- e:
		case <-q.done:
			return
		}
	}
}

func (q *eventQueue) close() {
	q.closed.Do(func() { close(q.done) })
	q.wg.Wait()
}

var _ io.Writer = slogWriter{}
