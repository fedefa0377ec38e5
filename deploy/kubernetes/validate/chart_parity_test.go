package validate

import (
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"

	"github.com/egress-proxies/provider_health_exporter/deploy/kubernetes/validate/chart"
)

// gcpOnly is a configuration without a kubernetes entry: null drops the
// chart's default in-cluster entry, as Helm deletes a key set to null.
func gcpOnly() map[string]any {
	return map[string]any{"kubernetes": nil, "gcp": []any{map[string]any{"name": "crawl-prod", "project": "crawl-prod-123"}}}
}

// TestChartTokenAndRBACFollowConfig: the ServiceAccount token is mounted
// and the ClusterRole rendered when the configuration has an in-cluster
// kubernetes entry (one without kubeconfig), not for a configuration of
// gcp or of other clusters' kubeconfigs only; serviceAccount.
// automountServiceAccountToken and rbac.create override either way.
func TestChartTokenAndRBACFollowConfig(t *testing.T) {
	kubeconfigOnly := map[string]any{"kubernetes": []any{map[string]any{"name": "other", "kubeconfig": "/etc/provider_health/secrets/other.kubeconfig"}}}
	mixed := map[string]any{"kubernetes": []any{
		map[string]any{"name": "other", "kubeconfig": "/etc/provider_health/secrets/other.kubeconfig"},
		map[string]any{"name": "here"},
	}}
	for _, tc := range []struct {
		name      string
		values    map[string]any
		token     bool
		roleWants bool
	}{
		{"defaults: this cluster in-cluster", nil, true, true},
		{"gcp only", map[string]any{"config": gcpOnly()}, false, false},
		{"another cluster's kubeconfig only", map[string]any{"config": kubeconfigOnly}, false, false},
		{"a kubeconfig and an in-cluster entry", map[string]any{"config": mixed}, true, true},
		{"gcp only, both forced on", map[string]any{"config": gcpOnly(), "rbac": map[string]any{"create": true}, "serviceAccount": map[string]any{"automountServiceAccountToken": true}}, true, true},
		{"defaults, both forced off", map[string]any{"rbac": map[string]any{"create": false}, "serviceAccount": map[string]any{"automountServiceAccountToken": false}}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := renderChart(t, tc.values)
			pod := c.deployment.Spec.Template.Spec
			if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken != tc.token {
				t.Errorf("Pod automountServiceAccountToken %v, want %v", dump(pod.AutomountServiceAccountToken), tc.token)
			}
			if sa := c.serviceAccount; sa == nil || sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken != tc.token {
				t.Errorf("ServiceAccount automountServiceAccountToken: %s, want %v", dump(sa), tc.token)
			}
			if got := c.clusterRole != nil && c.clusterRoleBinding != nil; got != tc.roleWants {
				t.Errorf("ClusterRole and binding rendered: %v, want %v", got, tc.roleWants)
			}
			for _, err := range chart.Lint(chartDir, tc.values) {
				t.Errorf("helm lint: %v", err)
			}
		})
	}
}

// TestChartPodCommonLabels: commonLabels reach the Pod template (the Pods
// carry them, as every other object), podLabels win a key both set, and
// neither reaches the selector.
func TestChartPodCommonLabels(t *testing.T) {
	c := renderChart(t, map[string]any{
		"commonLabels": map[string]any{"team": "egress", "tier": "common"},
		"podLabels":    map[string]any{"tier": "pod"},
	})
	labels := c.deployment.Spec.Template.Labels
	if labels["team"] != "egress" || labels["tier"] != "pod" {
		t.Errorf("Pod template labels %v, want team=egress from commonLabels and tier=pod from podLabels", labels)
	}
	for k := range c.deployment.Spec.Selector.MatchLabels {
		if k == "team" || k == "tier" {
			t.Errorf("selector has %s: commonLabels and podLabels must stay out of it", k)
		}
	}
	for k, v := range c.deployment.Spec.Selector.MatchLabels {
		if labels[k] != v {
			t.Errorf("Pod template labels %v lack the selector's %s=%s", labels, k, v)
		}
	}
}

