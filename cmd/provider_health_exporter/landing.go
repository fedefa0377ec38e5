package main

import (
	"cmp"
	_ "embed"
	"fmt"
	"html/template"
	"net/http"
	"time"

	"github.com/prometheus/common/version"
)

// landingHTML is the landing page: the on-call engineer's first stop, with
// links, a summary of the fleet and every target's state with the reason
// and the message behind it (statuspage.go shapes what it shows).
//
//go:embed landing.html
var landingHTML string

var landingTemplate = template.Must(template.New("landing").Funcs(template.FuncMap{
	"ago": func(t *time.Time) string {
		if t == nil {
			return "never"
		}
		return time.Since(*t).Round(time.Second).String() + " ago"
	},
	"stamp": func(t *time.Time) string {
		if t == nil {
			return ""
		}
		return t.Format(time.RFC3339)
	},
	"seconds": func(f float64) string { return template.HTMLEscapeString(trimFloat(f)) },
	"from": func(r any) string {
		if s := fmt.Sprint(r); s != "" {
			return s
		}
		return "never checked"
	},
	"num":    thousands,
	"filter": filterLink,
	"words":  breakable,
}).Parse(landingHTML))

// serveLanding writes the page with links that start with the path of
// --web.external-url when it is set. Without it they are relative to the
// page, which is served at the route prefix's "/": they hold under
// --web.route-prefix alone and behind a proxy that strips a path alike.
func (x *exporter) serveLanding(w http.ResponseWriter, r *http.Request) {
	begin := time.Now()
	q := r.URL.Query()
	// The filter is read before anything is checked: a refresh with a
	// filter that cannot match runs no check.
	known, err := x.engine.Status("")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	names := make([]string, 0, len(known))
	for _, p := range known {
		names = append(names, p.Name)
	}
	filter, err := parseFilter(q, x.kinds, names)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	data := struct {
		pageView
		Prefix      string
		MetricsPath string
		Error       string
		Version     string
	}{Prefix: cmp.Or(x.linkPrefix, "."), MetricsPath: x.metricsPath, Version: "provider_health_exporter " + version.Info()}
	st := known
	if q.Get("refresh") == "true" {
		if st, err = x.status(r.Context(), "", true); err != nil {
			data.Error = err.Error()
		}
	}
	data.pageView = buildPage(st, x.kinds, filter)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	// The template writes straight to the connection, row by row
	// (pageGroup.Rows): a page of a thousand 4 KiB messages is streamed,
	// not built (docs/security.md: "Strings, labels and pages").
	if err := landingTemplate.Execute(x.stream(w, begin), data); err != nil {
		x.logger.Debug("writing landing page", "err", err)
	}
}
