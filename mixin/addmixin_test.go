package mixin_test

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// addMixinView is what kube-prometheus's addMixin
// (jsonnet/kube-prometheus/lib/mixin.libsonnet, docs/deployment.md:
// "kube-prometheus") reads of a mixin: whether it has the hidden fields
// prometheusAlerts, prometheusRules and grafanaDashboards (std.objectHasAll),
// the groups of the first two, which it concatenates, alerts first, into
// its PrometheusRule's spec.groups, and the dashboards object, which it
// hands to kube-prometheus's Grafana as values.grafana.dashboards (keyed
// by file name).
const addMixinView = `
local m = (import 'mixin.libsonnet') + { _config+:: %s };
{
  hasAlerts: std.objectHasAll(m, 'prometheusAlerts'),
  hasRules: std.objectHasAll(m, 'prometheusRules'),
  hasDashboards: std.objectHasAll(m, 'grafanaDashboards'),
  groups: (if std.objectHasAll(m, 'prometheusAlerts') then m.prometheusAlerts.groups else [])
          + (if std.objectHasAll(m, 'prometheusRules') then m.prometheusRules.groups else []),
  dashboards: if std.objectHasAll(m, 'grafanaDashboards') then m.grafanaDashboards else {},
}`

type addMixinFields struct {
	HasAlerts     bool                      `json:"hasAlerts"`
	HasRules      bool                      `json:"hasRules"`
	HasDashboards bool                      `json:"hasDashboards"`
	Groups        []map[string]any          `json:"groups"`
	Dashboards    map[string]map[string]any `json:"dashboards"`
}

func addMixinRead(t *testing.T, config string) addMixinFields {
	t.Helper()
	cmd := exec.Command("go", "tool", "-modfile=../tools/go.mod", "jsonnet", "-J", ".", "-e", strings.Replace(addMixinView, "%s", config, 1))
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		t.Fatalf("jsonnet: %v\n%s", err, stderr)
	}
	var f addMixinFields
	if err := json.Unmarshal(out, &f); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestKubePrometheusAddMixin: the mixin has the fields addMixin reads, of
// the shape it expects: alert groups and recording rule groups (which
// addMixin's PrometheusRule holds in the order of mixin/alerts.yaml, alerts
// first) and a dashboards
// object keyed by file name, whose dashboards are those of
// mixin/dashboards_out; a _config override, as the docs' addMixin example
// passes, reaches the groups addMixin reads.
func TestKubePrometheusAddMixin(t *testing.T) {
	f := addMixinRead(t, "{}")
	if !f.HasAlerts || !f.HasRules || !f.HasDashboards {
		t.Fatalf("the mixin lacks prometheusAlerts (%v), prometheusRules (%v) or grafanaDashboards (%v), which addMixin reads", f.HasAlerts, f.HasRules, f.HasDashboards)
	}
	raw, err := os.ReadFile("alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var alerts struct {
		Groups []map[string]any `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &alerts); err != nil {
		t.Fatal(err)
	}
	if len(f.Groups) == 0 || !reflect.DeepEqual(jsonRoundTrip(t, f.Groups), jsonRoundTrip(t, alerts.Groups)) {
		t.Errorf("addMixin's groups differ from alerts.yaml's (%d and %d groups)", len(f.Groups), len(alerts.Groups))
	}
	files, err := filepath.Glob(filepath.Join("dashboards_out", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range files {
		names = append(names, filepath.Base(p))
	}
	var got []string
	for name, d := range f.Dashboards {
		got = append(got, name)
		if d["uid"] == nil || d["title"] == nil {
			t.Errorf("dashboard %s has no uid or title", name)
		}
	}
	slices.Sort(got)
	if len(got) == 0 || !slices.Equal(got, names) {
		t.Errorf("addMixin's dashboards %v, mixin/dashboards_out has %v", got, names)
	}

	over := addMixinRead(t, `{ providerHealthSelector: 'job="egress-provider-health"' }`)
	text, err := json.Marshal(over.Groups)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(text), `job=\"egress-provider-health\"`) || strings.Contains(string(text), `job=\"provider-health\"`) {
		t.Error("a _config override does not reach every group addMixin reads")
	}
}

func jsonRoundTrip(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}