// relabel is a relabeling as the values take it, and its rendering.
var (
	clusterRelabel = map[string]any{"action": "replace", "targetLabel": "cluster", "replacement": "eu-1"}
	dropRelabel    = map[string]any{"action": "drop", "sourceLabels": []any{"__name__"}, "regex": "go_.*"}
	ownRelabel     = map[string]any{"action": "replace", "targetLabel": "cluster", "replacement": "probe-only"}
)

func withMonitoring(sm, sc map[string]any) map[string]any {
	sm["enabled"], sc["enabled"] = true, true
	return map[string]any{"serviceMonitor": sm, "scrapeConfig": sc}
}

// TestChartScrapeConfigRelabelings: the ScrapeConfig takes the
// ServiceMonitor's relabelings and metric relabelings when it has none of
// its own, after its own that set instance, exporter and job, so a cluster
// label reaches the providers' series; its own values replace them.
func TestChartScrapeConfigRelabelings(t *testing.T) {
	last := func(rs []monitoringv1.RelabelConfig) string {
		if len(rs) == 0 {
			return ""
		}
		return dump(rs[len(rs)-1])
	}
	inherited := renderChart(t, withMonitoring(
		map[string]any{"relabelings": []any{clusterRelabel}, "metricRelabelings": []any{dropRelabel}},
		map[string]any{},
	))
	sc := inherited.scrapeConfig.Spec
	if !strings.Contains(last(sc.RelabelConfigs), `"eu-1"`) || len(sc.RelabelConfigs) != 5 {
		t.Errorf("ScrapeConfig relabelings %s: want the chart's four, then the ServiceMonitor's cluster=eu-1", dump(sc.RelabelConfigs))
	}
	if len(sc.MetricRelabelConfigs) != 1 || !strings.Contains(dump(sc.MetricRelabelConfigs), "go_.*") {
		t.Errorf("ScrapeConfig metricRelabelings %s: want the ServiceMonitor's", dump(sc.MetricRelabelConfigs))
	}
	smEndpoint := inherited.serviceMonitor.Spec.Endpoints[0]
	if !strings.Contains(last(smEndpoint.RelabelConfigs), `"eu-1"`) {
		t.Errorf("ServiceMonitor relabelings %s lack cluster=eu-1", dump(smEndpoint.RelabelConfigs))
	}

	own := renderChart(t, withMonitoring(
		map[string]any{"relabelings": []any{clusterRelabel}, "metricRelabelings": []any{dropRelabel}},
		map[string]any{"relabelings": []any{ownRelabel}, "metricRelabelings": []any{clusterRelabel}, "sampleLimit": 5000},
	))
	sc = own.scrapeConfig.Spec
	if !strings.Contains(last(sc.RelabelConfigs), "probe-only") || strings.Contains(dump(sc.RelabelConfigs), "eu-1") {
		t.Errorf("ScrapeConfig relabelings %s: want its own, not the ServiceMonitor's", dump(sc.RelabelConfigs))
	}
	if len(sc.MetricRelabelConfigs) != 1 || strings.Contains(dump(sc.MetricRelabelConfigs), "go_.*") {
		t.Errorf("ScrapeConfig metricRelabelings %s: want its own", dump(sc.MetricRelabelConfigs))
	}
	if sc.SampleLimit == nil || *sc.SampleLimit != 5000 {
		t.Errorf("ScrapeConfig sampleLimit %v, want 5000", dump(sc.SampleLimit))
	}
}

