package main

import (
	"compress/gzip"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/egress-proxies/provider_health_exporter/config"
	"github.com/egress-proxies/provider_health_exporter/internal/engine"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

// entriesFunc lists the configured entries with how to build their
// checkers. It is a parameter so that tests can wire test checkers through
// the real HTTP surface.
type entriesFunc func(cfg *config.Config, logger *slog.Logger) []engine.Entry

type exporterOptions struct {
	logger     *slog.Logger
	configFile string
	// kinds is the table of kinds; nil is builtinKinds.
	kinds       []provider.Kind
	entries     entriesFunc
	offset      time.Duration
	maxRequests int
	metricsPath string
	// linkPrefix starts every link the exporter writes (--web.external-url).
	linkPrefix string
	// web is where the exporter is reached, for the addresses /sd gives.
	web webPaths
	// enablePprof serves net/http/pprof under /debug/pprof/.
	enablePprof bool
	// disableExporterMetrics drops the Go, process and promhttp metrics
	// from /metrics, as node_exporter's flag of that name does.
	disableExporterMetrics bool
}

// exporter is the HTTP surface and the reload logic around one Engine.
type exporter struct {
	exporterOptions
	engine     *engine.Engine
	self       *prometheus.Registry
	reloadOK   prometheus.Gauge
	reloadTime prometheus.Gauge
	// inflight bounds concurrent requests that run checks (--web.max-requests).
	inflight chan struct{}
	answers  answerTimes
	// gzip keeps the gzip writers of answers for reuse, as promhttp
	// does: each holds its compressor's large state.
	gzip sync.Pool

	reloadMu sync.Mutex // one reload at a time
	cfgMu    sync.RWMutex
	cfg      *config.Config
	// cfgText is /config's answer for cfg, rendered once per load
	// (configtext.go).
	cfgText *configText
}

func newExporter(o exporterOptions) *exporter {
	x := &exporter{
		exporterOptions: o,
		engine:          engine.NewEngine(o.logger),
		reloadOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "provider_health_exporter_config_last_reload_successful",
			Help: "Whether the last configuration reload attempt was successful.",
		}),
		reloadTime: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "provider_health_exporter_config_last_reload_success_timestamp_seconds",
			Help: "Timestamp of the last successful configuration reload.",
		}),
	}
	if x.kinds == nil {
		x.kinds = builtinKinds()
	}
	if x.entries == nil {
		x.entries = func(cfg *config.Config, logger *slog.Logger) []engine.Entry {
			return engine.Entries(x.kinds, cfg, logger)
		}
	}
	if o.maxRequests > 0 {
		x.inflight = make(chan struct{}, o.maxRequests)
	}
	x.self = selfRegistry(x.reloadOK, x.reloadTime, !o.disableExporterMetrics)
	return x
}

func (x *exporter) handler() http.Handler {
	mux := http.NewServeMux()
	// promhttp_metric_handler_* count the scrapes of /metrics, as in
	// node_exporter; /probe is not counted, its scrapes are per provider.
	metrics := x.limit(http.HandlerFunc(x.serveMetrics))
	if !x.disableExporterMetrics {
		metrics = promhttp.InstrumentMetricHandler(x.self, metrics)
	}
	mux.Handle(x.metricsPath, metrics)
	// Every page that builds an answer from the whole configuration or
	// every target counts against --web.max-requests, not only those
	// that check (docs/security.md: "Strings, labels and pages").
	mux.Handle("/sd", x.limit(http.HandlerFunc(x.serveSD)))
	if x.enablePprof {
		handlePprof(mux)
	}
	mux.Handle("/probe", x.limit(http.HandlerFunc(x.serveProbe)))
	mux.Handle("/api/v1/status", x.limit(http.HandlerFunc(x.serveStatusJSON)))
	mux.Handle("/config", x.limit(http.HandlerFunc(x.serveConfig)))
	mux.HandleFunc("/-/healthy", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "Healthy")
	})
	mux.HandleFunc("/-/ready", func(w http.ResponseWriter, _ *http.Request) {
		if x.config() == nil {
			http.Error(w, "no configuration loaded", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "Ready")
	})
	mux.HandleFunc("/-/reload", x.serveReload)
	mux.Handle("/{$}", x.limit(http.HandlerFunc(x.serveLanding)))
	return mux
}

