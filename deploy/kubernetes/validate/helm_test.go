package validate

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	monitoringv1alpha1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/egress-proxies/provider_health_exporter/deploy/kubernetes/validate/chart"
)

const (
	chartDir       = "../../helm/provider-health-exporter"
	chartRelease   = "phe"
	chartNamespace = "monitoring-targets"
	// The release label kube-prometheus-stack selects by, as a user adds it.
	releaseLabel = "kube-prometheus-stack"
)

// proxiesNamespace is where the unit tests put the headroom and placement
// Roles (the proxies' namespace, rbac.headroom.namespaces).
const proxiesNamespace = "egress-proxies"

// allToggles turns on every optional part of the chart and sets every knob
// of the Pod, with the release label kube-prometheus-stack selects by set
// once (releaseLabel) and the headroom and placement Roles in proxiesNS.
func allToggles(proxiesNS string) map[string]any {
	on := func() map[string]any { return map[string]any{"enabled": true} }
	return map[string]any{
		"serviceMonitor":      on(),
		"prometheusRule":      on(),
		"scrapeConfig":        on(),
		"dashboards":          on(),
		"releaseLabel":        releaseLabel,
		"commonLabels":        map[string]any{"team": "egress"},
		"networkPolicy":       on(),
		"podDisruptionBudget": map[string]any{"maxUnavailable": 1},
		"kubePrometheus":      map[string]any{"rbac": on()},
		"rbac": map[string]any{
			"headroom":  map[string]any{"enabled": true, "namespaces": []any{proxiesNS}},
			"placement": map[string]any{"enabled": true, "namespaces": []any{proxiesNS}},
		},
		"secrets":   map[string]any{"existingSecret": "provider-health-exporter-secrets"},
		"webConfig": map[string]any{"existingSecret": "provider-health-exporter-web"},
		"env":       map[string]any{"HTTPS_PROXY": "http://proxy.example:3128", "NO_PROXY": "kubernetes.default.svc,.svc,10.0.0.0/8"},
		"extraEnv": []any{map[string]any{"name": "PROXY_TOKEN", "valueFrom": map[string]any{
			"secretKeyRef": map[string]any{"name": "proxy-credentials", "key": "token"},
		}}},
		"extraVolumes":      []any{map[string]any{"name": "ca-bundle", "secret": map[string]any{"secretName": "ca-bundle"}}},
		"extraVolumeMounts": []any{map[string]any{"name": "ca-bundle", "mountPath": "/etc/ssl/extra", "readOnly": true}},
		"priorityClassName": "provider-health",
		"topologySpreadConstraints": []any{map[string]any{
			"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway",
			"labelSelector": map[string]any{"matchLabels": map[string]any{"app.kubernetes.io/name": "provider-health-exporter"}},
		}},
	}
}

// chartObjects is a rendering of the chart, decoded strictly: every object
// into the Go type of its kind.
type chartObjects struct {
	all                []object
	deployment         appsv1.Deployment
	service            corev1.Service
	serviceAccount     *corev1.ServiceAccount
	configMaps         map[string]corev1.ConfigMap // by name
	clusterRole        *rbacv1.ClusterRole
	clusterRoleBinding *rbacv1.ClusterRoleBinding
	roles              map[string]rbacv1.Role        // by namespace/name
	roleBindings       map[string]rbacv1.RoleBinding // by namespace/name
	networkPolicy      *networkingv1.NetworkPolicy
	pdb                *policyv1.PodDisruptionBudget
	serviceMonitor     *monitoringv1.ServiceMonitor
	prometheusRule     *monitoringv1.PrometheusRule
	scrapeConfig       *monitoringv1alpha1.ScrapeConfig
	testPod            *corev1.Pod // the helm test hook

	// scheduleRole and scheduleBinding are rbac.schedule's (name suffix -schedule).
	scheduleRole    *rbacv1.ClusterRole
	scheduleBinding *rbacv1.ClusterRoleBinding
}

