package main

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"go.yaml.in/yaml/v3"

	"github.com/egress-proxies/provider_health_exporter/collector"
	"github.com/egress-proxies/provider_health_exporter/config"
)

// entriesFunc lists the configured entries with how to build their
// checkers. It is a parameter so that tests can wire test checkers through
// the real HTTP surface.
type entriesFunc func(cfg *config.Config, logger *slog.Logger) []collector.Entry

type exporterOptions struct {
	logger      *slog.Logger
	configFile  string
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
	engine     *collector.Engine
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
}

func newExporter(o exporterOptions) *exporter {
	x := &exporter{
		exporterOptions: o,
		engine:          collector.NewEngine(o.logger),
		reloadOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "provider_health_exporter_config_last_reload_successful",
			Help: "Whether the last configuration reload attempt was successful.",
		}),
		reloadTime: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "provider_health_exporter_config_last_reload_success_timestamp_seconds",
			Help: "Timestamp of the last successful configuration reload.",
		}),
	}
	if o.maxRequests > 0 {
		x.inflight = make(chan struct{}, o.maxRequests)
	}
	x.self = selfRegistry(x.reloadOK, x.reloadTime, !o.disableExporterMetrics)
	return x
}

// reload loads the config file and, if it is valid and every provider could
// be built, puts it in force. Otherwise the running config stays.
func (x *exporter) reload() error {
	x.reloadMu.Lock()
	defer x.reloadMu.Unlock()
	cfg, err := config.Load(x.configFile)
	if err == nil {
		err = x.engine.Load(x.entries(cfg, x.logger))
	}
	if err != nil {
		x.reloadOK.Set(0)
		return err
	}
	x.cfgMu.Lock()
	x.cfg = cfg
	x.cfgMu.Unlock()
	x.reloadOK.Set(1)
	x.reloadTime.SetToCurrentTime()
	x.logger.Info("loaded config", "file", x.configFile, "summary", cfg.Summary())
	return nil
}

