package broker

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/pb"
	"github.com/raftmq/raftmq/internal/defaults"
	"github.com/raftmq/raftmq/message"
	"github.com/raftmq/raftmq/storage"
)

// Config configures one broker replica. Zero fields take the documented
// defaults.
type Config struct {
	// Group is the broker group's name, e.g. "broker-a"; ReplicaID this
	// replica's id in it (1..n).
	Group     string
	ReplicaID int32
	// Dir holds the store (Dir/store) and the Raft state (Dir/raft).
	Dir string
	// GRPCAddr is where the gRPC server listens; AdvertiseGRPC what clients
	// and peers dial (default GRPCAddr).
	GRPCAddr      string
	AdvertiseGRPC string
	// Raft configures the replica's Raft member; its ID, Dir and Logger are
	// filled in from the fields above. Raft.Peers maps replica ids
	// ("1", "2", ...) to Raft addresses.
	Raft cluster.RaftConfig
	// Store configures the store; its Dir and Logger are filled in.
	// Store.RaftLog keeps the Raft log in the commitlog (entrylog.go).
	Store storage.Config
	// RaftLogFromDir lets the data directory choose Store.RaftLog
	// (cluster.RaftLogInCommitlog): the place it holds, and the
	// commitlog for a new one (raftmq broker --raft-log auto, the
	// default). Off (the zero value): Store.RaftLog as set.
	RaftLogFromDir bool
	// Gossip puts the replica in the cluster's gossip pool (off when its
	// BindAddr is empty).
	Gossip GossipConfig
	// HTTPAddr serves /metrics (Prometheus) and /healthz; "" leaves it off.
	HTTPAddr string
	// RaftMetrics also serves hashicorp/raft's and memberlist's own
	// timings on HTTPAddr's /metrics (raft_commitTime,
	// raft_replication_appendEntries_rpc, raft_rpc_appendEntries_storeLogs,
	// ...; cluster.ExportRaftMetrics). Their sink is one per process: one
	// replica of a process may ask for them (raftmq broker does; raftmq dev,
	// three in one process, does not), a second's Start fails.
	RaftMetrics bool
	// HTTPProfiling also serves Go's profiles on HTTPAddr (/debug/pprof/).
	// Default off: unauthenticated, for a trusted network.
	HTTPProfiling bool
	// HTTPTLS serves HTTPAddr over TLS with TLS's certificate (which it
	// needs).
	HTTPTLS bool
	// TLS, when set, is the replica's certificate (naming
	// raftmq://CLUSTER/broker/GROUP/ID, CLUSTER being Gossip.Cluster) and
	// the cluster's CA: the gRPC server takes TLS 1.3 only, the Raft
	// transport runs over mutual TLS with the group's replicas only, and
	// the replica's own calls to other nodes present it and check theirs.
	// Nil: plaintext everywhere, for loopback and trusted networks.
	TLS *cluster.TLS
	// DisableRemoting turns off RocketMQ's remoting protocol, which
	// otherwise serves RocketMQ's clients on GRPCAddr beside gRPC
	// (remoting.go): with TLS, over TLS (their UseTls), and under ACL,
	// each request checked as the native call it makes, its caller named
	// by RocketMQ's access-key signature.
	DisableRemoting bool
	// ACL, when set, is access control, deny by default: a call is
	// served only when the policy allows it to the identity of the
	// caller's client certificate (acl.go says what each RPC needs). It
	// needs TLS. The caller owns it (Close). Nil: every caller may make
	// every call.
	ACL *cluster.ACL

	// SendTimeout is a send's default time to be replicated and applied
	// when the request names none. Default 3 s.
	SendTimeout time.Duration
	// MaxBatchMessages caps the messages of one SendMessage. Default 1024.
	MaxBatchMessages int
	// EntryMaxMessages and EntryMaxBytes cap one Raft entry that group
	// commit builds from concurrent sends. Defaults 1024 and 4 MiB.
	EntryMaxMessages int
	EntryMaxBytes    int
	// MaxInflightEntries is how many Raft entries group commit keeps in
	// flight at once. Default 8.
	MaxInflightEntries int
	// GroupCommitWait bounds how long, after an entry finishes, the next
	// one waits for the senders of the last to come back before it goes
	// out with fewer (batcher.go, company). A lone sender never waits, nor
	// does an entry that expects fewer than 4 (companyWorthWaiting).
	// Default 2 ms; negative: never wait. 16 synchronous senders of 3
	// broker processes on 2 cores: 12-15 messages per entry against 6.9
	// without it (2026-12-03, broker/README.md).
	GroupCommitWait time.Duration
	// MaxPendingSends caps sends waiting for group commit; more are refused
	// with TOO_MANY_REQUESTS. Default 16384.
	MaxPendingSends int

	// PullMaxMessages caps the messages of one pull (default 32) and
	// PullMaxBytes their bytes (default 4 MiB).
	PullMaxMessages int
	PullMaxBytes    int
	// MaxHeldPulls caps pulls held for long polling; the excess is
	// answered at once with no new message. Default 10000.
	MaxHeldPulls int
	// MaxHeldPullsPerClient caps the held pulls of one client (its
	// certificate's identity, or else its connection), so that no client
	// can take the whole of MaxHeldPulls and leave others without long
	// polling. Default 2000.
	MaxHeldPullsPerClient int
	// MaxConcurrentStreams caps the RPCs in progress on one client
	// connection (HTTP/2 streams; a held pull is one), and, apart, the
	// sends in progress on its send streams (SendMessageStream). Default
	// 4096.
	MaxConcurrentStreams int
	// StreamWorkers is how many goroutines gRPC keeps to run RPC handlers
	// (grpc.NumStreamWorkers), and the broker to run the sends read from
	// send streams (sendworkers.go), so that a send runs on a stack already
	// grown rather than a new goroutine's: growing a new handler's stack
	// was 8% of the master's CPU under 16 sync senders (pprof,
	// runtime.copystack, 2026-12-02). RPCs beyond this many at once get
	// goroutines of their own, as without workers. Default 64; negative:
	// none.
	StreamWorkers int
	// MaxConnections caps the gRPC connections served at once; more wait
	// in the kernel's accept queue. Default 10000.
	MaxConnections int
	// StreamWindow and ConnWindow are the HTTP/2 flow-control windows the
	// gRPC server grants each RPC and each client connection: how many
	// bytes of one RPC a client may send ahead of the handler's reading
	// them, and how many on the whole connection ahead of the server's
	// transport taking them in (gRPC credits a connection's window as it
	// receives, not as handlers read; what a handler may be given is
	// bounded by the message limits and MaxConcurrentStreams). A client
	// far away on a fast link needs the windows to cover its link's
	// bandwidth-delay product to send at the link's speed. They are
	// static (cluster/pb/flowwindows.go): gRPC's dynamic windows, its default, grow
	// up to 16 MiB and measure the link with a ping after nearly every
	// message a request-and-answer exchange brings. Default 1 MiB and
	// 8 MiB; at least 64 KiB (HTTP/2's initial window, gRPC's least) and
	// at most 1 GiB.
	StreamWindow int
	ConnWindow   int
	// MaxOffsetsPerCommit caps the offsets of one UpdateConsumerOffset.
	// Default 4096.
	MaxOffsetsPerCommit int
	// HoldCheckInterval is how often held pulls are checked against their
	// queue and their timeout (RocketMQ: 5 s with long polling). Default
	// 5 s; 1 s with ShortPolling.
	HoldCheckInterval time.Duration
	ShortPolling      bool
	// MaxSuspend caps a pull's suspend timeout. Default 60 s.
	MaxSuspend time.Duration
	// SlaveReadLag: when a consumer is more messages than this behind on a
	// queue, the master suggests it read that queue from a slave; a slave
	// sends it back when it is less than half of it behind. Default 20000;
	// negative disables slave reads.
	SlaveReadLag int64
	// YoungQueueBytes: a consumer group with no offset committed on a
	// queue that still holds its first message, among the commitlog's
	// newest YoungQueueBytes, is told to start the queue at 0 when its
	// client asks so (RocketMQ's clients, whatever they consume from;
	// raftmq's SDK consuming from the last offset), as RocketMQ's brokers
	// answer (ConsumerManageProcessor: while the first message is in
	// memory, 40% of RAM by default, accessMessageInMemoryMaxRatio). So a
	// group that starts after the first sends to a new topic reads them.
	// Default 40% of the machine's memory; negative: never (the group
	// starts where it consumes from).
	YoungQueueBytes int64

	// AutoCreateTopics creates an unknown topic on its first send with
	// DefaultQueues queues (dev mode; off elsewhere). Default queues 4.
	AutoCreateTopics bool
	DefaultQueues    int32
	// MaxQueues caps a topic's queue counts. Default 256.
	MaxQueues int32
	// OffsetCommitInterval is how often offsets that rode on pulls are
	// replicated, in one Raft entry. Default 200 ms.
	OffsetCommitInterval time.Duration
	// ConsumerExpiry: a consumer without a heartbeat this long leaves its
	// group. Default 120 s.
	ConsumerExpiry time.Duration
	// MaxMessageSize caps one message's body and properties. Default 4 MiB.
	MaxMessageSize int
	// DelayLevels are the delays of retry levels 1..n, space-separated
	// durations. Default DefaultDelayLevels (RocketMQ's 1s ... 2h).
	DelayLevels string
	// MaxReconsumeTimes: a message sent back more often than this goes to
	// the group's dead-letter topic (unless the group's config or the
	// request says otherwise). Default 16.
	MaxReconsumeTimes int32
	// ScheduleInterval is how often the schedule service looks for due
	// delayed messages. Default 100 ms.
	ScheduleInterval time.Duration
	// TimerHorizon is how far ahead a timer message may ask to be
	// delivered (TIMER_DELIVER_MS and the delays). Default 7 days, as
	// RocketMQ's timerMaxDelaySec.
	TimerHorizon time.Duration
	// TimerPrecision is the smallest delay of the timer ladder: a timer
	// is delivered at its time or up to this much later (plus the schedule
	// interval and a commit). Default 100 ms.
	TimerPrecision time.Duration
	// DedupWindow: a message a producer sends again (the same UNIQ_KEY,
	// which RocketMQ's clients and raftmq's SDK keep on a retry) to the
	// same topic within this long of its stored copy is not stored again; the send is
	// answered with the stored copy's id and offsets. Default 2 min, as
	// NATS JetStream's duplicate window; negative disables.
	DedupWindow time.Duration
	// MaxProducers caps the idempotent producers the group remembers at
	// once (producers.go): an InitProducer for a new id past it is
	// refused until some fall silent for DedupWindow. Default 100000.
	// Like DedupWindow, it must be the same on every replica of a group:
	// the state machine decides by both.
	MaxProducers int
	// MaxProducersPerConn caps the producer ids one client connection may
	// be issued (InitProducer), so that one client cannot take them all.
	// Default 256.
	MaxProducersPerConn int
	// TransactionTimeout: a half message not committed or rolled back this
	// long after it was stored is checked back: the master asks a producer
	// of its group, on a check-back stream, for the outcome. Default 6 s,
	// as RocketMQ's transactionTimeOut.
	TransactionTimeout time.Duration
	// TransactionCheckInterval is the least time between two check-backs
	// of one half. Default 30 s, as RocketMQ's transactionCheckInterval.
	TransactionCheckInterval time.Duration
	// TransactionCheckMax: a half still open after this many check-backs
	// is rolled back, and a copy of it stored in TRANS_CHECK_MAX_TIME_TOPIC.
	// Default 15, as RocketMQ's transactionCheckMax.
	TransactionCheckMax int32
	// CatchUpTimeout bounds one copy of the commitlog from a peer when this
	// replica restores a snapshot. Default 30 s.
	CatchUpTimeout time.Duration

	Logger *slog.Logger
}

