//go:build promtool

// These tests run promtool (Debian's prometheus package): make mixin-lint
// and make mixin-test run them with -tags promtool, so that make unit needs
// no package from apt.

// Package mixin_test checks the generated mixin files: every PromQL
// expression of the alerts and dashboards parses (through promtool) and names
// only metrics of docs/metrics.md's "Metrics" and their labels, every dashboard is well formed,
// every alert carries its severity, annotations, runbook section and promtool
// test cases, and those test cases fail when a rule is broken.
package mixin_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// specMetrics are the exporter's metrics with their labels, read from the
// golden /metrics output that cmd's TestGoldenMetrics pins, so this list
// cannot drift from what the exporter serves. job and instance are added by
// Prometheus to every series.
var specMetrics = goldenMetrics()

// unstableMetrics are left out of the golden file because their values
// change from run to run; up is the series Prometheus writes per scrape.
var unstableMetrics = map[string][]string{
	"up":                                     nil,
	"provider_health_check_duration_seconds": {"provider", "name", "target"},
	"provider_health_last_check_timestamp_seconds":                          {"provider", "name", "target"},
	"provider_health_last_transition_timestamp_seconds":                     {"provider", "name", "target"},
	"provider_health_exporter_config_last_reload_success_timestamp_seconds": nil,
	"provider_health_exporter_build_info":                                   {"version", "revision", "branch", "goversion", "goos", "goarch", "tags"},
}

// headroomMetrics are exported only for entries that set a headroom key
// (docs/configuration.md: min_quota_headroom, min_free_memory), which the
// golden file's configuration leaves unset so that it shows a setup without
// them unchanged; their labels are those of docs/metrics.md's "Metrics".
var headroomMetrics = map[string][]string{
	"provider_health_gcp_quota_limit":            {"name", "region", "metric"},
	"provider_health_gcp_quota_usage":            {"name", "region", "metric"},
	"provider_health_kubernetes_quota_hard":      {"name", "namespace", "quota", "resource"},
	"provider_health_kubernetes_quota_used":      {"name", "namespace", "quota", "resource"},
	"provider_health_kvm_host_free_memory_bytes": {"name", "target"},
	// How many more proxies fit: only where a headroom key says what one
	// proxy needs (docs/metrics.md: "Capacity").
	"provider_health_capacity": {"provider", "name", "target"},
}

// domainMetrics are exported only for entries with failure domains
// (docs/configuration.md: capacity_domain, a GCP entry's regions, a KVM
// host's domain), which the golden file's configuration does not set; their
// labels are those of docs/metrics.md's "Metrics". The after-loss of a KVM
// entry is the recording rule's (rules/rules.libsonnet), without target.
var domainMetrics = map[string][]string{
	"provider_health_domain_capacity":     {"provider", "name", "target", "domain"},
	"provider_health_domain_proxies":      {"provider", "name", "target", "domain"},
	"provider_health_capacity_after_loss": {"provider", "name", "target", "domain"},
}

var goldenSeriesRE = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? `)
var goldenLabelRE = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="(?:[^"\\]|\\.)*"`)

func goldenMetrics() map[string][]string {
	b, err := os.ReadFile(filepath.Join("..", "testdata", "golden", "metrics.txt"))
	if err != nil {
		panic(fmt.Sprintf("reading the golden metrics: %v", err))
	}
	out := map[string][]string{}
	for k, v := range unstableMetrics {
		out[k] = v
	}
	for k, v := range headroomMetrics {
		out[k] = v
	}
	for k, v := range domainMetrics {
		out[k] = v
	}
	for _, line := range strings.Split(string(b), "\n") {
		m := goldenSeriesRE.FindStringSubmatch(line)
		if m == nil || strings.HasPrefix(line, "#") {
			continue
		}
		labels := out[m[1]]
		for _, l := range goldenLabelRE.FindAllStringSubmatch(m[2], -1) {
			if !slices.Contains(labels, l[1]) {
				labels = append(labels, l[1])
			}
		}
		out[m[1]] = labels
	}
	return out
}

// TestGoldenMetricsRead guards the parser: the golden file must yield the
// shared and the kvm families with their labels.
func TestGoldenMetricsRead(t *testing.T) {
	for name, want := range map[string][]string{
		"provider_health_reason":                {"provider", "name", "target", "reason"},
		"provider_health_kvm_host_info":         {"name", "target", "user", "libvirt_version"},
		"provider_health_exporter_checks_total": {"provider", "name", "mode"},
	} {
		got := slices.Clone(specMetrics[name])
		slices.Sort(got)
		w := slices.Clone(want)
		slices.Sort(w)
		if !slices.Equal(got, w) {
			t.Errorf("%s: labels %v from the golden file, want %v", name, got, w)
		}
	}
	if len(specMetrics) < 18 {
		t.Errorf("%d metrics from the golden file and the unstable list, want at least 18", len(specMetrics))
	}
}

// specAlerts are the alert names docs/alerts.md's "Monitoring mixin: alerts and dashboard" fixes.
var specAlerts = []string{
	"ProviderHealthExporterDown",
	"ProviderNotReady",
	"ProviderUnavailable",
	"ProviderCheckNearTimeout",
	"KVMPoolLowSpace",
	"ProviderHealthConfigReloadFailed",
	"ProviderQuotaNearLimit",
	"KVMPoolFillingUp",
	"ProviderCapacityNotDomainResilient",
}

const runbookURLPrefix = "https://github.com/egress-proxies/provider_health_exporter/blob/main/mixin/runbook.md#"

type rule struct {
	Alert       string            `yaml:"alert,omitempty"`
	Record      string            `yaml:"record,omitempty"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for,omitempty"`
	Labels      map[string]string `yaml:"labels,omitempty"`
	Annotations map[string]string `yaml:"annotations,omitempty"`
}

type ruleGroup struct {
	Name  string `yaml:"name"`
	Rules []rule `yaml:"rules"`
}

type ruleFile struct {
	Groups []ruleGroup `yaml:"groups"`
}

func loadAlerts(t *testing.T) ruleFile {
	t.Helper()
	return loadRules(t, "alerts.yaml")
}