func renderChart(t *testing.T, values map[string]any) chartObjects {
	t.Helper()
	out, err := chart.Template(t.Context(), chartDir, chartRelease, chartNamespace, values)
	if err != nil {
		t.Fatal(err)
	}
	objs := splitObjects(t, "the chart", out)
	c := chartObjects{all: objs, configMaps: map[string]corev1.ConfigMap{}, roles: map[string]rbacv1.Role{}, roleBindings: map[string]rbacv1.RoleBinding{}}
	seen := map[string]bool{}
	for _, o := range objs {
		key := o.Kind + " " + o.Metadata.Namespace + "/" + o.Metadata.Name
		if seen[key] {
			t.Fatalf("the chart renders %s twice", key)
		}
		seen[key] = true
		if err := decodeChartObject(&c, o); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// decodeChartObject decodes o strictly into the field of c for its kind. A
// kind the chart is not expected to render is an error: a Secret above all,
// as secrets are only ever named, never written into values.
func decodeChartObject(c *chartObjects, o object) error {
	var into any
	switch o.Kind {
	case "Deployment":
		into = &c.deployment
	case "Service":
		into = &c.service
	case "ServiceAccount":
		c.serviceAccount = new(corev1.ServiceAccount)
		into = c.serviceAccount
	case "ConfigMap":
		var cm corev1.ConfigMap
		if err := yaml.UnmarshalStrict(o.doc, &cm); err != nil {
			return fmt.Errorf("ConfigMap %s does not decode strictly: %w", o.Metadata.Name, err)
		}
		c.configMaps[cm.Name] = cm
		return nil
	case "ClusterRole":
		r := new(rbacv1.ClusterRole)
		if strings.HasSuffix(o.Metadata.Name, "-schedule") {
			c.scheduleRole = r
		} else {
			c.clusterRole = r
		}
		into = r
	case "ClusterRoleBinding":
		rb := new(rbacv1.ClusterRoleBinding)
		if strings.HasSuffix(o.Metadata.Name, "-schedule") {
			c.scheduleBinding = rb
		} else {
			c.clusterRoleBinding = rb
		}
		into = rb
	case "Role":
		var r rbacv1.Role
		if err := yaml.UnmarshalStrict(o.doc, &r); err != nil {
			return fmt.Errorf("Role %s does not decode strictly: %w", o.Metadata.Name, err)
		}
		c.roles[r.Namespace+"/"+r.Name] = r
		return nil
	case "RoleBinding":
		var rb rbacv1.RoleBinding
		if err := yaml.UnmarshalStrict(o.doc, &rb); err != nil {
			return fmt.Errorf("RoleBinding %s does not decode strictly: %w", o.Metadata.Name, err)
		}
		c.roleBindings[rb.Namespace+"/"+rb.Name] = rb
		return nil
	case "NetworkPolicy":
		c.networkPolicy = new(networkingv1.NetworkPolicy)
		into = c.networkPolicy
	case "PodDisruptionBudget":
		c.pdb = new(policyv1.PodDisruptionBudget)
		into = c.pdb
	case "ServiceMonitor":
		c.serviceMonitor = new(monitoringv1.ServiceMonitor)
		into = c.serviceMonitor
	case "PrometheusRule":
		c.prometheusRule = new(monitoringv1.PrometheusRule)
		into = c.prometheusRule
	case "ScrapeConfig":
		c.scrapeConfig = new(monitoringv1alpha1.ScrapeConfig)
		into = c.scrapeConfig
	case "Pod":
		c.testPod = new(corev1.Pod)
		into = c.testPod
	default:
		return fmt.Errorf("the chart renders a %s %s, which this test does not expect", o.Kind, o.Metadata.Name)
	}
	if err := yaml.UnmarshalStrict(o.doc, into); err != nil {
		return fmt.Errorf("%s %s does not decode strictly into %T: %w", o.Kind, o.Metadata.Name, into, err)
	}
	return nil
}

func (c chartObjects) kinds() []string {
	var ks []string
	for _, o := range c.all {
		ks = append(ks, o.Kind)
	}
	slices.Sort(ks)
	return ks
}

func TestChartVersionIsVERSION(t *testing.T) {
	var meta struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	data, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &meta); err != nil {
		t.Fatal(err)
	}
	version := releaseVersion(t)
	if meta.Version != version || meta.AppVersion != version {
		t.Errorf("Chart.yaml version %q, appVersion %q; VERSION says %q", meta.Version, meta.AppVersion, version)
	}
}

func releaseVersion(t *testing.T) string {
	t.Helper()
	v, err := os.ReadFile(filepath.Join(repoRoot, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(v))
}

// TestChartLint: `helm lint --strict`, with the default values and with
// every toggle on.
func TestChartLint(t *testing.T) {
	for name, values := range map[string]map[string]any{"defaults": nil, "every toggle on": allToggles(proxiesNamespace)} {
		for _, err := range chart.Lint(chartDir, values) {
			t.Errorf("%s: helm lint: %v", name, err)
		}
	}
}

// TestChartRenders: the default values give the exporter, its RBAC and its
// helm test Pod, and
// nothing of the Prometheus Operator (a cluster without its CRDs would
// refuse it); every toggle adds its object, in the release namespace (the
// headroom and placement Roles in the proxies'), with commonLabels on every
// object and the one releaseLabel on every monitoring object.
func TestChartRenders(t *testing.T) {
	def := renderChart(t, nil)
	want := []string{"ClusterRole", "ClusterRoleBinding", "ConfigMap", "Deployment", "Pod", "Service", "ServiceAccount"}
	if got := def.kinds(); !slices.Equal(got, want) {
		t.Errorf("default values render %v, want %v", got, want)
	}

	on := renderChart(t, allToggles(proxiesNamespace))
	want = []string{
		"ClusterRole", "ClusterRoleBinding", "ConfigMap", "ConfigMap", "Deployment", "NetworkPolicy", "Pod", "PodDisruptionBudget", "PrometheusRule",
		"Role", "Role", "Role", "RoleBinding", "RoleBinding", "RoleBinding", "ScrapeConfig", "Service", "ServiceAccount", "ServiceMonitor",
	}
	if got := on.kinds(); !slices.Equal(got, want) {
		t.Fatalf("every toggle on renders %v, want %v", got, want)
	}
	for _, o := range on.all {
		wantNS := chartNamespace
		switch {
		case o.Kind == "ClusterRole" || o.Kind == "ClusterRoleBinding":
			wantNS = ""
		case strings.HasSuffix(o.Metadata.Name, "-headroom") || strings.HasSuffix(o.Metadata.Name, "-placement"):
			wantNS = proxiesNamespace
		}
		if o.Metadata.Namespace != wantNS {
			t.Errorf("%s %s in namespace %q, want %q", o.Kind, o.Metadata.Name, o.Metadata.Namespace, wantNS)
		}
		if o.Metadata.Labels["team"] != "egress" {
			t.Errorf("%s %s labels %v lack commonLabels' team=egress", o.Kind, o.Metadata.Name, o.Metadata.Labels)
		}
		_, hasRelease := o.Metadata.Labels["release"]
		if monitoring := isMonitoringObject(o); hasRelease != monitoring || (monitoring && o.Metadata.Labels["release"] != releaseLabel) {
			t.Errorf("%s %s labels %v: release=%s wanted on monitoring objects only", o.Kind, o.Metadata.Name, o.Metadata.Labels, releaseLabel)
		}
	}
	for k, v := range on.deployment.Spec.Selector.MatchLabels {
		if k == "team" || k == "release" {
			t.Errorf("the Deployment's selector has %s=%s: commonLabels and releaseLabel must stay out of selectors", k, v)
		}
	}
}

// isMonitoringObject: the Prometheus Operator's objects and the dashboards'
// ConfigMap, which releaseLabel labels.
func isMonitoringObject(o object) bool {
	group, _, _ := strings.Cut(o.APIVersion, "/")
	return group == operatorGroup || o.Metadata.Labels["grafana_dashboard"] == "1"
}

func dashboardsConfigMap(t *testing.T, cms map[string]corev1.ConfigMap) corev1.ConfigMap {
	t.Helper()
	var found []corev1.ConfigMap
	for _, cm := range cms {
		if cm.Labels["grafana_dashboard"] == "1" {
			found = append(found, cm)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d ConfigMaps labelled grafana_dashboard=1, want 1", len(found))
	}
	return found[0]
}

// TestChartConfig: values.config is the ConfigMap's provider_health.yml,
// which --config.file names; its checksum on the Pod template changes with
// it, so a new configuration rolls the Pod.
func TestChartConfig(t *testing.T) {
	def := renderChart(t, nil)
	ctr := def.deployment.Spec.Template.Spec.Containers[0]
	var cm *corev1.ConfigMap
	for _, v := range def.deployment.Spec.Template.Spec.Volumes {
		if v.ConfigMap != nil {
			if c, ok := def.configMaps[v.ConfigMap.Name]; ok {
				cm = &c
			}
		}
	}
	if cm == nil {
		t.Fatalf("the Deployment mounts none of the ConfigMaps %v", def.configMaps)
	}
	if !slices.Contains(ctr.Args, "--config.file=/etc/provider_health/config/provider_health.yml") {
		t.Errorf("args %q do not name the mounted provider_health.yml", ctr.Args)
	}
	var values struct {
		Config map[string]any `json:"config"`
	}
	data, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &values); err != nil {
		t.Fatal(err)
	}
	var rendered map[string]any
	if err := yaml.UnmarshalStrict([]byte(cm.Data["provider_health.yml"]), &rendered); err != nil {
		t.Fatalf("provider_health.yml: %v", err)
	}
	if !reflect.DeepEqual(rendered, values.Config) {
		t.Errorf("provider_health.yml = %v, want values.config %v", rendered, values.Config)
	}

	changed := renderChart(t, map[string]any{"config": map[string]any{"defaults": map[string]any{"timeout": "9s"}}})
	sum := def.deployment.Spec.Template.Annotations["checksum/config"]
	if sum == "" || changed.deployment.Spec.Template.Annotations["checksum/config"] == sum {
		t.Errorf("checksum/config %q did not change with the configuration", sum)
	}
}

// TestChartSecret: the Secret is named, never rendered; with a name it is
// mounted where the configuration's files are.
func TestChartSecret(t *testing.T) {
	for _, vs := range []map[string]any{nil, allToggles(proxiesNamespace)} {
		c := renderChart(t, vs)
		var secretVolumes []string
		for _, v := range c.deployment.Spec.Template.Spec.Volumes {
			if v.Secret != nil {
				secretVolumes = append(secretVolumes, v.Secret.SecretName)
			}
		}
		want := []string(nil)
		if vs != nil {
			want = []string{"provider-health-exporter-secrets", "provider-health-exporter-web", "ca-bundle"}
		}
		if !slices.Equal(secretVolumes, want) {
			t.Errorf("values %v: Secret volumes %v, want %v", vs, secretVolumes, want)
		}
	}
}

// TestChartDeploymentMatchesKustomize: with default values, the chart's
// container is the kustomize base's: image, args, probes, ports,
// resources and both securityContexts.
func TestChartDeploymentMatchesKustomize(t *testing.T) {
	var kd appsv1.Deployment
	strict(t, render(t, base)["Deployment"], &kd)
	hd := renderChart(t, nil).deployment

	ks, hs := kd.Spec.Template.Spec, hd.Spec.Template.Spec
	if !reflect.DeepEqual(ks.SecurityContext, hs.SecurityContext) {
		t.Errorf("pod securityContext: kustomize %+v, chart %+v", ks.SecurityContext, hs.SecurityContext)
	}
	if len(ks.Containers) != 1 || len(hs.Containers) != 1 {
		t.Fatalf("containers: kustomize %d, chart %d; want 1 each", len(ks.Containers), len(hs.Containers))
	}
	kc, hc := ks.Containers[0], hs.Containers[0]
	for _, f := range []struct {
		what string
		k, h any
	}{
		{"image", kc.Image, hc.Image},
		{"args", kc.Args, hc.Args},
		{"ports", kc.Ports, hc.Ports},
		{"livenessProbe", kc.LivenessProbe, hc.LivenessProbe},
		{"readinessProbe", kc.ReadinessProbe, hc.ReadinessProbe},
		{"resources", kc.Resources, hc.Resources},
		{"env", kc.Env, hc.Env},
		{"securityContext", kc.SecurityContext, hc.SecurityContext},
		{"automountServiceAccountToken", ks.AutomountServiceAccountToken, hs.AutomountServiceAccountToken},
	} {
		if !reflect.DeepEqual(f.k, f.h) {
			t.Errorf("%s: kustomize %s, chart %s", f.what, dump(f.k), dump(f.h))
		}
	}
}

func dump(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// TestChartRBAC: the kubernetes provider's ClusterRole is the kustomize
// base's (list pods, nothing else), bound to the Pod's ServiceAccount; the
// kube-prometheus Role lets monitoring/prometheus-k8s discover the Service.
func TestChartRBAC(t *testing.T) {
	var kr rbacv1.ClusterRole
	strict(t, render(t, base)["ClusterRole"], &kr)
	c := renderChart(t, allToggles(proxiesNamespace))
	if !reflect.DeepEqual(c.clusterRole.Rules, kr.Rules) {
		t.Errorf("ClusterRole rules: chart %s, kustomize %s", dump(c.clusterRole.Rules), dump(kr.Rules))
	}
	b := c.clusterRoleBinding
	sa := c.deployment.Spec.Template.Spec.ServiceAccountName
	if b.RoleRef.Name != c.clusterRole.Name || len(b.Subjects) != 1 || b.Subjects[0].Name != sa || b.Subjects[0].Namespace != chartNamespace || c.serviceAccount.Name != sa {
		t.Errorf("ClusterRoleBinding %s binds %s to %s; the Pod runs as %s/%s", b.Name, b.RoleRef.Name, dump(b.Subjects), chartNamespace, sa)
	}
	name := c.service.Namespace + "/" + c.deployment.Name + "-prometheus"
	checkKubePrometheusRBAC(t, c.roles[name], c.roleBindings[name], c.service.Namespace)
}

// checkKubePrometheusRBAC: the Role grants get, list and watch of what the
// operator's Service discovery reads, in the Service's namespace, and the
// binding gives it to kube-prometheus's Prometheus.
func checkKubePrometheusRBAC(t *testing.T, role rbacv1.Role, rb rbacv1.RoleBinding, ns string) {
	t.Helper()
	granted := map[string]bool{}
	for _, r := range role.Rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					granted[v+" "+res+"."+g] = true
				}
			}
		}
	}
	for _, res := range []string{"services.", "endpoints.", "pods.", "endpointslices.discovery.k8s.io"} {
		for _, v := range []string{"get", "list", "watch"} {
			if !granted[v+" "+res] {
				t.Errorf("Role %s does not grant %s %s", role.Name, v, res)
			}
		}
	}
	if len(granted) != 12 {
		t.Errorf("Role %s grants %d permissions, want exactly the 12 of discovery: %v", role.Name, len(granted), granted)
	}
	if role.Namespace != ns || rb.Namespace != ns {
		t.Errorf("Role in %q, RoleBinding in %q; the Service is in %q", role.Namespace, rb.Namespace, ns)
	}
	want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "prometheus-k8s", Namespace: "monitoring"}}
	if rb.RoleRef.Kind != "Role" || rb.RoleRef.Name != role.Name || !reflect.DeepEqual(rb.Subjects, want) {
		t.Errorf("RoleBinding %s binds %s %s to %s, want Role %s to %s", rb.Name, rb.RoleRef.Kind, rb.RoleRef.Name, dump(rb.Subjects), role.Name, dump(want))
	}
}

