package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/egress-proxies/provider_health_exporter/internal/engine"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

// statusTarget is one target in /api/v1/status, in the shape
// docs/configuration.md: "HTTP endpoints" documents.
type statusTarget struct {
	Target  string          `json:"target"`
	Address string          `json:"address"`
	Checked bool            `json:"checked"`
	Up      bool            `json:"up"`
	Ready   bool            `json:"ready"`
	Reason  provider.Reason `json:"reason"`
	Message string          `json:"message"`
	// Capacity is how many more proxies fit, and CapacityBinding the
	// constraint that binds it; both absent when no capacity is known.
	Capacity        *int64 `json:"capacity,omitempty"`
	CapacityBinding string `json:"capacityBinding,omitempty"`
	// Domains are the capacity per failure domain, in the order the kind
	// found them; absent when the entry asks for none (docs/metrics.md:
	// "Capacity per failure domain").
	Domains            []statusDomain     `json:"domains,omitempty"`
	LastTransitionTime *time.Time         `json:"lastTransitionTime"`
	LastCheckTime      *time.Time         `json:"lastCheckTime"`
	DurationSeconds    float64            `json:"durationSeconds"`
	Details            map[string]string  `json:"details,omitempty"`
	Transitions        []statusTransition `json:"transitions"`
	// BackoffUntil is set while a target whose checks keep failing at a
	// cost to the others (a Backoffer's) is not checked; scrapes serve its
	// last verdict until then.
	BackoffUntil *time.Time `json:"backoffUntil,omitempty"`
}

// statusDomain is one failure domain of a target: how many more proxies
// fit in it alone, how many run there, and how many more would fit once it
// is lost and its proxies are created again elsewhere (absent where the
// kind cannot say: a KVM host's comes from the mixin's recording rule).
type statusDomain struct {
	Domain    string `json:"domain"`
	Capacity  int64  `json:"capacity"`
	Proxies   int64  `json:"proxies"`
	AfterLoss *int64 `json:"afterLoss,omitempty"`
}

// statusTransition is one change of a target's reason.
type statusTransition struct {
	Time time.Time       `json:"time"`
	From provider.Reason `json:"from"` // "" for the first verdict
	To   provider.Reason `json:"to"`
}

// statusEntry is one provider entry in /api/v1/status, less its targets:
// the answer is written entry by entry and target by target
// (writeStatusJSON), so a field added here or to statusTarget is all it
// takes to show it. The values a target's reason can take are listed once
// per kind, after the entries (statusReasons), not in every entry.
type statusEntry struct {
	Provider string `json:"provider"`
	Name     string `json:"name"`
	Ready    bool   `json:"ready"` // every target ready
}

// statusReasons are the reason sets of the kinds of results, by kind, each
// in its documented order: every value the reason of a target of that
// kind can take, while /metrics exports only each target's current one.
func statusReasons(results []engine.ProviderResult, kinds []provider.Kind) map[string][]provider.Reason {
	out := map[string][]provider.Reason{}
	for _, p := range results {
		if _, ok := out[p.Kind]; ok {
			continue
		}
		for _, k := range kinds {
			if k.Name() == p.Kind {
				out[p.Kind] = k.Reasons().Reasons()
			}
		}
	}
	return out
}

// statusProvider is one provider entry with its targets, the shape of
// the answer; clients (and the tests) decode it.
type statusProvider struct {
	statusEntry
	Targets []statusTarget `json:"targets"`
}

// status gives the last verdicts. It checks nothing unless refresh is
// set; then it runs the checks as a scrape does (shared, min_interval
// applied, under the providers' own timeouts). The results are the
// engine's snapshot: each page shapes one target at a time from it
// (newStatusTarget), so that no page holds a second copy of every
// message and detail.
func (x *exporter) status(ctx context.Context, name string, refresh bool) ([]engine.ProviderResult, error) {
	if refresh {
		if _, err := x.engine.Run(ctx, engine.Request{Name: name, Offset: x.offset}); err != nil {
			return nil, err
		}
	}
	return x.engine.Status(name)
}

