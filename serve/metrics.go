package serve

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/swetui/swetui/event"
)

// durationBuckets span a syntax check (a millisecond) to an evaluation at
// sandbox.timeout_s's default (300 s) and past it.
var durationBuckets = []float64{.001, .005, .01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800}

// metrics are the server's Prometheus series, on a registry of its own (no
// global state: tests start many servers in one process).
type metrics struct {
	reg         *prometheus.Registry
	http        *prometheus.CounterVec
	evaluations *prometheus.CounterVec
	cacheHits   *prometheus.CounterVec
	infra       *prometheus.CounterVec
	hacks       *prometheus.CounterVec
	rejected    *prometheus.CounterVec
	evalSeconds *prometheus.HistogramVec
	reqSeconds  *prometheus.HistogramVec
	waitSeconds prometheus.Histogram
}

func newMetrics(s *Server) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.http = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "swetui_serve_http_requests_total",
		Help: "HTTP requests by handler, method and status code."}, []string{"handler", "method", "code"})
	m.evaluations = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "swetui_serve_evaluations_total",
		Help: "Patches scored (not from the cache) by phase and outcome: resolved, applied (not resolved), not_applied, valid (syntax phase), invalid (no well-formed diff), infra."},
		[]string{"phase", "outcome"})
	m.cacheHits = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "swetui_serve_cache_hits_total",
		Help: "Patches answered from the verdict cache, by phase."}, []string{"phase"})
	m.infra = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "swetui_serve_infra_failures_total",
		Help: "Patches whose evaluation failed for infrastructure reasons (masked, not the model's), by phase."}, []string{"phase"})
	m.hacks = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "swetui_serve_hack_flags_total",
		Help: "Hack flags that cost a scored patch its reward, by flag."}, []string{"flag"})
	m.rejected = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "swetui_serve_rejected_total",
		Help: "Score requests refused before scoring: queue_full (429) or stopping (503)."}, []string{"reason"})
	m.evalSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "swetui_serve_evaluation_duration_seconds",
		Help: "Time to score one patch (extraction, apply check, container), by phase.", Buckets: durationBuckets}, []string{"phase"})
	m.reqSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "swetui_serve_request_duration_seconds",
		Help: "Time to answer a score request, its wait included, by phase.", Buckets: durationBuckets}, []string{"phase"})
	m.waitSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "swetui_serve_queue_wait_seconds",
		Help: "Time score requests waited for a slot.", Buckets: durationBuckets})
	m.reg.MustRegister(m.http, m.evaluations, m.cacheHits, m.infra, m.hacks, m.rejected, m.evalSeconds, m.reqSeconds, m.waitSeconds,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "swetui_serve_queue_depth",
			Help: "Score requests waiting for a slot."}, func() float64 { _, w := s.queue.depth(); return float64(w) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "swetui_serve_requests_in_flight",
			Help: "Score requests being scored."}, func() float64 { r, _ := s.queue.depth(); return float64(r) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "swetui_serve_cache_entries",
			Help: "Verdicts in the cache."}, func() float64 { return float64(s.cache.len()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "swetui_serve_cache_bytes",
			Help: "Bytes the cached verdicts hold (serve.cache_mb bounds them)."}, func() float64 { return float64(s.cache.held()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "swetui_serve_inflight_bytes",
			Help: "Bytes of request bodies held (serve.inflight_mb bounds them)."}, func() float64 { return float64(s.bodies.held()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "swetui_serve_sessions",
			Help: "Agent sessions open."}, func() float64 { s.live.mu.Lock(); defer s.live.mu.Unlock(); return float64(len(s.live.byID)) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "swetui_serve_tasks",
			Help: "Instances of the loaded dataset."}, func() float64 { return float64(len(s.byID)) }),
		poolCollector{s.opts.Pool},
	)
	return m
}

// instrument counts the requests of one handler.
func (m *metrics) instrument(name string, h http.Handler) http.Handler {
	return promhttp.InstrumentHandlerCounter(m.http.MustCurryWith(prometheus.Labels{"handler": name}), h)
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// outcome names what became of one scored patch.
func outcome(v event.Verdict) string {
	switch {
	case v.Infra:
		return "infra"
	case !v.SyntaxOK:
		return "invalid"
	case v.Resolved:
		return "resolved"
	case v.Applied:
		return "applied"
	case v.ApplyChecked:
		return "not_applied"
	}
	return "valid"
}

// observe counts one verdict scored for a request (not from the cache).
func (m *metrics) observe(v event.Verdict) {
	m.evaluations.WithLabelValues(v.Phase, outcome(v)).Inc()
	m.evalSeconds.WithLabelValues(v.Phase).Observe(v.Durations.Total.Seconds())
	if v.Infra {
		m.infra.WithLabelValues(v.Phase).Inc()
	}
	for _, h := range v.Hacks {
		m.hacks.WithLabelValues(h).Inc()
	}
}

// poolCollector exposes the sandbox pool's state at each scrape: Docker
// hosts up and known, busy workers, the pool's queue and its lifetime
// counts. Nothing without a pool.
type poolCollector struct{ pool PoolState }

var (
	descHostsUp   = prometheus.NewDesc("swetui_serve_docker_hosts_up", "Docker hosts answering.", nil, nil)
	descHosts     = prometheus.NewDesc("swetui_serve_docker_hosts", "Docker hosts configured.", nil, nil)
	descBusy      = prometheus.NewDesc("swetui_serve_pool_workers_busy", "Sandbox workers running an evaluation.", nil, nil)
	descWorkers   = prometheus.NewDesc("swetui_serve_pool_workers", "Sandbox workers.", nil, nil)
	descPoolQueue = prometheus.NewDesc("swetui_serve_pool_queue", "Container evaluations waiting for a worker.", nil, nil)
	descPoolDone  = prometheus.NewDesc("swetui_serve_pool_evaluations_total", "Container evaluations finished, whatever their outcome.", nil, nil)
	descTimeouts  = prometheus.NewDesc("swetui_serve_pool_timeouts_total", "Container evaluations killed at their deadline.", nil, nil)
	descPoolInfra = prometheus.NewDesc("swetui_serve_pool_infra_failures_total", "Container evaluations that ended in an infrastructure failure (after retries).", nil, nil)
	descRetries   = prometheus.NewDesc("swetui_serve_pool_retries_total", "Container evaluations retried after an infrastructure failure.", nil, nil)
)

func (c poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descHostsUp, descHosts, descBusy, descWorkers, descPoolQueue, descPoolDone, descTimeouts, descPoolInfra, descRetries} {
		ch <- d
	}
}

func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	if c.pool == nil {
		return
	}
	st := c.pool.State()
	up, busy := 0, 0
	for _, h := range st.Hosts {
		if h.Up {
			up++
		}
	}
	for _, w := range st.Workers {
		if w.Busy {
			busy++
		}
	}
	gauge := func(d *prometheus.Desc, v int) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v))
	}
	counter := func(d *prometheus.Desc, v int) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	gauge(descHostsUp, up)
	gauge(descHosts, len(st.Hosts))
	gauge(descBusy, busy)
	gauge(descWorkers, len(st.Workers))
	gauge(descPoolQueue, st.Queue)
	counter(descPoolDone, st.Done)
	counter(descTimeouts, st.Timeouts)
	counter(descPoolInfra, st.InfraFailures)
	counter(descRetries, st.Retries)
}
