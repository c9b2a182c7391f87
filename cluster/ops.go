package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// OpsServer is a node's operations endpoint over HTTP: /metrics in the
// Prometheus format, and /healthz, 200 while the node is serving and 503
// with the reason otherwise.
type OpsServer struct {
	srv *http.Server
	lis net.Listener
}

// ServeOps starts the endpoint on addr for the metrics in reg; healthy says
// whether the node is serving.
func ServeOps(addr string, reg *prometheus.Registry, healthy func() error) (*OpsServer, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("cluster: ops endpoint on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if err := healthy(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	o := &OpsServer{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}, lis: lis}
	go o.srv.Serve(lis)
	return o, nil
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