// newStatusEntry is p's entry, without its targets.
func newStatusEntry(p engine.ProviderResult) statusEntry {
	e := statusEntry{Provider: p.Kind, Name: p.Name, Ready: len(p.Targets) > 0}
	for _, t := range p.Targets {
		e.Ready = e.Ready && t.Reason.Ready()
	}
	return e
}

// verdictOf is what the status page sorts and filters t of p by: its
// state and reason, without the message, details and times that
// newStatusTarget copies.
func verdictOf(p engine.ProviderResult, t engine.TargetResult) statusTarget {
	return statusTarget{Checked: t.Checked, Up: p.Reasons.Up(t.Reason), Ready: t.Reason.Ready(), Reason: t.Reason}
}

// newStatusTarget is t of p as /api/v1/status and the status page show it.
func newStatusTarget(p engine.ProviderResult, t engine.TargetResult) statusTarget {
	st := verdictOf(p, t)
	st.Target, st.Address, st.Message = t.Target.Name, t.Target.Address, t.Message
	st.Transitions = make([]statusTransition, 0, len(t.Transitions))
	if t.Capacity.Known {
		n := t.Capacity.Proxies
		st.Capacity, st.CapacityBinding = &n, t.Capacity.Binding
	}
	if len(t.Domains) > 0 {
		st.Domains = make([]statusDomain, len(t.Domains))
		for i, d := range t.Domains {
			st.Domains[i] = statusDomain{Domain: d.Name, Capacity: d.Capacity, Proxies: d.Proxies}
			if d.HasAfterLoss {
				st.Domains[i].AfterLoss = &d.AfterLoss
			}
		}
	}
	if t.Checked {
		st.LastTransitionTime, st.LastCheckTime = utc(t.LastTransition), utc(t.CheckedAt)
		st.DurationSeconds = t.Duration.Seconds()
		st.BackoffUntil = utc(t.BackoffUntil)
	}
	// Cut and bounded by the framework, whatever the kind sends.
	st.Details = engine.Details(t.Facts)
	for _, tr := range t.Transitions {
		st.Transitions = append(st.Transitions, statusTransition{Time: tr.Time.UTC(), From: tr.From, To: tr.To})
	}
	return st
}