// TestChartPrometheusRule: the chart's rules are the mixin's, group for
// group (files/alerts.yaml is a copy `make mixin` writes; this catches a
// template that drops or reorders what it reads).
func TestChartPrometheusRule(t *testing.T) {
	c := renderChart(t, allToggles(proxiesNamespace))
	var mixin monitoringv1.PrometheusRuleSpec
	data, err := os.ReadFile(filepath.Join(repoRoot, "mixin", "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, &mixin); err != nil {
		t.Fatalf("mixin/alerts.yaml: %v", err)
	}
	if len(mixin.Groups) == 0 {
		t.Fatal("mixin/alerts.yaml has no groups")
	}
	if !reflect.DeepEqual(c.prometheusRule.Spec, mixin) {
		t.Errorf("the chart's PrometheusRule differs from mixin/alerts.yaml (run make mixin):\nchart %s\nmixin %s", dump(c.prometheusRule.Spec), dump(mixin))
	}
}

// TestChartDashboards: the grafana_dashboard ConfigMap holds every
// dashboard of mixin/dashboards_out, as the same JSON.
func TestChartDashboards(t *testing.T) {
	checkDashboards(t, dashboardsConfigMap(t, renderChart(t, allToggles(proxiesNamespace)).configMaps))
}

func checkDashboards(t *testing.T, cm corev1.ConfigMap) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot, "mixin", "dashboards_out", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 || len(files) != len(cm.Data) {
		t.Errorf("ConfigMap %s has %d dashboards, mixin/dashboards_out %d", cm.Name, len(cm.Data), len(files))
	}
	for _, f := range files {
		text, ok := cm.Data[filepath.Base(f)]
		if !ok {
			t.Errorf("ConfigMap %s lacks %s", cm.Name, filepath.Base(f))
			continue
		}
		want, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var a, b any
		if err := json.Unmarshal([]byte(text), &a); err != nil {
			t.Fatalf("ConfigMap %s, %s: %v", cm.Name, filepath.Base(f), err)
		}
		if err := json.Unmarshal(want, &b); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Errorf("ConfigMap %s: %s differs from mixin/dashboards_out (run make mixin)", cm.Name, filepath.Base(f))
		}
	}
}

