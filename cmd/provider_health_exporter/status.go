package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/egress-proxies/provider_health_exporter/collector"
)

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
	// BackoffUntil is set while a target whose checks keep failing at a
	// cost to the others (a Backoffer's) is not checked; scrapes serve its
	// last verdict until then.
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

	// Reasons is the entry's reason set, in its documented order: every
	// value its targets' reason can take, while /metrics exports only each
	// target's current one.
	Reasons []collector.Reason `json:"reasons"`
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
		sp := statusProvider{Provider: p.Kind, Name: p.Name, Ready: len(p.Targets) > 0, Targets: []statusTarget{}, Reasons: p.Reasons.Reasons()}
		for _, t := range p.Targets {
			sp.Ready = sp.Ready && t.Reason.Ready()
			st := statusTarget{
				Target:      t.Target.Name,
				Address:     t.Target.Address,
				Checked:     t.Checked,
				Up:          p.Reasons.Up(t.Reason),
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
			// Cut and bounded by the framework, whatever the kind sends.
			st.Details = collector.Details(t.Facts)
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
	fmt.Fprintf(w, "# %s (secrets are referenced by path; their contents are never shown)\n", x.configFile)
	_, _ = w.Write(out)
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
