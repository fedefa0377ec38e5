package validate

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// operatorGroup is the Prometheus Operator's API group, whose objects the
// test API server has no CRDs for.
const operatorGroup = "monitoring.coreos.com"

const (
	base     = ".."
	operator = "../components/prometheus-operator"
	repoRoot = "../../.."
)

// object is one rendered resource with its YAML.
type object struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		Labels    map[string]string `json:"labels"`
	} `json:"metadata"`
	doc []byte
}

func render(t *testing.T, dir string, components ...string) map[string]object {
	t.Helper()
	out, err := Render(dir, components...)
	if err != nil {
		t.Fatal(err)
	}
	objs := map[string]object{}
	for _, o := range splitObjects(t, dir, out) {
		if _, dup := objs[o.Kind]; dup {
			t.Fatalf("%s: two objects of kind %s; this test expects one of each", dir, o.Kind)
		}
		objs[o.Kind] = o
	}
	return objs
}

// splitObjects splits a multi-document YAML stream into its objects.
func splitObjects(t *testing.T, what string, out []byte) []object {
	t.Helper()
	var objs []object
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(out)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		var o object
		if err := yaml.Unmarshal(doc, &o); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if o.Kind == "" {
			continue // a document of comments only
		}
		o.doc = doc
		objs = append(objs, o)
	}
	return objs
}

// strict decodes an object into its Go type: an unknown or duplicate field
// is an error, as with kubectl's --validate=strict.
func strict(t *testing.T, o object, into any) {
	t.Helper()
	if err := yaml.UnmarshalStrict(o.doc, into); err != nil {
		t.Fatalf("%s %s does not decode strictly into %T: %v", o.Kind, o.Metadata.Name, into, err)
	}
}

func TestBaseRendersWithoutOperatorKinds(t *testing.T) {
	objs := render(t, base)
	for _, kind := range []string{"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap", "Deployment", "Service"} {
		if _, ok := objs[kind]; !ok {
			t.Errorf("the base renders no %s", kind)
		}
	}
	for _, kind := range []string{"ServiceMonitor", "PrometheusRule"} {
		if _, ok := objs[kind]; ok {
			t.Errorf("the base renders a %s: a cluster without the operator's CRDs would refuse it", kind)
		}
	}
}

