// Package client is raftmq's Go SDK: route discovery through the name
// servers, a Producer (sync, async, one-way and batch sends, queue
// selectors, retries), a TransactionProducer (RocketMQ's transactional
// messages, with check-backs), a PullConsumer (blocking and callback pulls,
// offset helpers) and a PushConsumer (rebalance, process queues, retry
// and dead letters). It imports only the contract, cluster/pb (the gRPC
// service and its error reasons) and message (the record format and the
// contract's names), gRPC, and internal/defaults (the configs' defaults
// helper, which imports nothing): no Raft, gossip or storage, and it
// builds for any GOOS (deps_test.go and .ci/run hold it to that). It
// sends messages encoded as records and decodes the records it receives.
//
// Files:
//   - options.go: the options every client takes (name servers, timeouts,
//     fault isolation, TLS, HTTP/2 flow-control windows);
//   - tls.go: TLS to the cluster's nodes, checked against its CA;
//   - routes.go: connections, the name servers, cached topic routes;
//   - routewatch.go: a push consumer following its topics' routes on a
//     name server, rebalancing as soon as a topic's queues change;
//   - faults.go: brokers isolated for a while after a failed send;
//   - message.go: Message, MessageExt and MessageQueue, decoding records;
//   - producer.go: the Producer: sends, queue selection, retries (a try
//     with an unknown outcome retried on its queue, for the broker's
//     deduplication);
//   - sendstream.go: a producer's small sends on one stream per broker
//     (SendMessageStream) rather than an RPC each, answers matched by id,
//     the sends that queue while one message is written batched in the
//     next (to a broker that reads batches); RPCs to a broker without it;
//   - sequencer.go: the idempotent producer's id and epoch on each group
//     and its sequence on each queue, which a send keeps on every try;
//   - transaction.go: the TransactionProducer: half messages, their
//     commit or rollback, and the check-back streams it keeps open to the
//     masters, answered by its listener;
//   - pullconsumer.go: the PullConsumer: pulls and offsets by hand;
//   - pushconsumer.go: the PushConsumer: its configuration, Start and
//     Shutdown, heartbeats to every replica;
//   - memberlist.go: the group's members as the union of the replicas'
//     lists, the last list kept while every replica has just restarted;
//   - rebalance.go: the allocation strategies, and the push consumer's
//     rebalance (RocketMQ's RebalanceImpl): its share of each
//     subscription's queues, the queues started and stopped to match, and
//     the queue locks of orderly consumption;
//   - pullservice.go: the pull loop of each queue a push consumer holds
//     (RocketMQ's PullMessageService), long polling under flow control;
//   - processqueue.go: the messages a queue holds in flight, and the
//     offset it is safe to commit (RocketMQ's ProcessQueue);
//   - consumeservice.go: the workers that call the listener, concurrent
//     or orderly, and the send-back of what it could not consume, for a
//     retry (RocketMQ's ConsumeMessageService);
//   - offsetstore.go: offsets on the brokers, or in a local file, and the
//     push consumer's commits of them (RocketMQ's OffsetStore).
package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/raftmq/raftmq/cluster/pb"
)

// Option configures a producer or consumer.
type Option func(*options)

type options struct {
	nameServers       []string
	sendTimeout       time.Duration
	attemptTimeout    time.Duration
	faultIsolation    time.Duration
	retries           int
	idempotentRetries bool // WithIdempotentRetries
	producerIDs       bool // WithProducerIDs
	sendStreams       bool // WithSendStreams
	routeRefresh      time.Duration
	maxMessageSize    int
	group             string
	transactionTopics []string // WithTransactionTopics
	logger            *slog.Logger
	dialer            func(ctx context.Context, addr string) (net.Conn, error)
	tls               *tls.Config
	deadLetters       bool          // WithDeadLetterReads
	accessKey         [2]string     // id, secret: WithAccessKey
	signer            *pb.AccessKey // made from accessKey by buildOptions
	streamWindow      int           // WithFlowControlWindows
	connWindow        int
}

func defaultOptions() options {
	return options{
		sendTimeout:       3 * time.Second,
		faultIsolation:    5 * time.Second,
		retries:           2,
		idempotentRetries: true,
		producerIDs:       true,
		sendStreams:       true,
		routeRefresh:      30 * time.Second,
		maxMessageSize:    4 << 20,
		logger:            slog.Default(),
		streamWindow:      pb.StreamWindowDefault,
		connWindow:        pb.ConnWindowDefault,
	}
}

func buildOptions(opts []Option) (options, error) {
	o := defaultOptions()
	for _, f := range opts {
		f(&o)
	}
	if len(o.nameServers) == 0 {
		return o, errors.New("client: no name server (use WithNameServers)")
	}
	for _, w := range []int{o.streamWindow, o.connWindow} {
		if !pb.ValidFlowWindow(w) {
			return o, fmt.Errorf("client: flow-control windows must be %d bytes to %d, not %d", pb.FlowWindowMin, pb.FlowWindowMax, w)
		}
	}
	if o.accessKey != [2]string{} {
		if o.tls == nil {
			return o, errors.New("client: access keys sign for the server a certificate names: they need WithTLS")
		}
		var err error
		if o.signer, err = pb.NewAccessKey(o.accessKey[0], o.accessKey[1]); err != nil {
			return o, fmt.Errorf("client: %w", err)
		}
	}
	return o, nil
}

// WithNameServers sets the name servers' gRPC addresses; any one answers.
func WithNameServers(addrs ...string) Option {
	return func(o *options) { o.nameServers = append(o.nameServers, addrs...) }
}