// TestChartScraping: the ServiceMonitor selects the chart's Service and
// gives its series the job the alerts select; the ScrapeConfig asks the
// Service's /sd; with the ScrapeConfig on, the ServiceMonitor scrapes only
// the exporter's own metrics so that no provider is checked twice.
func TestChartScraping(t *testing.T) {
	for _, sdOn := range []bool{false, true} {
		vs := allToggles(proxiesNamespace)
		vs["scrapeConfig"].(map[string]any)["enabled"] = sdOn
		c := renderChart(t, vs)
		sm := *c.serviceMonitor
		for k, v := range sm.Spec.Selector.MatchLabels {
			if c.service.Labels[k] != v {
				t.Errorf("ServiceMonitor selector %s=%s does not match the Service's labels %v", k, v, c.service.Labels)
			}
		}
		if !slices.Equal(sm.Spec.NamespaceSelector.MatchNames, []string{c.service.Namespace}) {
			t.Errorf("ServiceMonitor namespaceSelector %v, want the Service's namespace %s", sm.Spec.NamespaceSelector.MatchNames, c.service.Namespace)
		}
		if job := operatorJob(t, sm, c.service); job != "provider-health" {
			t.Errorf("ServiceMonitor series get job=%q; the mixin's alerts select provider-health", job)
		}
		params := sm.Spec.Endpoints[0].Params
		if sdOn != slices.Equal(params["collect[]"], []string{"exporter"}) {
			t.Errorf("scrapeConfig.enabled=%v: ServiceMonitor params %v", sdOn, params)
		}
		if !sdOn {
			if c.scrapeConfig != nil {
				t.Error("scrapeConfig.enabled=false renders a ScrapeConfig")
			}
			continue
		}
		sc := c.scrapeConfig.Spec
		want := fmt.Sprintf("http://%s.%s.svc:%d/sd", c.service.Name, c.service.Namespace, c.service.Spec.Ports[0].Port)
		if len(sc.HTTPSDConfigs) != 1 || string(sc.HTTPSDConfigs[0].URL) != want {
			t.Errorf("ScrapeConfig httpSDConfigs %s, want one with url %s", dump(sc.HTTPSDConfigs), want)
		}
		jobSet := false
		for _, r := range sc.RelabelConfigs {
			jobSet = jobSet || (r.TargetLabel == "job" && r.Replacement != nil && *r.Replacement == "provider-health")
		}
		if !jobSet {
			t.Errorf("ScrapeConfig relabelings %s do not set job=provider-health", dump(sc.RelabelConfigs))
		}
		var kustomized monitoringv1alpha1.ScrapeConfig
		strict(t, render(t, base, operator)["ScrapeConfig"], &kustomized)
		if got, want := dump(sc.RelabelConfigs), dump(kustomized.Spec.RelabelConfigs); got != want {
			t.Errorf("the chart's ScrapeConfig relabels\n%s\nthe kustomize component's\n%s", got, want)
		}
	}
}
