package main

import (
	"cmp"
	"fmt"
	"html/template"
	"net/http"
	"time"

	"github.com/prometheus/common/version"
)

// The landing page is the on-call engineer's first stop: links, and every
// target's state with the reason and the message behind it.
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
}).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Provider Health Exporter</title>
{{/* An empty icon: otherwise browsers ask for /favicon.ico, a 404 and an error in their console. */ -}}
<link rel="icon" href="data:,">
<style>
body { font-family: sans-serif; margin: 1.5em; }
table { border-collapse: collapse; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; vertical-align: top; }
th { background: #f0f0f0; }
tr.ready td.state { background: #c8f0c8; }
tr.down td.state { background: #f6c4c4; }
tr.notready td.state { background: #fbe3a6; }
tr.unchecked td.state { background: #e4e4e4; }
td.transitions { font-size: 90%; white-space: nowrap; }
td.message { max-width: 40em; font-family: monospace; font-size: 90%; overflow-wrap: anywhere; }
</style>
</head>
<body>
<h1>Provider Health Exporter</h1>
<p>Can each provider host egress proxies right now, and if not, why not.</p>
<ul>
<li><a href="{{.Prefix}}{{.MetricsPath}}">Metrics</a> (every provider)</li>
<li><a href="{{.Prefix}}/api/v1/status">Status as JSON</a></li>
<li><a href="{{.Prefix}}/config">Configuration</a></li>
<li>Probe one provider: <code>{{.Prefix}}/probe?name=NAME[&amp;target=TARGET][&amp;debug=true]</code></li>
</ul>
<h2>Status</h2>
<p>The last verdict of each target, from the scrapes; loading this page checks nothing.</p>
<form method="get" action=""><input type="hidden" name="refresh" value="true"><button type="submit">Refresh (run the checks now)</button></form>
{{if .Error}}<p>Error: {{.Error}}</p>{{end}}
<table>
<tr><th>provider</th><th>name</th><th>target</th><th>ready</th><th>reason</th><th>message</th><th>since</th><th>last check</th><th>duration</th><th>recent transitions</th><th>probe</th></tr>
{{range $p := .Providers}}{{range $t := $p.Targets}}
<tr class="{{if not $t.Checked}}unchecked{{else if $t.Ready}}ready{{else if $t.Up}}notready{{else}}down{{end}}">
<td>{{$p.Provider}}</td><td>{{$p.Name}}</td><td title="{{$t.Address}}">{{$t.Target}}</td>
{{if $t.Checked}}<td class="state">{{if $t.Ready}}yes{{else}}no{{end}}</td>
<td class="state">{{$t.Reason}}</td>
<td class="message">{{$t.Message}}{{if $t.BackoffUntil}}<br><em>dials keep failing: not redialed before {{stamp $t.BackoffUntil}}</em>{{end}}</td>
<td title="{{stamp $t.LastTransitionTime}}">{{ago $t.LastTransitionTime}}</td>
<td title="{{stamp $t.LastCheckTime}}">{{ago $t.LastCheckTime}}</td>
<td>{{seconds $t.DurationSeconds}}s</td>
{{else}}<td class="state" colspan="6">never checked</td>{{end}}
<td class="transitions">{{range $tr := $t.Transitions}}<div title="{{$tr.Time.Format "2006-01-02T15:04:05Z07:00"}}">{{$tr.Time.Format "15:04:05"}} {{from $tr.From}} &rarr; {{$tr.To}}</div>{{end}}</td>
<td><a href="{{$.Prefix}}/probe?name={{$p.Name}}&amp;target={{$t.Target}}">metrics</a> <a href="{{$.Prefix}}/probe?name={{$p.Name}}&amp;target={{$t.Target}}&amp;debug=true">debug</a></td>
</tr>
{{end}}{{else}}<tr><td colspan="11">no providers configured</td></tr>{{end}}
</table>
<p><small>{{.Version}}</small></p>
</body>
</html>
`))

// serveLanding writes the page with links that start with the path of
// --web.external-url when it is set. Without it they are relative to the
// page, which is served at the route prefix's "/": they hold under
// --web.route-prefix alone and behind a proxy that strips a path alike.
func (x *exporter) serveLanding(w http.ResponseWriter, r *http.Request) {
	data := struct {
		Prefix      string
		MetricsPath string
		Providers   []statusProvider
		Error       string
		Version     string
	}{Prefix: cmp.Or(x.linkPrefix, "."), MetricsPath: x.metricsPath, Version: "provider_health_exporter " + version.Info()}
	st, err := x.status(r.Context(), "", r.URL.Query().Get("refresh") == "true")
	if err != nil {
		data.Error = err.Error()
	}
	data.Providers = st
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := landingTemplate.Execute(w, data); err != nil {
		x.logger.Debug("writing landing page", "err", err)
	}
}