// multiClusterRules are the alerts rendered with showMultiCluster, which
// tests/multicluster/alerts_test.yaml tests.
const multiClusterRules = "tests/multicluster/alerts.yaml"

func loadRules(t *testing.T, path string) ruleFile {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.Unmarshal(b, &rf); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(rf.Groups) == 0 {
		t.Fatalf("%s has no rule group", path)
	}
	return rf
}

func (rf ruleFile) alerts() []rule {
	var out []rule
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out = append(out, r)
			}
		}
	}
	return out
}

func (rf ruleFile) records() []rule {
	var out []rule
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				out = append(out, r)
			}
		}
	}
	return out
}

type target struct {
	RefID      string         `json:"refId"`
	Expr       string         `json:"expr"`
	Datasource map[string]any `json:"datasource"`
}

type gridPos struct{ X, Y, W, H int }

type panel struct {
	ID         int            `json:"id"`
	Type       string         `json:"type"`
	Title      string         `json:"title"`
	Datasource map[string]any `json:"datasource"`
	Targets    []target       `json:"targets"`
	GridPos    *gridPos       `json:"gridPos"`
	Panels     []panel        `json:"panels"`
}

type variable struct {
	Name       string         `json:"name"`
	Type       string         `json:"type"`
	Query      any            `json:"query"`
	Datasource map[string]any `json:"datasource"`
}

type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

func loadDashboards(t *testing.T) map[string]dashboard {
	t.Helper()
	files, err := filepath.Glob("dashboards_out/*.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no dashboard in dashboards_out/")
	}
	out := map[string]dashboard{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d dashboard
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out[f] = d
	}
	return out
}

// flatten returns every panel, rows' nested panels included.
func flatten(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, flatten(p.Panels)...)
	}
	return out
}

// query is one PromQL expression and where it came from.
type query struct {
	where string
	expr  string
}

var labelValuesRE = regexp.MustCompile(`^\s*(?:label_values|query_result)\((.*)\)\s*$`)

// variableQuery returns the PromQL part of a query variable's definition:
// the selector of label_values(selector, label), the expression of
// query_result(expr); "" for label_values(label).
func variableQuery(v variable) (string, error) {
	var q string
	switch x := v.Query.(type) {
	case string:
		q = x
	case map[string]any:
		q, _ = x["query"].(string)
	}
	m := labelValuesRE.FindStringSubmatch(q)
	if m == nil {
		return "", fmt.Errorf("variable %s: query %q is neither label_values() nor query_result()", v.Name, q)
	}
	inner := m[1]
	if strings.HasPrefix(strings.TrimSpace(q), "label_values") {
		i := strings.LastIndex(inner, ",")
		if i < 0 {
			return "", nil
		}
		inner = inner[:i]
	}
	return strings.TrimSpace(inner), nil
}

func dashboardQueries(t *testing.T, file string, d dashboard) []query {
	t.Helper()
	var out []query
	for _, p := range flatten(d.Panels) {
		for _, tg := range p.Targets {
			out = append(out, query{fmt.Sprintf("%s panel %d %q target %s", file, p.ID, p.Title, tg.RefID), tg.Expr})
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, err := variableQuery(v)
		if err != nil {
			t.Errorf("%s: %v", file, err)
			continue
		}
		if q != "" {
			out = append(out, query{fmt.Sprintf("%s variable %s", file, v.Name), q})
		}
	}
	return out
}

var grafanaVarRE = regexp.MustCompile(`\$\{([A-Za-z0-9_]+)(?::[A-Za-z]+)?\}|\$([A-Za-z0-9_]+)|\[\[([A-Za-z0-9_]+)\]\]`)

// grafanaBuiltins are the global variables a dashboard may use, with a value
// of the right kind to stand in for them.
var grafanaBuiltins = map[string]string{
	"__rate_interval": "5m",
	"__interval":      "1m",
	"__range":         "6h",
	"__interval_ms":   "60000",
	"__range_s":       "21600",
	"__range_ms":      "21600000",
}

// substitute replaces Grafana variables: builtins by a duration or number,
// dashboard variables (which only ever stand inside label matchers) by a
// word. An unknown builtin is an error, so a new one gets a stand-in here.
func substitute(expr string) (string, error) {
	var err error
	out := grafanaVarRE.ReplaceAllStringFunc(expr, func(m string) string {
		sm := grafanaVarRE.FindStringSubmatch(m)
		name := sm[1] + sm[2] + sm[3]
		if strings.HasPrefix(name, "__") {
			v, ok := grafanaBuiltins[name]
			if !ok {
				err = fmt.Errorf("unknown Grafana variable $%s in %q", name, expr)
			}
			return v
		}
		return "value"
	})
	return out, err
}

var (
	stringRE    = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	bracesRE    = regexp.MustCompile(`\{[^{}]*\}`)
	bracketsRE  = regexp.MustCompile(`\[[^\[\]]*\]`)
	groupingRE  = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)`)
	numberRE    = regexp.MustCompile(`(^|[^A-Za-z0-9_:])(?:0x[0-9a-fA-F]+|[0-9][0-9.]*(?:[eE][+-]?[0-9]+)?[a-zA-Z]*)`)
	identRE     = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*(\s*\()?`)
	promqlWords = map[string]bool{
		"and": true, "or": true, "unless": true, "bool": true, "offset": true,
		"by": true, "without": true, "on": true, "ignoring": true,
		"group_left": true, "group_right": true, "inf": true, "nan": true,
		"atan2": true, "start": true, "end": true,
	}
)

// metricNames returns the metric names a PromQL expression selects. It is a
// tokenizer, not a parser (promtool parses): strings, label matchers, ranges
// and grouping label lists are cut out, numbers and durations dropped, and
// every identifier left that is neither a keyword nor called like a function
// is a metric name.
func metricNames(expr string) ([]string, error) {
	if strings.Contains(expr, "__name__") {
		return nil, fmt.Errorf("selects by __name__, which hides the metric name: %q", expr)
	}
	s := stringRE.ReplaceAllString(expr, `""`)
	s = bracesRE.ReplaceAllString(s, " ")
	s = bracketsRE.ReplaceAllString(s, " ")
	s = groupingRE.ReplaceAllString(s, " ")
	s = numberRE.ReplaceAllString(s, "$1 ")
	var out []string
	for _, m := range identRE.FindAllStringSubmatch(s, -1) {
		word := strings.TrimRight(m[0], " \t\n(")
		if m[1] != "" || promqlWords[strings.ToLower(word)] {
			continue
		}
		out = append(out, word)
	}
	return out, nil
}