// limit answers 503 instead of piling up checks once --web.max-requests
// requests are already running.
func (x *exporter) limit(next http.Handler) http.Handler {
	if x.inflight == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case x.inflight <- struct{}{}:
			defer func() { <-x.inflight }()
			next.ServeHTTP(w, r)
		default:
			http.Error(w, fmt.Sprintf("too many concurrent requests (--web.max-requests=%d)", x.maxRequests), http.StatusServiceUnavailable)
		}
	})
}

// request builds the engine request from the scrape's timeout header.
func (x *exporter) request(r *http.Request) (engine.Request, error) {
	st, err := engine.ParseScrapeTimeout(r.Header.Get(engine.ScrapeTimeoutHeader))
	if err != nil {
		return engine.Request{}, err
	}
	return engine.Request{ScrapeTimeout: st, Offset: x.offset}, nil
}

// serveMetrics checks every provider, or with collect[] only some kinds, as
// node_exporter's collect[] selects collectors: collect[]=exporter alone
// serves the exporter's own metrics without checking anything, for the
// multi-target setup where /probe does the checks.
func (x *exporter) serveMetrics(w http.ResponseWriter, r *http.Request) {
	req, err := x.request(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if collect, ok := r.URL.Query()["collect[]"]; ok {
		req.Kinds = map[string]bool{}
		for _, k := range collect {
			if !validCollect(x.kinds, k) {
				http.Error(w, fmt.Sprintf("collect[]=%s: want one of %s", provider.Echo(k), strings.Join(collectValues(x.kinds), ", ")), http.StatusBadRequest)
				return
			}
			req.Kinds[k] = true
		}
	}
	shape := answerShape(r)
	req.Reserve = x.answers.reserve(shape)
	results, err := x.engine.Run(r.Context(), req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	x.answer(w, r, results, x.self, shape)
}

// serveResults writes the results, merged with the families of self when
// it is not nil, in the format and encoding the request negotiates: what
// promhttp.HandlerFor a Gatherer of both (ContinueOnError, OpenMetrics
// enabled) writes, without a Registry in between (exposition.Exposition).
func (x *exporter) serveResults(w http.ResponseWriter, r *http.Request, results []engine.ProviderResult, self prometheus.Gatherer) {
	exp, err := engine.NewExposition(results)
	if err != nil {
		x.logger.Error("error gathering metrics", "err", err)
	}
	var others []*dto.MetricFamily
	if self != nil {
		if others, err = self.Gather(); err != nil {
			x.logger.Error("error gathering metrics", "err", err)
		}
	}
	// Prometheus 3 asks for OpenMetrics first; the text and protobuf
	// formats are still served to whoever asks for them.
	format := expfmt.NegotiateAccept(r.Header, expfmt.DefaultOpenMetricsAcceptedFormats()...)
	h := w.Header()
	h.Add("Vary", "Accept")
	h.Add("Vary", "Accept-Encoding")
	h.Set("Content-Type", string(format))
	var out io.Writer = w
	if acceptsGzip(r.Header) {
		h.Set("Content-Encoding", "gzip")
		gz, _ := x.gzip.Get().(*gzip.Writer)
		if gz == nil {
			gz = gzip.NewWriter(w)
		} else {
			gz.Reset(w)
		}
		defer func() {
			if err := gz.Close(); err != nil {
				x.logger.Debug("writing metrics", "err", err)
			}
			x.gzip.Put(gz)
		}()
		out = gz
	}
	// name[] selects families, as promhttp's handler does.
	var keep func(string) bool
	if names := r.URL.Query()["name[]"]; len(names) > 0 {
		keep = func(n string) bool { return slices.Contains(names, n) }
	}
	if err := exp.Write(out, format, others, keep); err != nil {
		x.logger.Error("error encoding and sending metric family", "err", err)
	}
}