// WithSendTimeout bounds a send, retries included. Default 3 s.
func WithSendTimeout(d time.Duration) Option { return func(o *options) { o.sendTimeout = d } }

// WithAttemptTimeout bounds each try of a send, so that a master that
// stopped answering (frozen, or cut off the network) costs one attempt and
// the send goes on to the group's new master within the send timeout. A
// try that runs out has an unknown outcome: it may have been stored; the
// retry goes to the same queue and the broker answers it with the stored
// copy (WithIdempotentRetries). Default 0: a try may take the whole send
// timeout.
func WithAttemptTimeout(d time.Duration) Option { return func(o *options) { o.attemptTimeout = d } }

// WithFaultIsolation sets how long round-robin sends steer around a master
// that left a send without an answer (timed out or unreachable), while
// another group can take them. Orderly sends stay on their queue. Default
// 5 s; 0 turns it off.
func WithFaultIsolation(d time.Duration) Option { return func(o *options) { o.faultIsolation = d } }

// WithRetries sets how many times a send that failed retriably is tried
// again (on another group when the topic has one, else on the group's new
// master). Default 2.
func WithRetries(n int) Option { return func(o *options) { o.retries = n } }

// WithIdempotentRetries: a send whose outcome is unknown (the try timed
// out, or its connection failed) is tried again on the same queue, at its
// group's master of the moment, so that the broker finds the stored copy
// by the messages' unique keys (within its dedup window, 2 min by default)
// and answers with it instead of storing the messages twice. A send the
// broker refused (a slave, too many requests) may still go to another
// group. Default true; false lets every retry go to another group, as
// RocketMQ's producer does, at the price of a duplicate when the first
// try was stored.
func WithIdempotentRetries(on bool) Option { return func(o *options) { o.idempotentRetries = on } }

// WithProducerIDs: with idempotent retries, the producer asks each broker
// group for a producer id and numbers its messages per queue, and the
// group knows a retry by its numbers (Kafka's idempotent producer) rather
// than by looking its unique keys up: cheaper for the broker, and it also
// refuses a send of an older instance of the producer (PRODUCER_FENCED).
// A group that issues no ids (an older broker, deduplication off) gets
// the unique keys alone. Default true.
func WithProducerIDs(on bool) Option { return func(o *options) { o.producerIDs = on } }

// WithSendStreams sets whether a producer sends its small sends (up to
// 32 KiB of records) on one SendMessageStream per broker rather than an
// RPC each: the same answers for less of both sides' CPU (sendstream.go).
// A broker without the stream gets RPCs; so does a producer that signs
// with an access key (a signature covers one RPC's request). Default
// true.
func WithSendStreams(on bool) Option { return func(o *options) { o.sendStreams = on } }

// WithFlowControlWindows sets the HTTP/2 flow-control windows the client
// grants each RPC (stream) and each connection (conn): how many bytes of
// one answer stream, such as a pull's, a broker or name server may send
// ahead of the client's reading them, and how many on the whole
// connection ahead of the client's transport taking them in. They are
// static: gRPC's dynamic windows, its default, measure the link with a
// ping after nearly every message of a request-and-answer exchange, which
// a synchronous sender pays for in system calls and wake-ups on both
// sides (the brokers' windows are static too: broker.Config.StreamWindow).
// Default 1 MiB and 8 MiB; each 64 KiB to 1 GiB. A link whose
// bandwidth-delay product is larger (far brokers on a fast network) wants
// larger windows.
func WithFlowControlWindows(stream, conn int) Option {
	return func(o *options) { o.streamWindow, o.connWindow = stream, conn }
}

// WithRouteRefresh sets how long a cached route is used. Default 30 s.
func WithRouteRefresh(d time.Duration) Option { return func(o *options) { o.routeRefresh = d } }

// WithMaxMessageSize sets the body size the producer refuses before
// sending. Default 4 MiB (the brokers' default).
func WithMaxMessageSize(n int) Option { return func(o *options) { o.maxMessageSize = n } }

// WithDeadLetterReads lets a pull consumer read dead-letter topics
// (DLQTopic), which brokers create neither readable nor writable so that
// nothing consumes them by accident: Queues lists their queues and pulls
// of them ask for the dead letters (an admin's right where access control
// is on). raftmq dlq resend uses it.
func WithDeadLetterReads() Option { return func(o *options) { o.deadLetters = true } }

// WithGroup sets a consumer's group, or a transaction producer's
// producer group (the group the broker checks back).
func WithGroup(g string) Option { return func(o *options) { o.group = g } }

// WithTransactionTopics names topics a transaction producer takes
// check-backs for from its start: the masters of their groups may ask it
// about halves another producer of its group sent (one that died before
// it could end them). The topics it sends to are added as it sends.
func WithTransactionTopics(topics ...string) Option {
	return func(o *options) { o.transactionTopics = append(o.transactionTopics, topics...) }
}

// WithLogger sets the logger. Default slog.Default().
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithDialer makes the client open its connections through dial, given
// the address exactly as the name servers and brokers advertise it (no
// DNS lookup first). It is for networks the client does not share with
// the brokers: a tunnel, or a host reaching containers that advertise
// names only the containers' network resolves. Default: a TCP dial after
// a DNS lookup.
func WithDialer(dial func(ctx context.Context, addr string) (net.Conn, error)) Option {
	return func(o *options) { o.dialer = dial }
}