func TestMetricNames(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`up{job="provider-health"} == 0 or absent(up{job="provider-health"})`, []string{"up", "up"}},
		{`sum by (provider, name, mode) (rate(provider_health_exporter_checks_total{job=~"value"}[5m]))`, []string{"provider_health_exporter_checks_total"}},
		{`a > on (job, instance) group_left () (0.8 * b) unless on(x) c{reason="Timeout"} == 1`, []string{"a", "b", "c"}},
		{`max by (name)(foo / bar) < 1e-3 and baz offset 5m`, []string{"foo", "bar", "baz"}},
		{`count(x == 1) or vector(0)`, []string{"x"}},
		{`time() - ts{a="b{c}"} * 1000`, []string{"ts"}},
		{`rate(x[5m:1m]) > bool 0x10`, []string{"x"}},
		{`label_replace(m, "dst", "$1", "src", "(.*)")`, []string{"m"}},
	} {
		got, err := metricNames(tc.expr)
		if err != nil {
			t.Errorf("%q: %v", tc.expr, err)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("metricNames(%q) = %q, want %q", tc.expr, got, tc.want)
		}
	}
	if _, err := metricNames(`{__name__=~"provider_health_.*"}`); err == nil {
		t.Error("a __name__ selector was accepted")
	}
}

// allQueries returns every alert and recording rule expression and every
// dashboard expression, Grafana variables substituted.
func allQueries(t *testing.T) []query {
	t.Helper()
	var qs []query
	for _, file := range []string{"alerts.yaml", multiClusterRules} {
		rf := loadRules(t, file)
		for _, r := range rf.alerts() {
			qs = append(qs, query{file + " alert " + r.Alert, r.Expr})
		}
		for i, r := range rf.records() {
			qs = append(qs, query{fmt.Sprintf("%s record %d %s", file, i, r.Record), r.Expr})
		}
	}
	for f, d := range loadDashboards(t) {
		for _, q := range dashboardQueries(t, f, d) {
			s, err := substitute(q.expr)
			if err != nil {
				t.Errorf("%s: %v", q.where, err)
			}
			qs = append(qs, query{q.where, s})
		}
	}
	sort.Slice(qs, func(i, j int) bool { return qs[i].where < qs[j].where })
	return qs
}