// TestDeploymentImageAndConfig: the image is the release in VERSION, and the
// Deployment mounts the generated ConfigMap, whose name changes with its
// content so that a new configuration rolls the Deployment.
func TestDeploymentImageAndConfig(t *testing.T) {
	objs := render(t, base)
	var d appsv1.Deployment
	strict(t, objs["Deployment"], &d)
	var cm corev1.ConfigMap
	strict(t, objs["ConfigMap"], &cm)

	version, err := os.ReadFile(filepath.Join(repoRoot, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	want := "ghcr.io/egress-proxies/provider_health_exporter:" + strings.TrimSpace(string(version))
	if len(d.Spec.Template.Spec.Containers) != 1 || d.Spec.Template.Spec.Containers[0].Image != want {
		t.Errorf("Deployment image %v, want %s (VERSION)", d.Spec.Template.Spec.Containers, want)
	}
	if !strings.HasPrefix(cm.Name, "provider-health-exporter-config-") {
		t.Errorf("ConfigMap name %q has no content hash suffix", cm.Name)
	}
	if !strings.Contains(cm.Data["provider_health.yml"], "kubernetes:") {
		t.Errorf("ConfigMap lacks provider_health.yml: %v", cm.Data)
	}
	mounted := false
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.ConfigMap != nil && v.ConfigMap.Name == cm.Name {
			mounted = true
		}
	}
	if !mounted {
		t.Errorf("the Deployment does not mount ConfigMap %s: %+v", cm.Name, d.Spec.Template.Spec.Volumes)
	}

	// A changed configuration gives the ConfigMap, and so the pod
	// template, a new name.
	dir := t.TempDir()
	for _, f := range []string{"kustomization.yaml", "namespace.yaml", "serviceaccount.yaml", "clusterrole.yaml", "clusterrolebinding.yaml", "deployment.yaml", "service.yaml", "provider_health.yml"} {
		data, err := os.ReadFile(filepath.Join(base, f))
		if err != nil {
			t.Fatal(err)
		}
		if f == "provider_health.yml" {
			data = bytes.Replace(data, []byte("timeout: 10s"), []byte("timeout: 9s"), 1)
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if changed := render(t, dir)["ConfigMap"].Metadata.Name; changed == cm.Name {
		t.Errorf("ConfigMap name %s did not change with its content", changed)
	}
}

// TestPrometheusOperatorComponent decodes the ServiceMonitor and the
// PrometheusRule strictly into the operator's types and checks that the job
// label the operator gives the scraped series is the one every alert
// selects.
func TestPrometheusOperatorComponent(t *testing.T) {
	objs := render(t, base, operator)
	var sm monitoringv1.ServiceMonitor
	strict(t, objs["ServiceMonitor"], &sm)
	var rule monitoringv1.PrometheusRule
	strict(t, objs["PrometheusRule"], &rule)
	var svc corev1.Service
	strict(t, objs["Service"], &svc)

	if sm.Namespace != svc.Namespace || rule.Namespace != svc.Namespace {
		t.Errorf("ServiceMonitor in %q, PrometheusRule in %q, Service in %q: keep them together", sm.Namespace, rule.Namespace, svc.Namespace)
	}
	for k, v := range sm.Spec.Selector.MatchLabels {
		if svc.Labels[k] != v {
			t.Errorf("ServiceMonitor selector %s=%s does not match the Service's labels %v", k, v, svc.Labels)
		}
	}
	if len(sm.Spec.Endpoints) != 1 {
		t.Fatalf("ServiceMonitor has %d endpoints, want 1", len(sm.Spec.Endpoints))
	}
	ep := sm.Spec.Endpoints[0]
	portFound := false
	for _, p := range svc.Spec.Ports {
		portFound = portFound || p.Name == ep.Port
	}
	if !portFound || ep.Path != "/metrics" {
		t.Errorf("ServiceMonitor scrapes port %q path %q; want a port of the Service and /metrics", ep.Port, ep.Path)
	}
	interval, err1 := time.ParseDuration(string(ep.Interval))
	timeout, err2 := time.ParseDuration(string(ep.ScrapeTimeout))
	if err1 != nil || err2 != nil || timeout <= 0 || timeout > interval {
		t.Errorf("ServiceMonitor interval %q, scrapeTimeout %q: both must be set, the timeout at most the interval", ep.Interval, ep.ScrapeTimeout)
	}

	job := operatorJob(t, sm, svc)
	sel := regexp.MustCompile(`job="([^"]*)"`)
	alerts := 0
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			alerts++
			ms := sel.FindAllStringSubmatch(r.Expr.String(), -1)
			if len(ms) == 0 {
				t.Errorf("alert %s selects no job: %s", r.Alert, r.Expr.String())
			}
			for _, m := range ms {
				if m[1] != job {
					t.Errorf("alert %s selects job=%q; the ServiceMonitor's series have job=%q", r.Alert, m[1], job)
				}
			}
		}
	}
	if alerts == 0 {
		t.Fatal("the PrometheusRule has no rules")
	}
}

// operatorJob is the job label the Prometheus Operator gives the series of
// a ServiceMonitor endpoint: the Service's name, or the value of its label
// named by jobLabel, then the endpoint's relabelings. Only the relabelings
// this repository uses are understood; anything else fails the test rather
// than guess.
func operatorJob(t *testing.T, sm monitoringv1.ServiceMonitor, svc corev1.Service) string {
	t.Helper()
	job := svc.Name
	if sm.Spec.JobLabel != "" {
		v, ok := svc.Labels[sm.Spec.JobLabel]
		if !ok {
			t.Fatalf("ServiceMonitor jobLabel %q: the Service has no such label", sm.Spec.JobLabel)
		}
		job = v
	}
	for _, r := range sm.Spec.Endpoints[0].RelabelConfigs {
		if r.TargetLabel != "job" {
			continue
		}
		if (r.Action != "" && strings.ToLower(r.Action) != "replace") || len(r.SourceLabels) != 0 || r.Replacement == nil || (r.Regex != "" && r.Regex != "(.*)") {
			t.Fatalf("relabeling of job %+v: this test only follows a plain replace", r)
		}
		job = *r.Replacement
	}
	return job
}