func (x *exporter) config() *config.Config {
	x.cfgMu.RLock()
	defer x.cfgMu.RUnlock()
	return x.cfg
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
	mux.HandleFunc("/sd", x.serveSD)
	if x.enablePprof {
		handlePprof(mux)
	}
	mux.Handle("/probe", x.limit(http.HandlerFunc(x.serveProbe)))
	mux.Handle("/api/v1/status", x.limit(http.HandlerFunc(x.serveStatusJSON)))
	mux.HandleFunc("/config", x.serveConfig)
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
func (x *exporter) request(r *http.Request) (collector.Request, error) {
	st, err := collector.ParseScrapeTimeout(r.Header.Get(collector.ScrapeTimeoutHeader))
	if err != nil {
		return collector.Request{}, err
	}
	return collector.Request{ScrapeTimeout: st, Offset: x.offset}, nil
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
			if !validCollect(k) {
				http.Error(w, fmt.Sprintf("collect[]=%q: want one of %s", k, strings.Join(collectValues(), ", ")), http.StatusBadRequest)
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

// answer serves the results and remembers how long that took for the
// next request of its shape.
func (x *exporter) answer(w http.ResponseWriter, r *http.Request, results []collector.ProviderResult, self prometheus.Gatherer, shape string) {
	begin := time.Now()
	x.serveResults(w, r, results, self)
	x.answers.observe(shape, time.Since(begin))
}

// answerTimes remembers, per request shape, how long the last answer took
// to build and write after the checks: the next request of that shape
// has its checks end that much earlier (twice that, for the jitter of a
// loaded machine; the engine takes at most a quarter of the budget), so
// that its answer, and not only its checks, is done within the budget
// (docs/configuration.md: "Timeouts").
type answerTimes struct {
	mu   sync.Mutex
	last map[string]time.Duration
}

// maxAnswerShapes bounds what clients can make the exporter remember: a
// query string is theirs to vary.
const maxAnswerShapes = 1024

// answerShape is what decides the cost of an answer: what is checked
// (path and query) and how it is encoded (Accept, Accept-Encoding).
func answerShape(r *http.Request) string {
	return r.URL.Path + "?" + r.URL.RawQuery + "\n" + r.Header.Get("Accept") + "\n" + r.Header.Get("Accept-Encoding")
}

func (a *answerTimes) reserve(shape string) time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	return 2 * a.last[shape]
}

func (a *answerTimes) observe(shape string, d time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.last[shape]; !ok && len(a.last) >= maxAnswerShapes {
		a.last = nil // forget them all: the shapes in use come back at their next request
	}
	if a.last == nil {
		a.last = map[string]time.Duration{}
	}
	a.last[shape] = d
}

// serveResults writes the results, merged with the families of self when
// it is not nil, in the format and encoding the request negotiates: what
// promhttp.HandlerFor a Gatherer of both (ContinueOnError, OpenMetrics
// enabled) writes, without a Registry in between (collector.Exposition).
func (x *exporter) serveResults(w http.ResponseWriter, r *http.Request, results []collector.ProviderResult, self prometheus.Gatherer) {
	exp, err := collector.NewExposition(results)
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

// acceptsGzip tells whether the answer is gzipped: the choice promhttp
// makes between identity and gzip, the first of them with the highest q
// in Accept-Encoding, identity when none is acceptable.
func acceptsGzip(h http.Header) bool {
	best, bestQ := "", -1.0
	for _, offer := range []string{"identity", "gzip"} {
		for _, v := range h.Values("Accept-Encoding") {
			for spec := range strings.SplitSeq(v, ",") {
				value, params, _ := strings.Cut(spec, ";")
				value = strings.TrimSpace(value)
				q := 1.0
				if params = strings.TrimSpace(params); params != "" {
					qs, ok := strings.CutPrefix(params, "q=")
					f, err := strconv.ParseFloat(strings.TrimSpace(qs), 64)
					if !ok || err != nil || f < 0 || f > 1 {
						continue
					}
					q = f
				}
				if value != "" && q > bestQ && (value == "*" || value == offer) {
					best, bestQ = offer, q
				}
			}
		}
	}
	return best == "gzip" && bestQ > 0
}

// serveProbe checks one provider entry, or one target of it: the
// multi-target pattern, for sharding and per-provider scrape intervals.
func (x *exporter) serveProbe(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	req, err := x.request(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	req.Name, req.Target = q.Get("name"), q.Get("target")
	if req.Name == "" {
		http.Error(w, "name parameter is missing", http.StatusBadRequest)
		return
	}
	debug := q.Get("debug") == "true"
	shape := answerShape(r)
	if !debug { // a person reads the debug answer, not a scraper with a deadline
		req.Reserve = x.answers.reserve(shape)
	}
	// An unknown name or target is the only error Run returns. A debug
	// probe is no live check of its own: it joins the target's check in
	// flight or reuses one within min_interval like any scrape, and shows
	// the log of the check that made its verdict.
	results, err := x.engine.Run(r.Context(), req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if !debug {
		x.answer(w, r, results, nil, shape)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintln(w, "Logs for the check:")
	for _, p := range results {
		for _, t := range p.Targets {
			log := t.Log.String()
			if log == "" {
				fmt.Fprintf(w, "(no log for %s/%s/%s: %s)\n", p.Kind, p.Name, t.Target.Name, describeMode(t.Mode))
				continue
			}
			fmt.Fprint(w, log)
		}
	}
	fmt.Fprintln(w)
	for _, p := range results {
		for _, t := range p.Targets {
			fmt.Fprintf(w, "Verdict for %s/%s/%s: %s (up=%v ready=%v) in %ss: %s\n",
				p.Kind, p.Name, t.Target.Name, t.Reason, t.Reason.Up(), t.Reason.Ready(), trimFloat(t.Duration.Seconds()), t.Message)
		}
	}
	fmt.Fprintln(w, "\nMetrics that would have been returned:")
	exp, err := collector.NewExposition(results)
	if err != nil {
		fmt.Fprintf(w, "error gathering metrics: %v\n", err)
	}
	if err := exp.Write(w, expfmt.NewFormat(expfmt.TypeTextPlain), nil, nil); err != nil {
		fmt.Fprintf(w, "error encoding metrics: %v\n", err)
	}
}

// describeMode says why a debug probe has no log to show.
func describeMode(mode string) string {
	switch mode {
	case collector.ModeCached:
		return "a cached verdict whose check left no log"
	case collector.ModeBackoff:
		return "the last verdict, served while the target's failing dials back off"
	}
	return "the check did not answer within the budget"
}

// statusTarget is one target in /api/v1/status, in the shape
// docs/configuration.md: "HTTP endpoints" documents.
type statusTarget struct {
	Target             string             `json:"target"`
	Address            string             `json:"address"`
	Checked            bool               `json:"checked"`
	Up                 bool               `json:"up"`
	Ready              bool               `json:"ready"`
	Reason             collector.Reason   `json:"reason"`
	Message            string             `json:"message"`
	LastTransitionTime *time.Time         `json:"lastTransitionTime"`
	LastCheckTime      *time.Time         `json:"lastCheckTime"`
	DurationSeconds    float64            `json:"durationSeconds"`
	Details            map[string]string  `json:"details,omitempty"`
	Transitions        []statusTransition `json:"transitions"`
	// BackoffUntil is set while a KVM host whose dials keep failing is
	// not redialed; scrapes serve its last verdict until then.
	BackoffUntil *time.Time `json:"backoffUntil,omitempty"`
}

// statusTransition is one change of a target's reason.
type statusTransition struct {
	Time time.Time        `json:"time"`
	From collector.Reason `json:"from"` // "" for the first verdict
	To   collector.Reason `json:"to"`
}

// statusProvider is one provider entry in /api/v1/status.
type statusProvider struct {
	Provider string         `json:"provider"`
	Name     string         `json:"name"`
	Ready    bool           `json:"ready"` // every target ready
	Targets  []statusTarget `json:"targets"`
}

// status shapes the last verdicts for people and scripts. It checks
// nothing unless refresh is set; then it runs the checks as a scrape
// does (shared, min_interval applied, under the providers' own timeouts).
func (x *exporter) status(ctx context.Context, name string, refresh bool) ([]statusProvider, error) {
	if refresh {
		if _, err := x.engine.Run(ctx, collector.Request{Name: name, Offset: x.offset}); err != nil {
			return nil, err
		}
	}
	results, err := x.engine.Status(name)
	if err != nil {
		return nil, err
	}
	out := make([]statusProvider, 0, len(results))
	for _, p := range results {
		sp := statusProvider{Provider: p.Kind, Name: p.Name, Ready: len(p.Targets) > 0, Targets: []statusTarget{}}
		for _, t := range p.Targets {
			sp.Ready = sp.Ready && t.Reason.Ready()
			st := statusTarget{
				Target:      t.Target.Name,
				Address:     t.Target.Address,
				Checked:     t.Checked,
				Up:          t.Reason.Up(),
				Ready:       t.Reason.Ready(),
				Reason:      t.Reason,
				Message:     t.Message,
				Transitions: []statusTransition{},
			}
			if t.Checked {
				st.LastTransitionTime, st.LastCheckTime = utc(t.LastTransition), utc(t.CheckedAt)
				st.DurationSeconds = t.Duration.Seconds()
				st.BackoffUntil = utc(t.BackoffUntil)
			}
			if t.Facts != nil {
				st.Details = t.Facts.Details()
			}
			for _, tr := range t.Transitions {
				st.Transitions = append(st.Transitions, statusTransition{Time: tr.Time.UTC(), From: tr.From, To: tr.To})
			}
			sp.Targets = append(sp.Targets, st)
		}
		out = append(out, sp)
	}
	return out, nil
}

func utc(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

func (x *exporter) serveStatusJSON(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	st, err := x.status(r.Context(), q.Get("name"), q.Get("refresh") == "true")
	var lerr *collector.LookupError
	if errors.As(err, &lerr) {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(map[string]any{"providers": st}); err != nil {
		x.logger.Debug("writing status", "err", err)
	}
}

// serveConfig shows the configuration in force. It holds file paths, never
// secret values: secrets live only in the files it references.
func (x *exporter) serveConfig(w http.ResponseWriter, _ *http.Request) {
	cfg := x.config()
	if cfg == nil {
		http.Error(w, "no configuration loaded", http.StatusServiceUnavailable)
		return
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintf(w, "# %s (secrets are referenced by path; their contents are never shown)\n", x.configFile)
	_, _ = w.Write(out)
}

func (x *exporter) serveReload(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "this endpoint requires a POST request", http.StatusMethodNotAllowed)
		return
	}
	if err := x.reload(); err != nil {
		x.logger.Error("error reloading config", "err", err)
		http.Error(w, fmt.Sprintf("failed to reload config: %v", err), http.StatusInternalServerError)
		return
	}
	fmt.Fprintln(w, "config reloaded")
}

func trimFloat(f float64) string {
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.3f", f), "0"), ".")
}