var selectorRE = regexp.MustCompile(`([A-Za-z_:][A-Za-z0-9_:]*)\s*\{([^{}]*)\}`)
var matcherNameRE = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)`)

// targetLabels are put on every series by Prometheus's scrape configs, not
// by the exporter: job and instance, and the probe targets' exporter label
// of config.libsonnet's probeLabel.
var targetLabels = []string{"job", "instance", "exporter"}

// matcherProblems reports label matchers naming a label the metric does not
// have: such a selector silently matches nothing (provider=~"kvm" on a
// KVM-only metric, which has no provider label).
func matcherProblems(expr string) []string {
	var out []string
	s := stringRE.ReplaceAllString(expr, `""`)
	for _, m := range selectorRE.FindAllStringSubmatch(s, -1) {
		labels, ok := specMetrics[m[1]]
		if !ok {
			continue
		}
		for _, lm := range matcherNameRE.FindAllStringSubmatch(m[2], -1) {
			if l := lm[1]; !slices.Contains(targetLabels, l) && !slices.Contains(labels, l) {
				out = append(out, fmt.Sprintf("%s has no label %q", m[1], l))
			}
		}
	}
	return out
}

func TestMatcherProblems(t *testing.T) {
	if p := matcherProblems(`provider_health_kvm_pool_capacity_bytes{job="j", name=~"x", provider="kvm"} / up{instance="a"}`); len(p) != 1 || !strings.Contains(p[0], `"provider"`) {
		t.Errorf("want one problem about provider, got %q", p)
	}
	if p := matcherProblems(`provider_health_reason{reason!="a{b}", target=~"x"}`); len(p) != 0 {
		t.Errorf("want no problem, got %q", p)
	}
}

// TestExpressionsNameSpecMetrics: every expression selects at least one
// metric, only metrics of docs/metrics.md's "Metrics", and matches only labels they have.
func TestExpressionsNameSpecMetrics(t *testing.T) {
	qs := allQueries(t)
	if len(qs) < 10 {
		t.Fatalf("only %d expressions found; the loaders are broken", len(qs))
	}
	for _, q := range qs {
		names, err := metricNames(q.expr)
		if err != nil {
			t.Errorf("%s: %v", q.where, err)
			continue
		}
		if len(names) == 0 {
			t.Errorf("%s: no metric in %q", q.where, q.expr)
		}
		for _, p := range matcherProblems(q.expr) {
			t.Errorf("%s: %s (in %q)", q.where, p, q.expr)
		}
		for _, n := range names {
			if _, ok := specMetrics[n]; !ok {
				t.Errorf("%s: %q is not a metric of docs/metrics.md, section Metrics (in %q)", q.where, n, q.expr)
			}
		}
	}
}

// promtool returns the promtool binary. A missing promtool fails the test:
// a skipped expression check would let a broken rule through unnoticed.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool is required (Debian package prometheus; .ci/run installs it): %v", err)
	}
	return p
}

// TestExpressionsParse writes every expression into a throwaway rule file as
// a recording rule and has promtool check it.
func TestExpressionsParse(t *testing.T) {
	pt := promtool(t)
	qs := allQueries(t)
	rf := ruleFile{Groups: []ruleGroup{{Name: "mixin-expressions"}}}
	var index strings.Builder
	for i, q := range qs {
		name := fmt.Sprintf("mixin:expr_%d", i)
		rf.Groups[0].Rules = append(rf.Groups[0].Rules, rule{Record: name, Expr: q.expr})
		fmt.Fprintf(&index, "%s = %s:\n\t%s\n", name, q.where, q.expr)
	}
	path := filepath.Join(t.TempDir(), "expressions.yaml")
	writeYAML(t, path, rf)
	out, err := exec.Command(pt, "check", "rules", path).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s\nexpressions:\n%s", err, out, index.String())
	}
	if !strings.Contains(string(out), fmt.Sprintf("SUCCESS: %d rules found", len(qs))) {
		t.Fatalf("promtool did not check all %d expressions:\n%s", len(qs), out)
	}
}

func writeYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func overlap(a, b gridPos) bool {
	return a.X < b.X+b.W && b.X < a.X+a.W && a.Y < b.Y+b.H && b.Y < a.Y+a.H
}

// TestDashboardStructure checks what Grafana does not: unique panel ids,
// panels inside the 24-column grid and not overlapping, a data source and a
// query on every panel, and the variables docs/alerts.md: "Import the dashboard into Grafana" documents.
func TestDashboardStructure(t *testing.T) {
	uids := map[string]string{}
	for f, d := range loadDashboards(t) {
		if other, ok := uids[d.UID]; ok {
			t.Errorf("%s: uid %q already used by %s", f, d.UID, other)
		}
		uids[d.UID] = f
		for _, p := range dashboardProblems(f, d) {
			t.Error(p)
		}
	}
}

// TestDashboardReasonPanelsTested requires the expressions of the panels
// over provider_health_reason, as Grafana sends them with job
// provider-health and every provider and name selected, to be the ones
// tests/reasons.yaml evaluates over series as the exporter sends them.
func TestDashboardReasonPanelsTested(t *testing.T) {
	checkPanelsTested(t, "reasons.yaml", []string{"Reason per target", "Targets per reason"}, 2)
}

// TestDashboardDomainPanelsTested: the same for the panels per failure
// domain, which tests/domains.yaml evaluates over the exporter's series and
// the recording rule's.
func TestDashboardDomainPanelsTested(t *testing.T) {
	checkPanelsTested(t, "domains.yaml", []string{"Capacity per domain", "Survives losing a domain"}, 3)
}

// checkPanelsTested requires every query of the panels titled titles (want
// in all) to be a promql_expr_test of tests/file, with the dashboard's
// variables as Grafana sends them with every instance, provider and name
// selected.
func checkPanelsTested(t *testing.T, file string, titles []string, want int) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("tests", file))
	if err != nil {
		t.Fatal(err)
	}
	var rt struct {
		Tests []struct {
			PromQLExprTest []struct {
				Expr string `yaml:"expr"`
			} `yaml:"promql_expr_test"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal(b, &rt); err != nil {
		t.Fatal(err)
	}
	tested := map[string]bool{}
	for _, tc := range rt.Tests {
		for _, e := range tc.PromQLExprTest {
			tested[e.Expr] = true
		}
	}
	vars := strings.NewReplacer(`"$job"`, `"provider-health"`, `"$instance"`, `".*"`, `"$provider"`, `".*"`, `"$name"`, `".*"`)
	for f, d := range loadDashboards(t) {
		n := 0
		for _, p := range flatten(d.Panels) {
			if !slices.Contains(titles, p.Title) {
				continue
			}
			for _, tg := range p.Targets {
				n++
				if expr := vars.Replace(tg.Expr); !tested[expr] {
					t.Errorf("%s panel %q: %s is not tested in tests/%s", f, p.Title, expr, file)
				}
			}
		}
		if n != want {
			t.Errorf("%s: %d queries of the panels %q, want %d", f, n, titles, want)
		}
	}
}

// TestDashboardProblemsDetected feeds the structural check a broken
// dashboard, so that a check that cannot fail does not pass unnoticed.
func TestDashboardProblemsDetected(t *testing.T) {
	var d dashboard
	err := json.Unmarshal([]byte(`{
	  "uid": "", "title": "broken",
	  "templating": {"list": [{"name": "datasource", "type": "datasource", "query": "prometheus"},
	                          {"name": "job", "type": "query", "datasource": {"uid": "other"}}]},
	  "panels": [
	    {"id": 1, "title": "a", "type": "stat", "datasource": {"uid": "${datasource}"},
	     "gridPos": {"x": 0, "y": 0, "w": 12, "h": 8}, "targets": [{"refId": "A", "expr": "up"}]},
	    {"id": 1, "title": "b", "type": "stat", "datasource": {"uid": "${datasource}"},
	     "gridPos": {"x": 6, "y": 4, "w": 12, "h": 8}, "targets": [{"refId": "A", "expr": "up"}]},
	    {"id": 3, "title": "c", "type": "stat",
	     "gridPos": {"x": 0, "y": 20, "w": 6, "h": 8}, "targets": [{"refId": "A", "expr": ""}]},
	    {"id": 4, "title": "d", "type": "stat", "datasource": {"uid": "${datasource}"},
	     "gridPos": {"x": 20, "y": 30, "w": 6, "h": 8}},
	    {"id": 5, "title": "e", "type": "stat", "datasource": {"uid": "${datasource}"},
	     "gridPos": {"x": 0, "y": 40, "w": 6, "h": 8}, "targets": [{"refId": "A", "expr": "up"}, {"refId": "A", "expr": "up"}]},
	    {"id": 6, "title": "f", "type": "stat", "datasource": {"uid": "${datasource}"},
	     "gridPos": {"x": 0, "y": 50, "w": 6, "h": 8}, "targets": [{"refId": "A", "expr": "sum(up{instance=~\"$instance\"}) / count(up{job=\"j\"})"}]}
	  ]}`), &d)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(dashboardProblems("broken.json", d), "\n")
	for _, want := range []string{
		`uid "" must be set`,
		`variable "job" does not query the datasource variable`,
		`want a query variable "provider"`,
		`want a query variable "instance"`,
		`variables in the order ["datasource" "job"], want ["datasource" "job" "instance" "provider" "name"]`,
		`panel 1 "a" target A: selects 1 of its metrics ["up"] without instance=~"$instance"`,
		`panel 6 "f" target A: selects 1 of its metrics ["up" "up"] without instance=~"$instance"`,
		`want a query variable "name"`,
		`panel 1 "b": id also used by "a"`,
		`panel 1 "b": gridPos {X:6 Y:4 W:12 H:8} overlaps panel 1 "a"`,
		`panel 3 "c": datasource map[] is not the datasource variable`,
		`panel 3 "c" target A: empty expr`,
		`panel 4 "d": gridPos {X:20 Y:30 W:6 H:8} is not inside the 24-column grid`,
		`panel 5 "e" target "A": refId missing or repeated`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("problem not reported: %s", want)
		}
	}
	if t.Failed() {
		t.Logf("reported:\n%s", got)
	}
}