func (c Config) withDefaults() (Config, error) {
	if c.Group == "" || c.Dir == "" || c.GRPCAddr == "" || c.ReplicaID < 1 {
		return c, errors.New("broker: Config needs Group, ReplicaID >= 1, Dir and GRPCAddr")
	}
	if !validName(c.Group) {
		return c, fmt.Errorf("broker: group name %q must match [A-Za-z0-9_-]{1,127}", c.Group)
	}
	defaults.IfZero(&c.AdvertiseGRPC, c.GRPCAddr)
	defaults.IfZero(&c.Logger, slog.Default())
	c.Logger = c.Logger.With("group", c.Group, "replica", c.ReplicaID)
	c.Raft.ID = strconv.Itoa(int(c.ReplicaID))
	c.Raft.Dir = c.Dir + "/raft"
	defaults.IfZero(&c.Gossip.Cluster, "raftmq")
	c.Raft.TLS, c.Raft.Cluster, c.Raft.Group = c.TLS, c.Gossip.Cluster, c.Group
	if c.HTTPTLS && c.TLS == nil {
		return c, errors.New("broker: HTTPS on the ops endpoint needs TLS")
	}
	if c.ACL != nil && c.TLS == nil {
		return c, errors.New("broker: access control needs TLS (client certificates name the callers)")
	}
	if c.TLS != nil {
		if want := (cluster.Identity{Cluster: c.Gossip.Cluster, Role: cluster.IdentityBroker, Group: c.Group, ID: c.Raft.ID}); c.TLS.Self != want {
			return c, fmt.Errorf("broker: the TLS certificate names %v, not this replica (%v)", c.TLS.Self, want)
		}
	}
	defaults.IfZero(&c.Raft.Logger, c.Logger)
	c.Store.Dir = c.Dir + "/store"
	if c.RaftLogFromDir {
		inCommitlog, err := cluster.RaftLogInCommitlog(c.Raft.Dir)
		if err != nil {
			return c, err
		}
		c.Store.RaftLog = inCommitlog
	}
	defaults.IfZero(&c.Store.Logger, c.Logger)
	defaults.IfZero(&c.SendTimeout, 3*time.Second)
	defaults.IfZero(&c.MaxBatchMessages, 1024)
	defaults.IfZero(&c.EntryMaxMessages, 1024)
	defaults.IfZero(&c.EntryMaxBytes, 4<<20)
	// A follower refuses a larger entry from its leader (cluster's member
	// stream); every entry this broker proposes is within EntryMaxBytes
	// and a command's head, so twice that is headroom.
	defaults.IfZero(&c.Raft.MaxEntryBytes, max(64<<20, 2*c.EntryMaxBytes))
	defaults.IfZero(&c.MaxInflightEntries, 8)
	defaults.IfZero(&c.MaxPendingSends, 16384)
	defaults.IfZero(&c.GroupCommitWait, 2*time.Millisecond)
	defaults.IfZero(&c.PullMaxMessages, 32)
	defaults.IfZero(&c.PullMaxBytes, 4<<20)
	defaults.IfZero(&c.MaxHeldPulls, 10000)
	defaults.IfZero(&c.MaxHeldPullsPerClient, 2000)
	defaults.IfZero(&c.MaxConcurrentStreams, 4096)
	defaults.IfZero(&c.StreamWorkers, 64)
	defaults.IfZero(&c.MaxConnections, 10000)
	defaults.IfZero(&c.StreamWindow, pb.StreamWindowDefault)
	defaults.IfZero(&c.ConnWindow, pb.ConnWindowDefault)
	defaults.IfZero(&c.MaxOffsetsPerCommit, 4096)
	defaults.IfZero(&c.MaxMessageSize, 4<<20)
	if c.HoldCheckInterval == 0 {
		c.HoldCheckInterval = 5 * time.Second
		if c.ShortPolling {
			c.HoldCheckInterval = time.Second
		}
	}
	defaults.IfZero(&c.MaxSuspend, 60*time.Second)
	defaults.IfZero(&c.OffsetCommitInterval, 200*time.Millisecond)
	defaults.IfZero(&c.ConsumerExpiry, 120*time.Second)
	defaults.IfZero(&c.CatchUpTimeout, 30*time.Second)
	defaults.IfZero(&c.ScheduleInterval, 100*time.Millisecond)
	defaults.IfZero(&c.TimerHorizon, 7*24*time.Hour)
	defaults.IfZero(&c.DedupWindow, 2*time.Minute)
	defaults.IfZero(&c.MaxProducers, 100000)
	defaults.IfZero(&c.MaxProducersPerConn, 256)
	c.Store.DedupWindow = max(c.DedupWindow, 0)
	defaults.IfZero(&c.TimerPrecision, 100*time.Millisecond)
	defaults.IfZero(&c.TransactionTimeout, 6*time.Second)
	defaults.IfZero(&c.TransactionCheckInterval, 30*time.Second)
	defaults.IfZero(&c.TransactionCheckMax, 15)
	defaults.IfZero(&c.DelayLevels, DefaultDelayLevels)
	defaults.IfZero(&c.MaxReconsumeTimes, 16)
	if c.Gossip.RefreshInterval == 0 {
		c.Gossip.RefreshInterval = 200 * time.Millisecond
		if c.Gossip.Fast {
			c.Gossip.RefreshInterval = 100 * time.Millisecond
		}
	}
	defaults.IfZero(&c.SlaveReadLag, 20000)
	defaults.IfZero(&c.YoungQueueBytes, memoryBytes()*4/10)
	defaults.IfZero(&c.DefaultQueues, 4)
	defaults.IfZero(&c.MaxQueues, 256)
	if c.Store.MaxQueuesPerTopic == 0 {
		// An if, not IfZero, which would build the timer ladder the
		// schedule topic's queues come from even when the field is set:
		// only the validation below vouches for TimerPrecision, and one
		// that is not positive never ends the ladder.
		c.Store.MaxQueuesPerTopic = max(c.MaxQueues, scheduleQueues(c))
	}
	// Room for the record's header, topic, tags, keys and properties.
	defaults.IfZero(&c.Store.MaxMessageSize, c.MaxMessageSize+64<<10)
	switch {
	case c.MaxBatchMessages < 1, c.EntryMaxMessages < 1, c.EntryMaxBytes < 1, c.MaxInflightEntries < 1,
		c.MaxPendingSends < 1, c.PullMaxMessages < 1, c.PullMaxBytes < 1, c.MaxHeldPulls < 0, c.MaxMessageSize < 1,
		c.MaxHeldPullsPerClient < 1, c.MaxConcurrentStreams < 1, c.MaxConnections < 1, c.MaxOffsetsPerCommit < 1, c.MaxProducers < 1, c.MaxProducersPerConn < 1,
		c.TransactionCheckMax < 1, c.TransactionTimeout < 0, c.TransactionCheckInterval < 0:
		return c, errors.New("broker: limits must be positive")
	case !pb.ValidFlowWindow(c.StreamWindow) || !pb.ValidFlowWindow(c.ConnWindow):
		return c, fmt.Errorf("broker: StreamWindow and ConnWindow must be %d bytes to %d", pb.FlowWindowMin, pb.FlowWindowMax)
	case c.EntryMaxBytes < c.MaxMessageSize:
		return c, errors.New("broker: EntryMaxBytes must hold a message of MaxMessageSize")
	case c.DefaultQueues < 1 || c.DefaultQueues > c.MaxQueues || c.MaxQueues > c.Store.MaxQueuesPerTopic:
		return c, errors.New("broker: DefaultQueues <= MaxQueues <= Store.MaxQueuesPerTopic")
	case c.TimerPrecision < time.Millisecond || c.TimerHorizon < c.TimerPrecision:
		return c, errors.New("broker: TimerPrecision must be at least 1 ms, and TimerHorizon at least TimerPrecision")
	case scheduleQueues(c) > c.Store.MaxQueuesPerTopic:
		return c, fmt.Errorf("broker: the schedule topic needs %d queues, more than Store.MaxQueuesPerTopic %d", scheduleQueues(c), c.Store.MaxQueuesPerTopic)
	}
	return c, nil
}

// validName is the rule for group and topic names, as RocketMQ's.
func validName(s string) bool { return message.ValidTopic(s) }
