package cluster

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// failingCollector yields one metric that cannot be gathered.
type failingCollector struct{ desc *prometheus.Desc }

func (c failingCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }
func (c failingCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.NewInvalidMetric(c.desc, errors.New("broken on purpose"))
}

// A collector that fails costs only its own series: /metrics answers 200
// with the others and counts the failure.
func TestMetricsServeWhatGathersWhenACollectorFails(t *testing.T) {
	reg := prometheus.NewRegistry()
	good := prometheus.NewCounter(prometheus.CounterOpts{Name: "good_total", Help: "served"})
	good.Add(3)
	reg.MustRegister(good, failingCollector{desc: prometheus.NewDesc("broken", "never served", nil, nil)})
	ops, err := ServeOps("127.0.0.1:0", reg, func() error { return nil }, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ops.Close()
	var body []byte
	for range 2 { // a scrape counts its own failure after it gathered: the second shows the first's
		resp, err := http.Get("http://" + ops.Addr() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("/metrics: %s, want 200 with the series that gathered\n%s", resp.Status, body)
		}
	}
	for _, want := range []string{"good_total 3", `promhttp_metric_handler_errors_total{cause="gathering"} 1`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
}