func dashboardProblems(f string, d dashboard) []string {
	var out []string
	bad := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	if d.UID == "" || len(d.UID) > 40 {
		bad("%s: uid %q must be set and at most 40 characters", f, d.UID)
	}
	if d.Title == "" {
		bad("%s: no title", f)
	}

	vars := map[string]variable{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v
	}
	if v, ok := vars["datasource"]; !ok || v.Type != "datasource" || v.Query != "prometheus" {
		bad("%s: want a datasource variable of type datasource for prometheus, got %+v", f, v)
	}
	// The variables chain in this order, each one's values selected by
	// those before it.
	var order []string
	for _, v := range d.Templating.List {
		if slices.Contains([]string{"datasource", "job", "instance", "provider", "name"}, v.Name) {
			order = append(order, v.Name)
		}
	}
	if want := []string{"datasource", "job", "instance", "provider", "name"}; !slices.Equal(order, want) {
		bad("%s: variables in the order %q, want %q", f, order, want)
	}
	for _, name := range []string{"provider", "name"} {
		if q, err := variableQuery(vars[name]); err == nil && !strings.Contains(q, instanceMatcher) {
			bad("%s: variable %q does not take the instance variable: %s", f, name, q)
		}
	}
	for _, name := range []string{"job", "instance", "provider", "name"} {
		v, ok := vars[name]
		if !ok || v.Type != "query" {
			bad("%s: want a query variable %q, got %+v", f, name, v)
			continue
		}
		if v.Datasource["uid"] != "${datasource}" {
			bad("%s: variable %q does not query the datasource variable: %v", f, name, v.Datasource)
		}
	}

	ids := map[int]string{}
	var placed []panel
	for _, p := range flatten(d.Panels) {
		where := fmt.Sprintf("%s panel %d %q", f, p.ID, p.Title)
		if p.ID <= 0 {
			bad("%s: no id", where)
		}
		if other, ok := ids[p.ID]; ok {
			bad("%s: id also used by %q", where, other)
		}
		ids[p.ID] = p.Title
		if p.Title == "" {
			bad("%s: no title", where)
		}
		gp := p.GridPos
		if gp == nil || gp.W <= 0 || gp.H <= 0 || gp.X < 0 || gp.Y < 0 || gp.X+gp.W > 24 {
			if gp == nil {
				bad("%s: no gridPos", where)
			} else {
				bad("%s: gridPos %+v is not inside the 24-column grid", where, *gp)
			}
			continue
		}
		for _, q := range placed {
			if overlap(*gp, *q.GridPos) {
				bad("%s: gridPos %+v overlaps panel %d %q at %+v", where, *gp, q.ID, q.Title, *q.GridPos)
			}
		}
		placed = append(placed, p)
		if p.Type == "row" {
			continue
		}
		if p.Datasource["uid"] != "${datasource}" {
			bad("%s: datasource %v is not the datasource variable", where, p.Datasource)
		}
		if len(p.Targets) == 0 {
			bad("%s: no query", where)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" {
				bad("%s target %s: empty expr", where, tg.RefID)
			}
			if tg.RefID == "" || refs[tg.RefID] {
				bad("%s target %q: refId missing or repeated", where, tg.RefID)
			}
			refs[tg.RefID] = true
			if p := instanceProblem(tg.Expr); p != "" {
				bad("%s target %s: %s", where, tg.RefID, p)
			}
			if tg.Datasource != nil && tg.Datasource["uid"] != "${datasource}" {
				bad("%s target %s: datasource %v is not the datasource variable", where, tg.RefID, tg.Datasource)
			}
		}
	}
	if len(placed) == 0 {
		bad("%s: no panel", f)
	}
	return out
}

// instanceMatcher is the dashboard's instance variable as every query
// matches it.
const instanceMatcher = `instance=~"$instance"`

// instanceProblem says which metric of expr is selected without the
// instance variable's matcher; "" when each is.
func instanceProblem(expr string) string {
	names, err := metricNames(expr)
	if err != nil {
		return err.Error()
	}
	matched := 0
	for _, m := range selectorRE.FindAllStringSubmatch(expr, -1) {
		if strings.Contains(m[2], instanceMatcher) {
			matched++
		}
	}
	if matched < len(names) {
		return fmt.Sprintf("selects %d of its metrics %q without %s", len(names)-matched, names, instanceMatcher)
	}
	return ""
}

var headingRE = regexp.MustCompile(`(?m)^(#{2,3}) (.+?)\s*$`)

// runbookSections maps each "## Alert" heading of runbook.md to the "###"
// headings under it.
func runbookSections(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile("runbook.md")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	var cur string
	for _, m := range headingRE.FindAllStringSubmatch(string(b), -1) {
		if m[1] == "##" {
			cur = m[2]
			out[cur] = nil
		} else if cur != "" {
			out[cur] = append(out[cur], m[2])
		}
	}
	return out
}