// TestChartServiceMonitorKnobs: jobLabel, targetLabels and sampleLimit
// reach the ServiceMonitor; with jobLabel the chart's job=provider-health
// relabeling is left out, as the Service's label names the job.
func TestChartServiceMonitorKnobs(t *testing.T) {
	c := renderChart(t, map[string]any{"serviceMonitor": map[string]any{
		"enabled": true, "jobLabel": "app.kubernetes.io/name", "targetLabels": []any{"team"}, "sampleLimit": 20000,
	}})
	sm := c.serviceMonitor.Spec
	if sm.JobLabel != "app.kubernetes.io/name" || !slices.Equal(sm.TargetLabels, []string{"team"}) || sm.SampleLimit == nil || *sm.SampleLimit != 20000 {
		t.Errorf("ServiceMonitor jobLabel %q, targetLabels %v, sampleLimit %v", sm.JobLabel, sm.TargetLabels, dump(sm.SampleLimit))
	}
	if strings.Contains(dump(sm.Endpoints[0].RelabelConfigs), "provider-health") {
		t.Errorf("with jobLabel the relabelings %s still set job=provider-health", dump(sm.Endpoints[0].RelabelConfigs))
	}
	def := renderChart(t, map[string]any{"serviceMonitor": map[string]any{"enabled": true}})
	if d := def.serviceMonitor.Spec; d.JobLabel != "" || d.TargetLabels != nil || d.SampleLimit != nil {
		t.Errorf("default ServiceMonitor has jobLabel %q, targetLabels %v, sampleLimit %v", d.JobLabel, d.TargetLabels, dump(d.SampleLimit))
	}
}

// TestChartExtraManifests: extraManifests are released with the chart,
// an object or a string, both through tpl.
func TestChartExtraManifests(t *testing.T) {
	c := renderChart(t, map[string]any{"extraManifests": []any{
		map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "extra-object", "namespace": "{{ .Release.Namespace }}"}, "data": map[string]any{"a": "b"}},
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: extra-string\n  namespace: {{ .Release.Namespace }}\ndata:\n  release: {{ .Release.Name | quote }}\n",
	}})
	obj, str := c.configMaps["extra-object"], c.configMaps["extra-string"]
	if obj.Namespace != chartNamespace || obj.Data["a"] != "b" {
		t.Errorf("extra object %s", dump(obj))
	}
	if str.Namespace != chartNamespace || str.Data["release"] != chartRelease {
		t.Errorf("extra string %s", dump(str))
	}
}

// TestChartHelmTest: the helm test hook is a Pod that runs the exporter's
// --config.check on the configuration the Deployment mounts, with its
// image, mounts of the configuration and the secrets, and security
// context; helmTest.enabled=false leaves it out.
func TestChartHelmTest(t *testing.T) {
	c := renderChart(t, allToggles(proxiesNamespace))
	p := c.testPod
	if p == nil {
		t.Fatal("no helm test Pod")
	}
	if p.Annotations["helm.sh/hook"] != "test" || p.Spec.RestartPolicy != "Never" {
		t.Errorf("test Pod annotations %v, restartPolicy %s", p.Annotations, p.Spec.RestartPolicy)
	}
	dep := c.deployment.Spec.Template.Spec
	ctr, dctr := p.Spec.Containers[0], dep.Containers[0]
	if ctr.Image != dctr.Image {
		t.Errorf("test image %s, Deployment's %s", ctr.Image, dctr.Image)
	}
	if !slices.Equal(ctr.Args, []string{"--config.check", dctr.Args[0]}) {
		t.Errorf("test args %q, want --config.check and the Deployment's %q", ctr.Args, dctr.Args[0])
	}
	if dump(ctr.SecurityContext) != dump(dctr.SecurityContext) || dump(p.Spec.SecurityContext) != dump(dep.SecurityContext) {
		t.Error("test Pod's securityContexts differ from the Deployment's")
	}
	mounts := map[string]string{}
	for _, m := range dctr.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	volumes := map[string]string{}
	for _, v := range dep.Volumes {
		volumes[v.Name] = dump(v)
	}
	for _, want := range []string{"config", "secrets", "ca-bundle"} {
		found := false
		for _, m := range ctr.VolumeMounts {
			found = found || (m.Name == want && m.MountPath == mounts[want])
		}
		for _, v := range p.Spec.Volumes {
			if v.Name == want && dump(v) != volumes[want] {
				t.Errorf("test volume %s, the Deployment's %s", dump(v), volumes[want])
			}
		}
		if !found {
			t.Errorf("test Pod does not mount %s at %s: %s", want, mounts[want], dump(ctr.VolumeMounts))
		}
	}
	if off := renderChart(t, map[string]any{"helmTest": map[string]any{"enabled": false}}); off.testPod != nil {
		t.Error("helmTest.enabled=false renders the test Pod")
	}
}
