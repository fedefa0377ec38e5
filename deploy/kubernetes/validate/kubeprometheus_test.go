package validate

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	monitoringv1alpha1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

const kubePrometheus = "../components/kube-prometheus"

// kubePrometheusRendering is base + prometheus-operator + kube-prometheus,
// in namespace (the base's when empty), decoded strictly.
type kubePrometheusRendering struct {
	all         []object
	service     corev1.Service
	role        rbacv1.Role
	roleBinding rbacv1.RoleBinding
	configMaps  map[string]corev1.ConfigMap
}

func renderKubePrometheus(t *testing.T, namespace string) kubePrometheusRendering {
	t.Helper()
	out, err := RenderInNamespace(namespace, base, operator, kubePrometheus)
	if err != nil {
		t.Fatal(err)
	}
	r := kubePrometheusRendering{configMaps: map[string]corev1.ConfigMap{}}
	r.all = splitObjects(t, "kube-prometheus overlay", out)
	var roles, bindings int
	for _, o := range r.all {
		switch o.Kind {
		case "Service":
			strict(t, o, &r.service)
		case "Role":
			roles++
			strict(t, o, &r.role)
		case "RoleBinding":
			bindings++
			strict(t, o, &r.roleBinding)
		case "ConfigMap":
			var cm corev1.ConfigMap
			strict(t, o, &cm)
			r.configMaps[cm.Name] = cm
		case "ServiceMonitor":
			strict(t, o, new(monitoringv1.ServiceMonitor))
		case "PrometheusRule":
			strict(t, o, new(monitoringv1.PrometheusRule))
		case "ScrapeConfig":
			strict(t, o, new(monitoringv1alpha1.ScrapeConfig))
		}
	}
	if roles != 1 || bindings != 1 {
		t.Fatalf("%d Roles, %d RoleBindings; want one each", roles, bindings)
	}
	return r
}

// TestKubePrometheusComponent: the Role lets kube-prometheus's Prometheus
// discover the exporter in its namespace, every Prometheus Operator object
// carries the release label kube-prometheus-stack selects by, and the
// grafana_dashboard ConfigMap holds the mixin's dashboards.
func TestKubePrometheusComponent(t *testing.T) {
	r := renderKubePrometheus(t, "")
	checkKubePrometheusRBAC(t, r.role, r.roleBinding, r.service.Namespace)

	var operatorObjects []string
	for _, o := range r.all {
		if group, _, _ := strings.Cut(o.APIVersion, "/"); group != "monitoring.coreos.com" {
			continue
		}
		operatorObjects = append(operatorObjects, o.Kind)
		if o.Metadata.Labels["release"] != releaseLabel {
			t.Errorf("%s %s labels %v: no release=%s for kube-prometheus-stack", o.Kind, o.Metadata.Name, o.Metadata.Labels, releaseLabel)
		}
		// The patch adds a label: the ones the Prometheus selectors of the
		// prometheus-operator component rely on are still there.
		if o.Metadata.Labels["app.kubernetes.io/name"] != "provider-health-exporter" {
			t.Errorf("%s %s lost its app.kubernetes.io/name label: %v", o.Kind, o.Metadata.Name, o.Metadata.Labels)
		}
	}
	if len(operatorObjects) < 2 {
		t.Errorf("Prometheus Operator objects %v: want at least the ServiceMonitor and the PrometheusRule", operatorObjects)
	}

	cm := dashboardsConfigMap(t, r.configMaps)
	checkDashboards(t, cm)
	if cm.Namespace != r.service.Namespace {
		t.Errorf("dashboards ConfigMap in %q, the exporter in %q", cm.Namespace, r.service.Namespace)
	}
}

// TestKubePrometheusComponentInAnotherNamespace: an overlay that moves the
// exporter moves the Role and its binding with it, while the subject stays
// kube-prometheus's Prometheus in monitoring.
func TestKubePrometheusComponentInAnotherNamespace(t *testing.T) {
	r := renderKubePrometheus(t, "egress-monitoring")
	if r.service.Namespace != "egress-monitoring" {
		t.Fatalf("the overlay's namespace did not apply: Service in %q", r.service.Namespace)
	}
	checkKubePrometheusRBAC(t, r.role, r.roleBinding, "egress-monitoring")
}

// TestKubePrometheusComponentLabelsScrapeConfig: the release label is
// patched onto every object of the operator's API group, so a ScrapeConfig
// placed before the component (as by the prometheus-operator component)
// gets it too.
func TestKubePrometheusComponentLabelsScrapeConfig(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"kustomization.yaml": "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\nresources: [scrapeconfig.yaml]\n",
		"scrapeconfig.yaml": `apiVersion: monitoring.coreos.com/v1alpha1
kind: ScrapeConfig
metadata:
  name: provider-health-exporter-sd
  namespace: provider-health
  labels:
    app.kubernetes.io/name: provider-health-exporter
spec:
  httpSDConfigs:
    - url: http://provider-health-exporter.provider-health.svc:9877/sd
`,
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := Render(base, operator, dir, kubePrometheus)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, o := range splitObjects(t, "with a ScrapeConfig", out) {
		if o.Kind != "ScrapeConfig" {
			continue
		}
		found = true
		strict(t, o, new(monitoringv1alpha1.ScrapeConfig))
		if o.Metadata.Labels["release"] != releaseLabel {
			t.Errorf("ScrapeConfig labels %v: no release=%s", o.Metadata.Labels, releaseLabel)
		}
	}
	if !found {
		t.Fatal("the rendering has no ScrapeConfig")
	}
}

// TestKubePrometheusReleaseFromOnePatch: the overlay of docs/deployment.md:
// "kube-prometheus" that names another kube-prometheus-stack release sets
// the release label of every Prometheus Operator object with one patch of
// one field, after the component's.
func TestKubePrometheusReleaseFromOnePatch(t *testing.T) {
	dir := t.TempDir()
	var paths []string
	for _, p := range []string{base, operator, kubePrometheus} {
		rel, err := relative(dir, p)
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, rel)
	}
	k := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - %s
components:
  - %s
  - %s
patches:
  - target:
      group: monitoring.coreos.com
    patch: |-
      - op: replace
        path: /metadata/labels/release
        value: kps-prod
`, paths[0], paths[1], paths[2])
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := Render(dir)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, o := range splitObjects(t, "the overlay", out) {
		if group, _, _ := strings.Cut(o.APIVersion, "/"); group != operatorGroup {
			continue
		}
		kinds = append(kinds, o.Kind)
		if o.Metadata.Labels["release"] != "kps-prod" {
			t.Errorf("%s %s labels %v, want release=kps-prod", o.Kind, o.Metadata.Name, o.Metadata.Labels)
		}
	}
	slices.Sort(kinds)
	if want := []string{"PrometheusRule", "ScrapeConfig", "ServiceMonitor"}; !slices.Equal(kinds, want) {
		t.Errorf("monitoring objects %v, want %v", kinds, want)
	}
}