// TestAlerts: the alerts of docs/alerts.md: "Alerts" exist; every alert has a severity, a summary,
// a description and a runbook_url whose anchor is a runbook section with
// meaning, impact, diagnosis and mitigation; and promtool test cases both
// fire it and keep it quiet.
func TestAlerts(t *testing.T) {
	alerts := loadAlerts(t).alerts()
	byName := map[string]rule{}
	for _, r := range alerts {
		if _, dup := byName[r.Alert]; dup {
			t.Errorf("alert %s defined twice", r.Alert)
		}
		byName[r.Alert] = r
	}
	for _, name := range specAlerts {
		if _, ok := byName[name]; !ok {
			t.Errorf("alert %s of docs/alerts.md, section Alerts, is missing", name)
		}
	}
	sections := runbookSections(t)
	fired, quiet := ruleTestCoverage(t)
	for _, r := range alerts {
		switch r.Labels["severity"] {
		case "critical", "warning", "info":
		default:
			t.Errorf("%s: severity %q is not critical, warning or info", r.Alert, r.Labels["severity"])
		}
		for _, a := range []string{"summary", "description", "runbook_url"} {
			if strings.TrimSpace(r.Annotations[a]) == "" {
				t.Errorf("%s: annotation %s missing", r.Alert, a)
			}
		}
		if want := runbookURLPrefix + strings.ToLower(r.Alert); r.Annotations["runbook_url"] != want {
			t.Errorf("%s: runbook_url %q, want %q", r.Alert, r.Annotations["runbook_url"], want)
		}
		subs, ok := sections[r.Alert]
		if !ok {
			t.Errorf("%s: runbook.md has no section \"## %s\"", r.Alert, r.Alert)
		}
		for _, s := range []string{"Meaning", "Impact", "Diagnosis", "Mitigation"} {
			if ok && !slices.Contains(subs, s) {
				t.Errorf("%s: runbook section lacks \"### %s\"", r.Alert, s)
			}
		}
		if !fired[r.Alert] {
			t.Errorf("%s: no promtool test case expects it to fire", r.Alert)
		}
		if !quiet[r.Alert] {
			t.Errorf("%s: no promtool test case expects it to stay quiet", r.Alert)
		}
	}
	for s := range sections {
		if _, ok := byName[s]; !ok {
			t.Errorf("runbook.md has a section for %q, which is no alert", s)
		}
	}
}

