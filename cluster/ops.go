package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// OpsServer is a node's operations endpoint over HTTP: /metrics in the
// Prometheus format, /healthz, 200 while the node is serving and 503 with
// the reason otherwise, and, when asked for, Go's profiles under
// /debug/pprof/ (net/http/pprof).
type OpsServer struct {
	srv *http.Server
	lis net.Listener
}

// ServeOps starts the endpoint on addr for the metrics in reg; healthy says
// whether the node is serving. With profiling, /debug/pprof/ serves CPU,
// heap and goroutine profiles: off by default, as they show the process's
// insides to anyone who reaches the port and a CPU profile costs the node
// while it runs. With serverTLS (the node's TLS.ServerConfig()), the
// endpoint speaks HTTPS only.
func ServeOps(addr string, reg *prometheus.Registry, healthy func() error, profiling bool, serverTLS *tls.Config) (*OpsServer, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("cluster: ops endpoint on %s: %w", addr, err)
	}
	if serverTLS != nil {
		lis = tls.NewListener(lis, serverTLS)
	}
	mux := http.NewServeMux()
	// A collector that fails (a library's series that change their labels,
	// say: ExportRaftMetrics puts raft's and memberlist's in reg) costs its
	// own series, not the whole page: the rest are served, the failure is
	// counted (promhttp_metric_handler_errors_total{cause="gathering"}) and
	// logged at most once a minute.
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		Registry: reg, ErrorHandling: promhttp.ContinueOnError, ErrorLog: &gatherLog{every: time.Minute},
	}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if err := healthy(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	if profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	o := &OpsServer{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}, lis: lis}
	go o.srv.Serve(lis)
	return o, nil
}

// gatherLog logs a failed gathering of /metrics, at most once every.
type gatherLog struct {
	every time.Duration
	mu    sync.Mutex
	last  time.Time
}

func (l *gatherLog) Println(v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now := time.Now(); now.Sub(l.last) >= l.every {
		l.last = now
		slog.Warn("metrics: some series could not be gathered; the rest are served", "err", fmt.Sprint(v...))
	}
}

// Addr is where the endpoint listens.
func (o *OpsServer) Addr() string { return o.lis.Addr().String() }

// Close stops the endpoint.
func (o *OpsServer) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := o.srv.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
