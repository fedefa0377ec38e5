package main

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/common/expfmt"

	"github.com/egress-proxies/provider_health_exporter/internal/engine"
	"github.com/egress-proxies/provider_health_exporter/internal/exposition"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

// serveProbe checks one provider entry, or one target of it: the
// multi-target pattern, for sharding and per-provider scrape intervals.
func (x *exporter) serveProbe(w http.ResponseWriter, r *http.Request) {
	begin := time.Now()
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
	// Written target by target to the connection: a debug probe of an
	// entry of 5,000 hosts holds one target's log at a time. Provider text
	// is escaped as the log escapes it: the answer is read in terminals.
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	out := x.stream(w, begin)
	fmt.Fprintln(out, "Logs for the check:")
	for _, p := range results {
		for _, t := range p.Targets {
			log := t.Log.String()
			if log == "" {
				fmt.Fprintf(out, "(no log for %s/%s/%s: %s)\n", provider.EscapeText(p.Kind), provider.EscapeText(p.Name), provider.EscapeText(t.Target.Name), describeMode(t.Mode))
				continue
			}
			// slog's text format has quoted and escaped every value already.
			fmt.Fprint(out, log)
		}
	}
	fmt.Fprintln(out)
	for _, p := range results {
		for _, t := range p.Targets {
			// The capacity and the constraint that binds it, as the status
			// page shows them: "capacity=17 (quota demo pods)".
			capacity := ""
			if t.Capacity.Known {
				capacity = " capacity=" + provider.EscapeText(t.Capacity.String())
			}
			fmt.Fprintf(out, "Verdict for %s/%s/%s: %s (up=%v ready=%v%s) in %ss: %s\n",
				provider.EscapeText(p.Kind), provider.EscapeText(p.Name), provider.EscapeText(t.Target.Name), provider.EscapeText(string(t.Reason)),
				p.Reasons.Up(t.Reason), t.Reason.Ready(), capacity, trimFloat(t.Duration.Seconds()), provider.EscapeText(t.Message))
			// Its failure domains, one line each, as the status page shows
			// them: "  domain zone-a: capacity=12 proxies=5 after_loss=-3".
			for _, d := range t.Domains {
				loss := ""
				if d.HasAfterLoss {
					loss = " after_loss=" + strconv.FormatInt(d.AfterLoss, 10)
				}
				fmt.Fprintf(out, "  domain %s: capacity=%d proxies=%d%s\n", provider.EscapeText(d.Name), d.Capacity, d.Proxies, loss)
			}
		}
	}
	fmt.Fprintln(out, "\nMetrics that would have been returned:")
	exp, err := engine.NewExposition(results)
	if err != nil {
		fmt.Fprintf(out, "error gathering metrics: %v\n", err)
	}
	if err := exp.Write(out, expfmt.NewFormat(expfmt.TypeTextPlain), nil, nil); err != nil {
		fmt.Fprintf(out, "error encoding metrics: %v\n", err)
	}
}

// describeMode says why a debug probe has no log to show.
func describeMode(mode string) string {
	switch mode {
	case exposition.ModeCached:
		return "a cached verdict whose check left no log"
	case exposition.ModeBackoff:
		return "the last verdict, served while the target's failing dials back off"
	}
	return "the check did not answer within the budget"
}