type ruleTests struct {
	Tests []struct {
		AlertRuleTest []struct {
			Alertname string           `yaml:"alertname"`
			ExpAlerts []map[string]any `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

func ruleTestFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("tests/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no promtool test files in tests/: %v", err)
	}
	return files
}

func ruleTestCoverage(t *testing.T) (fired, quiet map[string]bool) {
	t.Helper()
	fired, quiet = map[string]bool{}, map[string]bool{}
	for _, f := range ruleTestFiles(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var rt ruleTests
		if err := yaml.Unmarshal(b, &rt); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, tc := range rt.Tests {
			for _, a := range tc.AlertRuleTest {
				if len(a.ExpAlerts) > 0 {
					fired[a.Alertname] = true
				} else {
					quiet[a.Alertname] = true
				}
			}
		}
	}
	return fired, quiet
}

// mutant is a deliberately broken rule the promtool tests must reject: an
// alert, or a recording rule (alert then names the record), whose breakage
// the tests of the alert that reads it (recordReaders) must see.
type mutant struct {
	alert  string
	what   string
	mutate func(r *rule) bool // reports whether it changed anything
}

// recordReaders names, for each recording rule, the alert that reads it.
var recordReaders = map[string]string{
	afterLoss: "ProviderCapacityNotDomainResilient",
}

// failingAlert is the alert whose tests must fail when m's rule is broken.
func (m mutant) failingAlert() string {
	if a, ok := recordReaders[m.alert]; ok {
		return a
	}
	return m.alert
}

func replaceIn(field *string, old, repl string) bool {
	if !strings.Contains(*field, old) {
		return false
	}
	*field = strings.Replace(*field, old, repl, 1)
	return true
}

func exprReplace(old, repl string) func(*rule) bool {
	return func(r *rule) bool { return replaceIn(&r.Expr, old, repl) }
}

// exprCut drops the expression from the first sep on: a term that guards
// against something goes missing.
func exprCut(sep string) func(*rule) bool {
	return func(r *rule) bool {
		i := strings.Index(r.Expr, sep)
		if i < 0 {
			return false
		}
		r.Expr = r.Expr[:i]
		return true
	}
}

func noFor(r *rule) bool {
	changed := r.For != "0s"
	r.For = "0s"
	return changed
}

var mutants = []mutant{
	{"ProviderHealthExporterDown", "fires at once", noFor},
	{"ProviderHealthExporterDown", "misses a job without targets", exprCut("\nor\n")},
	{"ProviderHealthExporterDown", "counts every probe target", exprReplace(`{job="provider-health", exporter=""}`, `{job="provider-health"}`)},
	{"ProviderHealthProbeFailed", "fires at once", noFor},
	{"ProviderHealthProbeFailed", "fires while the exporter itself is down", exprCut("\nunless")},
	{"ProviderHealthProbeFailed", "fires once per probe target", exprReplace("count by (job, exporter) (", "(")},
	{"ProviderHealthConfigReloadFailed", "fires at once", noFor},
	{"ProviderHealthConfigReloadFailed", "ignores the job", exprReplace(`job="provider-health", `, "")},
	{"ProviderNotReady", "fires at once", noFor},
	{"ProviderNotReady", "names a reason that is not current", func(r *rule) bool {
		d := r.Annotations["description"]
		ok := replaceIn(&d, `== 1"`, `== 0"`)
		r.Annotations["description"] = d
		return ok
	}},
	{"ProviderNotReady", "restarts its for when the reason changes", exprReplace(`provider_health_ready{job="provider-health"} == 0`,
		`(provider_health_ready{job="provider-health"} == 0) * on (job, instance, provider, name, target) group_left (reason) provider_health_reason{job="provider-health"}`)},
	{"ProviderActionRequired", "fires at once", noFor},
	{"ProviderActionRequired", "fires for a transient reason", exprReplace(`reason=~"`, `reason=~"Unreachable|`)},
	{"ProviderUnavailable", "fires at once", noFor},
	{"ProviderUnavailable", "ignores a target another replica sees ready", exprCut("unless")},
	{"ProviderCheckNearTimeout", "fires at once", noFor},
	{"ProviderCheckNearTimeout", "fires for checks that already timed out", exprCut("unless")},
	{"ProviderCheckNearTimeout", "joins replicas many-to-many", exprReplace("on (job, instance, provider, name) group_left", "on (provider, name) group_left")},
	{"ProviderCheckNearTimeout", "uses a lower threshold", exprReplace("(0.8 *", "(0.6 *")},
	{"KVMPoolLowSpace", "fires at once", noFor},
	{"KVMPoolLowSpace", "uses a higher threshold", exprReplace(") < 0.1", ") < 0.25")},
	{"KVMPoolFillingUp", "fires at once", noFor},
	{"KVMPoolFillingUp", "forecasts a pool that is already full", exprCut("\nand\n")},
	{"KVMPoolFillingUp", "looks a shorter horizon ahead", exprReplace("[6h], 86400)", "[6h], 3600)")},
	{"ProviderQuotaNearLimit", "fires at once", noFor},
	{"ProviderQuotaNearLimit", "uses a lower threshold", exprReplace(") > 0.9", ") > 0.8")},
	{"ProviderQuotaNearLimit", "fires at the threshold", exprReplace(") > 0.9", ") >= 0.9")},
	{"ProviderQuotaNearLimit", "ignores Kubernetes quotas", func(r *rule) bool {
		i, j := strings.Index(r.Expr, "\n  or\n"), strings.Index(r.Expr, "\n) >")
		if i < 0 || j < i {
			return false
		}
		r.Expr = r.Expr[:i] + r.Expr[j:]
		return true
	}},
	{"ProviderCapacityLow", "fires at once", noFor},
	{"ProviderCapacityLow", "fires at the threshold", exprReplace("} < 5", "} <= 5")},
	{"ProviderCapacityRunningOut", "fires at once", noFor},
	{"ProviderCapacityRunningOut", "forecasts a target already out of room", exprCut("\nand\n")},
	{"ProviderCapacityRunningOut", "looks a shorter horizon ahead", exprReplace("[6h], 86400)", "[6h], 3600)")},
	{"KVMConnectionFlapping", "fires at once", noFor},
	{"KVMConnectionFlapping", "counts an exporter restart", exprReplace("[1h]) > 6", "[1h]) > 0")},
	{"ProviderCapacityNotDomainResilient", "fires at once", noFor},
	{"ProviderCapacityNotDomainResilient", "fires when a loss leaves no room but strands no proxy", exprReplace("} > 0", "} >= 0")},
	{afterLoss, "counts a host of an HA pair twice", exprReplace("max by (job, provider, name, target, domain)", "sum by (job, provider, name, target, domain)")},
	{afterLoss, "sums each shard's hosts apart", exprReplace("sum by (job, provider, name) (max by (job, provider, name, target, domain)",
		"sum by (job, instance, provider, name) (max by (job, instance, provider, name, target, domain)")},
	{afterLoss, "leaves out the lost domain's proxies", exprReplace("\n  - on (job, provider, name, domain)\n    sum by (job, provider, name, domain) ("+kvmProxies+")", "")},
	{afterLoss, "counts an unknown room as none", exprReplace("    ("+kvmProxies+" unless on (job, provider, name, target, domain) "+kvmCapacity+")\n", "    vector(0)\n")},
	{afterLoss, "counts unknown proxies as none", exprReplace("    ("+kvmCapacity+" unless on (job, provider, name, target, domain) "+kvmProxies+")\n", "    vector(0)\n")},
}

// afterLoss is the recording rule of a KVM entry's capacity after losing a
// domain, and kvmCapacity and kvmProxies its per-host inputs as alerts.yaml
// writes them.
const (
	afterLoss   = "provider_health_capacity_after_loss"
	kvmCapacity = `max by (job, provider, name, target, domain) (provider_health_domain_capacity{job="provider-health", provider="kvm"})`
	kvmProxies  = `max by (job, provider, name, target, domain) (provider_health_domain_proxies{job="provider-health", provider="kvm"})`
)

// TestRuleTestsCatchBrokenRules breaks one rule at a time and requires the
// promtool tests to fail on that alert: a test case that cannot fail proves
// nothing.
func TestRuleTestsCatchBrokenRules(t *testing.T) {
	orig := loadAlerts(t)
	covered := map[string]bool{}
	for _, m := range mutants {
		covered[m.alert] = true
	}
	for _, r := range orig.alerts() {
		if !covered[r.Alert] {
			t.Errorf("%s: no mutant proves its tests can fail", r.Alert)
		}
	}
	for _, r := range orig.records() {
		if !covered[r.Record] {
			t.Errorf("recording rule %s: no mutant proves the tests of the alerts that read it can fail", r.Record)
		}
	}
	checkMutants(t, "alerts.yaml", orig, ruleTestFiles(t), mutants)
}

var (
	groupingClauseRE = regexp.MustCompile(`\b(?:by|on)\s*\(([^()]*)\)`)
	templateQueryRE  = regexp.MustCompile(`printf "[^"{]*\{([^}"]*)\}`)
)

// TestMultiClusterAlerts: with showMultiCluster, the same alerts as
// alerts.yaml (names, for, labels), every join and aggregation of an alert
// or a recording rule keeps the cluster label, and every query of a description selects the alert's own
// cluster, so that a global ruler never merges two clusters' series.
func TestMultiClusterAlerts(t *testing.T) {
	single := map[string]rule{}
	for _, r := range loadAlerts(t).alerts() {
		single[r.Alert] = r
	}
	multi := loadRules(t, multiClusterRules).alerts()
	if len(multi) != len(single) {
		t.Errorf("%s has %d alerts, alerts.yaml %d", multiClusterRules, len(multi), len(single))
	}
	for _, r := range multi {
		s, ok := single[r.Alert]
		if !ok {
			t.Errorf("%s: not an alert of alerts.yaml", r.Alert)
			continue
		}
		if r.For != s.For || !maps.Equal(r.Labels, s.Labels) {
			t.Errorf("%s: for %s, labels %v; alerts.yaml has for %s, labels %v", r.Alert, r.For, r.Labels, s.For, s.Labels)
		}
		for _, m := range groupingClauseRE.FindAllStringSubmatch(r.Expr, -1) {
			if !slices.Contains(strings.Split(strings.ReplaceAll(m[1], " ", ""), ","), "cluster") {
				t.Errorf("%s: %q drops the cluster label", r.Alert, m[0])
			}
		}
		for _, m := range templateQueryRE.FindAllStringSubmatch(r.Annotations["description"], -1) {
			if !strings.Contains(m[1], "cluster=%q") {
				t.Errorf("%s: description queries %q in every cluster", r.Alert, m[0])
			}
		}
	}
	records := loadRules(t, multiClusterRules).records()
	if len(records) != len(loadAlerts(t).records()) {
		t.Errorf("%s has %d recording rules, alerts.yaml %d", multiClusterRules, len(records), len(loadAlerts(t).records()))
	}
	for _, r := range records {
		for _, m := range groupingClauseRE.FindAllStringSubmatch(r.Expr, -1) {
			if !slices.Contains(strings.Split(strings.ReplaceAll(m[1], " ", ""), ","), "cluster") {
				t.Errorf("recording rule %s: %q drops the cluster label", r.Record, m[0])
			}
		}
	}
}

// dropCluster removes the cluster label from the joins, aggregations and
// template queries of a rule rendered with showMultiCluster, as if the rule
// had been written for one cluster.
func dropCluster(r *rule) bool {
	changed := replaceAllIn(&r.Expr, "(cluster, ", "(")
	d := r.Annotations["description"]
	if replaceAllIn(&d, "cluster=%q,", "") && replaceAllIn(&d, "$labels.cluster ", "") {
		changed = true
	}
	r.Annotations["description"] = d
	return changed
}

func replaceAllIn(field *string, old, repl string) bool {
	if !strings.Contains(*field, old) {
		return false
	}
	*field = strings.ReplaceAll(*field, old, repl)
	return true
}

// multiClusterMutants are rules that merge two clusters' series, and one
// that drops the KVM pool minimum that rendering sets; the two-cluster tests
// of tests/multicluster must reject each.
var multiClusterMutants = []mutant{
	{"ProviderHealthExporterDown", "misses an exporter gone from one cluster", func(r *rule) bool {
		i, j := strings.Index(r.Expr, "\nor\n("), strings.LastIndex(r.Expr, ")\nor\n")
		if i < 0 || j < i {
			return false
		}
		r.Expr = r.Expr[:i] + r.Expr[j+1:]
		return true
	}},
	{"ProviderHealthProbeFailed", "lets one cluster's exporter outage hide another's probe failures", dropCluster},
	{"ProviderNotReady", "names another cluster's reason", dropCluster},
	{"ProviderUnavailable", "merges the clusters", dropCluster},
	{"ProviderCheckNearTimeout", "joins the clusters many-to-many", dropCluster},
	{"KVMPoolLowSpace", "quotes another cluster's pool", dropCluster},
	{"KVMPoolFillingUp", "quotes another cluster's pool", dropCluster},
	{"ProviderQuotaNearLimit", "quotes another cluster's quota", dropCluster},
	{afterLoss, "merges the clusters' hosts", func(r *rule) bool { return replaceAllIn(&r.Expr, "(cluster, ", "(") }},
	// Not a cluster mistake: this rendering is also the one with a KVM pool
	// minimum (tests/multicluster/alerts.jsonnet), and its test must see it.
	{"KVMPoolFillingUp", "forecasts zero instead of the minimum", exprReplace("< 21474836480", "< 0")},
}

// TestMultiClusterRuleTestsCatchBrokenRules: the rules rendered with
// showMultiCluster pass their two-cluster tests, and fail them once a rule
// forgets the cluster.
func TestMultiClusterRuleTestsCatchBrokenRules(t *testing.T) {
	files, err := filepath.Glob("tests/multicluster/*_test.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no promtool test files in tests/multicluster: %v", err)
	}
	checkMutants(t, multiClusterRules, loadRules(t, multiClusterRules), files, multiClusterMutants)
}

// checkMutants runs promtool's rule tests, files (paths relative to mixin/),
// against rf written at rulesPath in a copy of that layout: first unmodified,
// which must pass, then with each mutant, which must fail on its alert.
func checkMutants(t *testing.T, rulesPath string, orig ruleFile, files []string, ms []mutant) {
	t.Helper()
	pt := promtool(t)
	run := func(t *testing.T, rf ruleFile, alert string) (string, error) {
		dir := t.TempDir()
		for _, f := range append([]string{rulesPath}, files...) {
			if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(f)), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		writeYAML(t, filepath.Join(dir, rulesPath), rf)
		args := []string{"test", "rules"}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if alert != "" && !strings.Contains(string(b), "alertname: "+alert+"\n") {
				continue
			}
			dst := filepath.Join(dir, f)
			if err := os.WriteFile(dst, b, 0o644); err != nil {
				t.Fatal(err)
			}
			args = append(args, dst)
		}
		out, err := exec.Command(pt, args...).CombinedOutput()
		return string(out), err
	}
	// The unmodified rules, re-marshalled, must pass: otherwise every mutant
	// would "fail" for the wrong reason.
	if out, err := run(t, orig, ""); err != nil {
		t.Fatalf("the unmodified rules fail their tests: %v\n%s", err, out)
	}

	for _, m := range ms {
		t.Run(m.alert+"/"+m.what, func(t *testing.T) {
			t.Parallel()
			var rf ruleFile
			b, _ := yaml.Marshal(orig)
			if err := yaml.Unmarshal(b, &rf); err != nil {
				t.Fatal(err)
			}
			changed := false
			for gi := range rf.Groups {
				for ri := range rf.Groups[gi].Rules {
					r := &rf.Groups[gi].Rules[ri]
					if r.Alert == m.alert || r.Record == m.alert {
						changed = m.mutate(r) || changed
					}
				}
			}
			if !changed {
				t.Fatalf("mutation did not apply: the rule changed, update the mutant")
			}
			alert := m.failingAlert()
			out, err := run(t, rf, alert)
			if err == nil {
				t.Fatalf("promtool tests pass with a broken %s (%s)", m.alert, m.what)
			}
			// A failed expectation names the alert; an evaluation error
			// names the rule.
			if !strings.Contains(out, "alertname: "+alert+",") && !strings.Contains(out, "rule: "+m.alert+",") {
				t.Fatalf("promtool tests failed, but not on %s:\n%s", alert, out)
			}
		})
	}
}