func utc(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

// serveStatusJSON writes the answer target by target (writeStatusJSON)
// rather than encoding it whole: a thousand entries whose dry runs are
// refused with 4 KiB messages make an answer of 16 MB, which forty
// clients at once (--web.max-requests) would each have held in memory
// (docs/security.md: "Strings, labels and pages"). A script needs every
// target, so the answer is streamed, never cut.
func (x *exporter) serveStatusJSON(w http.ResponseWriter, r *http.Request) {
	begin := time.Now()
	q := r.URL.Query()
	st, err := x.status(r.Context(), q.Get("name"), q.Get("refresh") == "true")
	var lerr *engine.LookupError
	if errors.As(err, &lerr) {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if err := writeStatusJSON(x.stream(w, begin), st, x.kinds); err != nil {
		x.logger.Debug("writing status", "err", err)
	}
}

// writeStatusJSON writes {"providers": [...], "reasons": {...}} of
// results, the reason sets of their kinds (statusReasons) after them,
// indented, byte for byte what a json.Encoder with SetIndent("", "  ")
// writes of the whole answer, one entry head and one target at a time. It
// stops at the first failed write: a client gone, or past its write
// deadline.
func writeStatusJSON(w io.Writer, results []engine.ProviderResult, kinds []provider.Kind) error {
	const entryIndent, targetIndent = "    ", "        "
	out := &stickyWriter{w: w}
	reasons, err := json.MarshalIndent(statusReasons(results, kinds), "  ", "  ")
	if err != nil {
		return fmt.Errorf("encoding the reason sets: %w", err)
	}
	if len(results) == 0 {
		out.WriteString("{\n  \"providers\": [],\n  \"reasons\": ")
		out.Write(reasons)
		out.WriteString("\n}\n")
		return out.err
	}
	// One buffer and encoder for the whole answer: a target's encoding
	// is written and the buffer reused, so an answer of any size makes
	// next to no garbage.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	encode := func(v any, indent string) ([]byte, error) {
		buf.Reset()
		enc.SetIndent(indent, "  ")
		if err := enc.Encode(v); err != nil {
			return nil, err
		}
		return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
	}
	out.WriteString("{\n  \"providers\": [")
	for i, p := range results {
		head, err := encode(newStatusEntry(p), entryIndent)
		if err != nil {
			return fmt.Errorf("encoding entry %s: %w", p.Name, err)
		}
		// The head's closing brace gives way to the targets.
		head = bytes.TrimSuffix(head, []byte("\n"+entryIndent+"}"))
		out.WriteString(separator(i) + "\n" + entryIndent)
		out.Write(head)
		out.WriteString(",\n" + entryIndent + "  \"targets\": [")
		for j, t := range p.Targets {
			b, err := encode(newStatusTarget(p, t), targetIndent)
			if err != nil {
				return fmt.Errorf("encoding target %s/%s: %w", p.Name, t.Target.Name, err)
			}
			out.WriteString(separator(j) + "\n" + targetIndent)
			out.Write(b)
			if out.err != nil {
				return out.err
			}
		}
		if len(p.Targets) > 0 {
			out.WriteString("\n" + entryIndent + "  ")
		}
		out.WriteString("]\n" + entryIndent + "}")
	}
	out.WriteString("\n  ],\n  \"reasons\": ")
	out.Write(reasons)
	out.WriteString("\n}\n")
	return out.err
}

// separator is what comes before the i-th element of a JSON list.
func separator(i int) string {
	if i == 0 {
		return ""
	}
	return ","
}

// stickyWriter remembers the first failed write and writes nothing after
// it, so that a streaming answer checks for errors once per element.
type stickyWriter struct {
	w   io.Writer
	err error
}

func (s *stickyWriter) Write(b []byte) {
	if s.err == nil {
		_, s.err = s.w.Write(b)
	}
}

func (s *stickyWriter) WriteString(str string) {
	if s.err == nil {
		_, s.err = io.WriteString(s.w, str)
	}
}

// serveConfig shows the configuration in force. It holds file paths, never
// secret values: secrets live only in the files it references.
func (x *exporter) serveConfig(w http.ResponseWriter, _ *http.Request) {
	begin := time.Now()
	x.cfgMu.RLock()
	text := x.cfgText
	x.cfgMu.RUnlock()
	if text == nil {
		http.Error(w, "no configuration loaded", http.StatusServiceUnavailable)
		return
	}
	out, err := text.render()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	// The bytes are the load's, shared by every request (configtext.go);
	// written in pieces, so that a client that keeps reading a large
	// file's text keeps its write deadline moving (streamWriter).
	sw := x.stream(w, begin)
	fmt.Fprintf(sw, "# %s (secrets are referenced by path; their contents are never shown)\n", x.configFile)
	for len(out) > 0 {
		n := min(len(out), 64<<10)
		if _, err := sw.Write(out[:n]); err != nil {
			x.logger.Debug("writing config", "err", err)
			return
		}
		out = out[n:]
	}
}

func (x *exporter) serveReload(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "this endpoint requires a POST request", http.StatusMethodNotAllowed)
		return
	}
	err := x.reload()
	// A reload of a large file may take longer than the write deadline
	// set when the request arrived: the answer still gets writeGrace.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(writeGrace))
	if err != nil {
		x.logger.Error("error reloading config", "err", err)
		http.Error(w, fmt.Sprintf("failed to reload config: %v", err), http.StatusInternalServerError)
		return
	}
	fmt.Fprintln(w, "config reloaded")
}

func trimFloat(f float64) string {
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.3f", f), "0"), ".")
}
