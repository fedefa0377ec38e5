package validate

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/egress-proxies/provider_health_exporter/deploy/kubernetes/validate/chart"
)

// TestChartSchemaRejectsMistakes: values.schema.json turns a typo in a key,
// a value of the wrong type or out of its set into an error of helm lint
// --strict, of helm template and of helm install, naming the value; the
// chart's own defaults and every toggle pass it.
func TestChartSchemaRejectsMistakes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values map[string]any
		want   string // in the error
	}{
		{"a typo in a key", map[string]any{"serviceMonitor": map[string]any{"enabeld": true}}, "enabeld"},
		{"an unknown top-level key", map[string]any{"replicaCount": 2}, "replicaCount"},
		{"a string for a number", map[string]any{"replicas": "two"}, "replicas"},
		{"a number for a string", map[string]any{"image": map[string]any{"tag": 1.2}}, "tag"},
		{"a list for a map", map[string]any{"env": []any{"HTTPS_PROXY=http://proxy:3128"}}, "env"},
		{"a scheme Prometheus does not know", map[string]any{"serviceMonitor": map[string]any{"scheme": "tcp"}}, "scheme"},
		{"a digest that is not one", map[string]any{"image": map[string]any{"digest": "latest"}}, "digest"},
		{"an empty egress port list, which would allow every port", map[string]any{"networkPolicy": map[string]any{"egress": map[string]any{"ssh": map[string]any{"ports": []any{}}}}}, "ports"},
		{"a field TLS of a ScrapeConfig cannot take", map[string]any{"serviceMonitor": map[string]any{"tlsConfig": map[string]any{"caFile": "/etc/ca.pem"}}}, "caFile"},
		{"a duration Prometheus cannot read", map[string]any{"scrapeConfig": map[string]any{"interval": "30 seconds"}}, "interval"},
		{"an unknown key of a customRule", map[string]any{"prometheusRule": map[string]any{"customRules": map[string]any{"ProviderNotReady": map[string]any{"severty": "critical"}}}}, "severty"},
		{"a key of the exporter's configuration at the wrong level", map[string]any{"config": map[string]any{"timeout": "10s"}}, "timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lint := chart.Lint(chartDir, tc.values)
			if len(lint) == 0 || !strings.Contains(errorsText(lint), tc.want) {
				t.Errorf("helm lint --strict: %v; want an error naming %q", lint, tc.want)
			}
			if _, err := chart.Template(t.Context(), chartDir, chartRelease, chartNamespace, tc.values); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("helm template: %v; want an error naming %q", err, tc.want)
			}
			if _, _, err := chart.Install(t.Context(), chartDir, chartRelease, chartNamespace, tc.values); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("helm install: %v; want an error naming %q", err, tc.want)
			}
		})
	}
	for name, values := range map[string]map[string]any{"defaults": nil, "every toggle on": allToggles(proxiesNamespace), "releaseLabel true": {"releaseLabel": true}} {
		if _, _, err := chart.Install(t.Context(), chartDir, chartRelease, chartNamespace, values); err != nil {
			t.Errorf("%s: helm install: %v", name, err)
		}
	}
}

func errorsText(errs []error) string {
	var b strings.Builder
	for _, e := range errs {
		b.WriteString(e.Error())
		b.WriteByte('\n')
	}
	return b.String()
}

// chartValues reads the chart's values.yaml.
func chartValues(t *testing.T) map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := yaml.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// schemaNode is the part of values.schema.json these tests read.
type schemaNode struct {
	Title                string                 `json:"title"`
	Description          string                 `json:"description"`
	Properties           map[string]*schemaNode `json:"properties"`
	AdditionalProperties any                    `json:"additionalProperties"`
}

// isGroup: a node whose properties are documented values of their own, as
// chart.ValuesTable reads them (anything else is one value: the user's
// keys, a Kubernetes object, the exporter's configuration, whose schema
// has a title: a document of its own).
func (s *schemaNode) isGroup() bool {
	if s.AdditionalProperties != false || len(s.Properties) == 0 || s.Title != "" {
		return false
	}
	for _, p := range s.Properties {
		if p.Description == "" {
			return false
		}
	}
	return true
}

func chartSchema(t *testing.T) *schemaNode {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s schemaNode
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	return &s
}

// TestChartSchemaMatchesValues: every value of values.yaml is in the
// schema, with a description, and every documented value of the schema is
// in values.yaml, so neither can gain a value the other does not describe.
func TestChartSchemaMatchesValues(t *testing.T) {
	var walk func(path string, v map[string]any, s *schemaNode)
	walk = func(path string, v map[string]any, s *schemaNode) {
		for _, k := range slices.Sorted(maps.Keys(v)) {
			sub, ok := s.Properties[k]
			switch {
			case !ok:
				t.Errorf("values.yaml has %s%s, values.schema.json does not", path, k)
			case sub.Description == "":
				t.Errorf("values.schema.json: %s%s has no description", path, k)
			case sub.isGroup():
				m, _ := v[k].(map[string]any)
				walk(path+k+".", m, sub)
			}
		}
		for _, k := range slices.Sorted(maps.Keys(s.Properties)) {
			if _, ok := v[k]; !ok {
				t.Errorf("values.schema.json has %s%s, values.yaml does not", path, k)
			}
		}
	}
	s := chartSchema(t)
	if s.AdditionalProperties != false {
		t.Error("values.schema.json allows unknown top-level keys")
	}
	walk("", chartValues(t), s)
}

// TestChartReadmeValuesTable: the chart's README has every value of
// values.yaml in its table, with the schema's description and the default,
// exactly as chart.ValuesTable writes it (go -C deploy/kubernetes/validate
// run ./chart-readme rewrites it).
func TestChartReadmeValuesTable(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(chartDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := chart.ValuesTable(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := chart.ReadmeTable(string(readme))
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("the README's values table is stale: run go -C deploy/kubernetes/validate run ./chart-readme\nREADME:\n%s\nwant:\n%s", got, want)
	}
	for _, row := range []string{"| `image.digest` |", "| `networkPolicy.egress.ssh.ports` |", "| `prometheusRule.customRules` |", "| `releaseLabel` |", "| `env` |"} {
		if !strings.Contains(want, row) {
			t.Errorf("the values table has no row %s", row)
		}
	}
}

// TestChartImage: registry, repository, tag and digest make the image as in
// the prometheus-community charts: a digest pins it and replaces the tag,
// global.imageRegistry overrides the registry, the tag defaults to
// appVersion.
func TestChartImage(t *testing.T) {
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	version := releaseVersion(t)
	for _, tc := range []struct {
		values map[string]any
		want   string
	}{
		{nil, "ghcr.io/egress-proxies/provider_health_exporter:" + version},
		{map[string]any{"image": map[string]any{"tag": "0.2.0-rc.1"}}, "ghcr.io/egress-proxies/provider_health_exporter:0.2.0-rc.1"},
		{map[string]any{"image": map[string]any{"registry": "registry.example:5000", "repository": "ops/phe"}}, "registry.example:5000/ops/phe:" + version},
		{map[string]any{"image": map[string]any{"digest": digest, "tag": "ignored"}}, "ghcr.io/egress-proxies/provider_health_exporter@" + digest},
		{map[string]any{"global": map[string]any{"imageRegistry": "mirror.example"}}, "mirror.example/egress-proxies/provider_health_exporter:" + version},
		{map[string]any{"image": map[string]any{"registry": "", "repository": "phe"}}, "phe:" + version},
	} {
		if got := renderChart(t, tc.values).deployment.Spec.Template.Spec.Containers[0].Image; got != tc.want {
			t.Errorf("values %v: image %q, want %q", tc.values, got, tc.want)
		}
	}
}

// memoryLimitEnv is the container's memory limit from the downward API,
// from which the exporter sets the Go runtime's soft limit.
var memoryLimitEnv = corev1.EnvVar{
	Name: "PROVIDER_HEALTH_MEMORY_LIMIT",
	ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{
		ContainerName: "exporter", Resource: "limits.memory",
	}},
}

// TestChartPodKnobs: env (sorted by name, after the memory limit),
// extraEnv, extraVolumes and extraVolumeMounts, webConfig's Secret and flag,
// priorityClassName and topologySpreadConstraints reach the Pod as given.
func TestChartPodKnobs(t *testing.T) {
	def := renderChart(t, nil).deployment.Spec.Template.Spec
	if env := def.Containers[0].Env; len(env) != 1 || env[0].Name != memoryLimitEnv.Name || env[0].ValueFrom.ResourceFieldRef.Resource != "limits.memory" ||
		env[0].ValueFrom.ResourceFieldRef.ContainerName != def.Containers[0].Name || env[0].ValueFrom.ResourceFieldRef.Divisor.String() != "1" {
		t.Errorf("default env %s, want only %s from limits.memory of the container, in bytes", dump(env), memoryLimitEnv.Name)
	}
	if def.PriorityClassName != "" || def.TopologySpreadConstraints != nil {
		t.Errorf("defaults set priorityClassName %q or topologySpreadConstraints %v", def.PriorityClassName, def.TopologySpreadConstraints)
	}

	vs := allToggles(proxiesNamespace)
	vs["env"] = map[string]any{"NO_PROXY": ".svc", "HTTPS_PROXY": "http://proxy:3128", "GOMEMLIMIT": "100MiB", "GOGC": 50}
	spec := renderChart(t, vs).deployment.Spec.Template.Spec
	ctr := spec.Containers[0]
	var names []string
	for _, e := range ctr.Env {
		names = append(names, e.Name)
	}
	if want := []string{memoryLimitEnv.Name, "GOGC", "GOMEMLIMIT", "HTTPS_PROXY", "NO_PROXY", "PROXY_TOKEN"}; !slices.Equal(names, want) {
		t.Errorf("env %v, want %v", names, want)
	}
	for _, e := range ctr.Env {
		if e.Name == "GOGC" && e.Value != "50" {
			t.Errorf("GOGC=%q, want the number 50 as a string", e.Value)
		}
		if e.Name == "PROXY_TOKEN" && (e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Key != "token") {
			t.Errorf("extraEnv PROXY_TOKEN = %s, want its valueFrom", dump(e))
		}
	}
	mounts := map[string]string{}
	for _, m := range ctr.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	volumes := map[string]bool{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = true
	}
	for name, path := range map[string]string{"ca-bundle": "/etc/ssl/extra", "web": "/etc/provider_health/web", "secrets": "/etc/provider_health/secrets", "config": "/etc/provider_health/config"} {
		if mounts[name] != path || !volumes[name] {
			t.Errorf("volume %s: mounted at %q (volume present: %v), want %s", name, mounts[name], volumes[name], path)
		}
	}
	if !slices.Contains(ctr.Args, "--web.config.file=/etc/provider_health/web/web-config.yml") {
		t.Errorf("args %v: webConfig.existingSecret is mounted but --web.config.file does not name it", ctr.Args)
	}
	if spec.PriorityClassName != "provider-health" || len(spec.TopologySpreadConstraints) != 1 || spec.TopologySpreadConstraints[0].TopologyKey != "topology.kubernetes.io/zone" {
		t.Errorf("priorityClassName %q, topologySpreadConstraints %s", spec.PriorityClassName, dump(spec.TopologySpreadConstraints))
	}
}

// TestChartPodDisruptionBudget: none by default; with a value, one that
// selects exactly the Deployment's Pods.
func TestChartPodDisruptionBudget(t *testing.T) {
	if renderChart(t, nil).pdb != nil {
		t.Error("default values render a PodDisruptionBudget")
	}
	c := renderChart(t, map[string]any{"replicas": 2, "podDisruptionBudget": map[string]any{"minAvailable": 1}})
	if c.pdb == nil {
		t.Fatal("podDisruptionBudget.minAvailable renders no PodDisruptionBudget")
	}
	if c.pdb.Spec.MinAvailable == nil || *c.pdb.Spec.MinAvailable != intstr.FromInt32(1) || c.pdb.Spec.MaxUnavailable != nil {
		t.Errorf("PodDisruptionBudget spec %s, want minAvailable 1", dump(c.pdb.Spec))
	}
	if !maps.Equal(c.pdb.Spec.Selector.MatchLabels, c.deployment.Spec.Selector.MatchLabels) {
		t.Errorf("PodDisruptionBudget selects %v, the Deployment %v", c.pdb.Spec.Selector.MatchLabels, c.deployment.Spec.Selector.MatchLabels)
	}
}

// TestChartNetworkPolicy: the Pods of the Deployment get ingress on the
// exporter's port from Prometheus only, and egress to DNS (UDP and TCP),
// the API servers, the Compute API and SSH only; each egress rule can be
// turned off or narrowed to peers.
func TestChartNetworkPolicy(t *testing.T) {
	if renderChart(t, nil).networkPolicy != nil {
		t.Error("default values render a NetworkPolicy")
	}
	c := renderChart(t, map[string]any{"networkPolicy": map[string]any{"enabled": true}})
	np := c.networkPolicy
	if np == nil {
		t.Fatal("networkPolicy.enabled renders no NetworkPolicy")
	}
	if !maps.Equal(np.Spec.PodSelector.MatchLabels, c.deployment.Spec.Selector.MatchLabels) {
		t.Errorf("NetworkPolicy selects %v, the Deployment's Pods are %v", np.Spec.PodSelector.MatchLabels, c.deployment.Spec.Selector.MatchLabels)
	}
	if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}) {
		t.Errorf("policyTypes %v, want Ingress and Egress", np.Spec.PolicyTypes)
	}
	if len(np.Spec.Ingress) != 1 {
		t.Fatalf("ingress rules %s, want one", dump(np.Spec.Ingress))
	}
	in := np.Spec.Ingress[0]
	if len(in.Ports) != 1 || in.Ports[0].Port.String() != c.deployment.Spec.Template.Spec.Containers[0].Ports[0].Name {
		t.Errorf("ingress ports %s, want the exporter's port only", dump(in.Ports))
	}
	if len(in.From) != 1 || in.From[0].PodSelector.MatchLabels["app.kubernetes.io/name"] != "prometheus" || in.From[0].NamespaceSelector == nil {
		t.Errorf("ingress from %s, want Prometheus's Pods in any namespace", dump(in.From))
	}
	if got, want := egressPorts(np), []string{"TCP/22", "TCP/443", "TCP/443", "TCP/53", "TCP/6443", "UDP/53"}; !slices.Equal(got, want) {
		t.Errorf("egress to %v, want %v", got, want)
	}

	narrowed := renderChart(t, map[string]any{"networkPolicy": map[string]any{"enabled": true, "egress": map[string]any{
		"compute": map[string]any{"enabled": false},
		"ssh":     map[string]any{"ports": []any{2222}, "to": []any{map[string]any{"ipBlock": map[string]any{"cidr": "192.0.2.0/24"}}}},
	}, "extraEgress": []any{map[string]any{"ports": []any{map[string]any{"port": 3128, "protocol": "TCP"}}}}}}).networkPolicy
	if got, want := egressPorts(narrowed), []string{"TCP/2222", "TCP/3128", "TCP/443", "TCP/53", "TCP/6443", "UDP/53"}; !slices.Equal(got, want) {
		t.Errorf("narrowed egress to %v, want %v", got, want)
	}
	for _, r := range narrowed.Spec.Egress {
		if len(r.Ports) == 1 && r.Ports[0].Port.IntValue() == 2222 && (len(r.To) != 1 || r.To[0].IPBlock == nil || r.To[0].IPBlock.CIDR != "192.0.2.0/24") {
			t.Errorf("ssh egress to %s, want the ipBlock 192.0.2.0/24", dump(r.To))
		}
	}
}

func egressPorts(np *networkingv1.NetworkPolicy) []string {
	var out []string
	for _, r := range np.Spec.Egress {
		for _, p := range r.Ports {
			out = append(out, string(*p.Protocol)+"/"+p.Port.String())
		}
	}
	slices.Sort(out)
	return out
}

// TestChartHeadroomAndPlacementRoles: off by default; on, a Role and its
// binding to the exporter's ServiceAccount in each proxies' namespace:
// with the rules of the kustomize components: components/headroom (list
// ResourceQuotas) and components/placement (create Pods, which the
// pod_template dry-run needs).
func TestChartHeadroomAndPlacementRoles(t *testing.T) {
	if rs := renderChart(t, nil).roles; len(rs) != 0 {
		t.Errorf("default values render Roles %v", slices.Collect(maps.Keys(rs)))
	}
	var headroom, placement rbacv1.Role
	strict(t, render(t, base, "../components/headroom")["Role"], &headroom)
	strict(t, render(t, base, "../components/placement")["Role"], &placement)

	c := renderChart(t, map[string]any{"rbac": map[string]any{
		"headroom":  map[string]any{"enabled": true, "namespaces": []any{"proxies-a", "proxies-b"}},
		"placement": map[string]any{"enabled": true, "namespaces": []any{"proxies-a"}},
	}})
	sa := c.deployment.Spec.Template.Spec.ServiceAccountName
	want := map[string][]rbacv1.PolicyRule{
		"proxies-a/headroom":  headroom.Rules,
		"proxies-b/headroom":  headroom.Rules,
		"proxies-a/placement": placement.Rules,
	}
	got := map[string][]rbacv1.PolicyRule{}
	for _, r := range c.roles {
		_, kind, _ := strings.Cut(strings.TrimPrefix(r.Name, c.deployment.Name), "-")
		got[r.Namespace+"/"+kind] = r.Rules
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Roles %s, want %s", dump(got), dump(want))
	}
	if len(c.roleBindings) != len(want) {
		t.Errorf("%d RoleBindings for %d Roles", len(c.roleBindings), len(want))
	}
	for _, rb := range c.roleBindings {
		role, ok := c.roles[rb.Namespace+"/"+rb.RoleRef.Name]
		if !ok || role.Namespace != rb.Namespace || rb.RoleRef.Kind != "Role" {
			t.Errorf("RoleBinding %s/%s refers to %s %s, not a Role of its namespace", rb.Namespace, rb.Name, rb.RoleRef.Kind, rb.RoleRef.Name)
		}
		wantSubject := []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: chartNamespace}}
		if !reflect.DeepEqual(rb.Subjects, wantSubject) {
			t.Errorf("RoleBinding %s/%s binds %s, want the exporter's ServiceAccount %s/%s", rb.Namespace, rb.Name, dump(rb.Subjects), chartNamespace, sa)
		}
	}
}

// TestChartReleaseLabel: one value labels every monitoring object for
// kube-prometheus-stack: a string is that release's name, true this
// release's name (the prometheus-community charts' releaseLabel), false
// (the default) none; additionalLabels still add to it.
func TestChartReleaseLabel(t *testing.T) {
	toggles := func(release any) map[string]any {
		vs := allToggles(proxiesNamespace)
		vs["releaseLabel"] = release
		vs["serviceMonitor"] = map[string]any{"enabled": true, "additionalLabels": map[string]any{"prometheus": "main"}}
		return vs
	}
	for _, tc := range []struct {
		release any
		want    string
	}{{"kps", "kps"}, {true, chartRelease}, {false, ""}} {
		c := renderChart(t, toggles(tc.release))
		n := 0
		for _, o := range c.all {
			if !isMonitoringObject(o) {
				continue
			}
			n++
			if got := o.Metadata.Labels["release"]; got != tc.want {
				t.Errorf("releaseLabel %v: %s %s has release=%q, want %q", tc.release, o.Kind, o.Metadata.Name, got, tc.want)
			}
		}
		if n != 4 {
			t.Errorf("releaseLabel %v: %d monitoring objects, want the ServiceMonitor, PrometheusRule, ScrapeConfig and dashboards", tc.release, n)
		}
		if c.serviceMonitor.Labels["prometheus"] != "main" {
			t.Errorf("releaseLabel %v: the ServiceMonitor lost additionalLabels: %v", tc.release, c.serviceMonitor.Labels)
		}
	}
}

// TestChartPrometheusRuleFromValues: prometheusRule.disabled leaves an
// alert out, customRules replaces an alert's severity and for and nothing
// else of it, rules adds a group; an alert name the mixin does not have is
// an error naming it.
func TestChartPrometheusRuleFromValues(t *testing.T) {
	mixin := map[string]monitoringv1.Rule{}
	for _, g := range renderChart(t, allToggles(proxiesNamespace)).prometheusRule.Spec.Groups {
		for _, r := range g.Rules {
			mixin[r.Alert] = r
		}
	}
	added := map[string]any{"alert": "ProxyFleetEmpty", "expr": `sum(egress_proxies_running) == 0`, "for": "10m", "labels": map[string]any{"severity": "critical"}}
	vs := allToggles(proxiesNamespace)
	vs["prometheusRule"] = map[string]any{
		"enabled":     true,
		"disabled":    map[string]any{"KVMConnectionFlapping": true, "ProviderCheckNearTimeout": false},
		"customRules": map[string]any{"ProviderNotReady": map[string]any{"severity": "critical", "for": "10m"}, "KVMPoolLowSpace": map[string]any{"for": "1h"}},
		"rules":       []any{added},
	}
	got := map[string]monitoringv1.Rule{}
	var groups []string
	for _, g := range renderChart(t, vs).prometheusRule.Spec.Groups {
		groups = append(groups, g.Name)
		for _, r := range g.Rules {
			got[r.Alert] = r
		}
	}
	if _, ok := got["KVMConnectionFlapping"]; ok {
		t.Error("disabled KVMConnectionFlapping is still rendered")
	}
	if _, ok := got["ProviderCheckNearTimeout"]; !ok {
		t.Error("ProviderCheckNearTimeout: false in disabled left it out")
	}
	for name, want := range map[string]struct{ severity, dur string }{
		"ProviderNotReady": {"critical", "10m"},
		"KVMPoolLowSpace":  {mixin["KVMPoolLowSpace"].Labels["severity"], "1h"},
	} {
		r := got[name]
		if r.Labels["severity"] != want.severity || r.For == nil || string(*r.For) != want.dur {
			t.Errorf("%s: severity %q, for %v; want %s and %s", name, r.Labels["severity"], r.For, want.severity, want.dur)
		}
		m := mixin[name]
		if r.Expr != m.Expr || !maps.Equal(r.Annotations, m.Annotations) {
			t.Errorf("%s: the override changed more than severity and for", name)
		}
	}
	if r, ok := got["ProxyFleetEmpty"]; !ok || r.Expr.String() != added["expr"] {
		t.Errorf("the added rule is missing or changed: %s", dump(r))
	}
	if len(got) != len(mixin) {
		t.Errorf("%d rules, want the mixin's %d less one disabled plus one added", len(got), len(mixin))
	}
	if last := groups[len(groups)-1]; last != chartRelease+"-provider-health-exporter-additional" {
		t.Errorf("groups %v: the added rules are not in a group of their own", groups)
	}

	for _, what := range []string{"disabled", "customRules"} {
		vs := map[string]any{"prometheusRule": map[string]any{"enabled": true, what: map[string]any{"ProviderNotRaedy": map[string]any{}}}}
		if what == "disabled" {
			vs["prometheusRule"].(map[string]any)[what] = map[string]any{"ProviderNotRaedy": true}
		}
		_, err := chart.Template(t.Context(), chartDir, chartRelease, chartNamespace, vs)
		if err == nil || !strings.Contains(err.Error(), "prometheusRule."+what+".ProviderNotRaedy: no alert of the mixin has that name") {
			t.Errorf("%s with a misspelt alert name: %v", what, err)
		}
	}
}

// TestChartSecuredScraping: with TLS and basic auth, the ServiceMonitor,
// the ScrapeConfig and its /sd request all get the scheme, the TLS settings
// (serverName the Service's name, which the certificate must carry) and
// the credentials of the one set of serviceMonitor values; every object
// still decodes strictly (renderChart); authorization replaces basicAuth
// alike.
func TestChartSecuredScraping(t *testing.T) {
	vs := securedValues()
	c := renderChart(t, vs)
	serverName := c.service.Name + "." + c.service.Namespace + ".svc"
	ep := c.serviceMonitor.Spec.Endpoints[0]
	sc := c.scrapeConfig.Spec
	if ep.Scheme == nil || ep.Scheme.String() != "https" || sc.Scheme == nil || sc.Scheme.String() != "https" {
		t.Errorf("scheme: ServiceMonitor %v, ScrapeConfig %v; want https", ep.Scheme, sc.Scheme)
	}
	if len(sc.HTTPSDConfigs) != 1 || !strings.HasPrefix(string(sc.HTTPSDConfigs[0].URL), "https://"+serverName+":") {
		t.Fatalf("ScrapeConfig discovers from %s, want https://%s", dump(sc.HTTPSDConfigs), serverName)
	}
	sd := sc.HTTPSDConfigs[0]
	wantTLS := monitoringv1.SafeTLSConfig{
		CA:         monitoringv1.SecretOrConfigMap{Secret: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "phe-scrape"}, Key: "ca.crt"}},
		ServerName: &serverName,
	}
	wantAuth := monitoringv1.BasicAuth{
		Username: corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "phe-scrape"}, Key: "username"},
		Password: corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "phe-scrape"}, Key: "password"},
	}
	for what, tls := range map[string]*monitoringv1.SafeTLSConfig{"ScrapeConfig": sc.TLSConfig, "its /sd": sd.TLSConfig} {
		if tls == nil || !reflect.DeepEqual(*tls, wantTLS) {
			t.Errorf("%s tlsConfig %s, want %s", what, dump(tls), dump(wantTLS))
		}
	}
	if ep.TLSConfig == nil || !reflect.DeepEqual(ep.TLSConfig.SafeTLSConfig, wantTLS) {
		t.Errorf("ServiceMonitor tlsConfig %s, want %s", dump(ep.TLSConfig), dump(wantTLS))
	}
	for what, auth := range map[string]*monitoringv1.BasicAuth{"ServiceMonitor": ep.BasicAuth, "ScrapeConfig": sc.BasicAuth, "its /sd": sd.BasicAuth} {
		if auth == nil || !reflect.DeepEqual(*auth, wantAuth) {
			t.Errorf("%s basicAuth %s, want %s", what, dump(auth), dump(wantAuth))
		}
	}

	// An explicit serverName is kept; authorization in place of basicAuth.
	sm := vs["serviceMonitor"].(map[string]any)
	sm["tlsConfig"].(map[string]any)["serverName"] = "exporter.example"
	delete(sm, "basicAuth")
	sm["authorization"] = map[string]any{"credentials": map[string]any{"name": "phe-scrape", "key": "token"}}
	c = renderChart(t, vs)
	ep, sc = c.serviceMonitor.Spec.Endpoints[0], c.scrapeConfig.Spec
	if ep.TLSConfig.ServerName == nil || *ep.TLSConfig.ServerName != "exporter.example" || *sc.TLSConfig.ServerName != "exporter.example" || *sc.HTTPSDConfigs[0].TLSConfig.ServerName != "exporter.example" {
		t.Errorf("an explicit serverName is not kept everywhere")
	}
	for what, a := range map[string]*monitoringv1.SafeAuthorization{"ServiceMonitor": ep.Authorization, "ScrapeConfig": sc.Authorization, "its /sd": sc.HTTPSDConfigs[0].Authorization} {
		if a == nil || a.Credentials == nil || a.Credentials.Key != "token" {
			t.Errorf("%s authorization %s, want the token", what, dump(a))
		}
	}
	if ep.BasicAuth != nil || sc.BasicAuth != nil || sc.HTTPSDConfigs[0].BasicAuth != nil {
		t.Error("basicAuth rendered although only authorization is set")
	}

	plain := renderChart(t, allToggles(proxiesNamespace))
	if e := plain.serviceMonitor.Spec.Endpoints[0]; e.TLSConfig != nil || e.BasicAuth != nil || plain.scrapeConfig.Spec.TLSConfig != nil || plain.scrapeConfig.Spec.HTTPSDConfigs[0].TLSConfig != nil {
		t.Error("without TLS values, TLS settings are rendered")
	}
}

// securedValues: every toggle on, the exporter behind webConfig's TLS and
// basic auth, and Prometheus given the CA and the credentials from the
// Secret phe-scrape.
func securedValues() map[string]any {
	vs := allToggles(proxiesNamespace)
	secret := func(key string) map[string]any { return map[string]any{"name": "phe-scrape", "key": key} }
	vs["serviceMonitor"] = map[string]any{
		"enabled":   true,
		"scheme":    "https",
		"tlsConfig": map[string]any{"ca": map[string]any{"secret": secret("ca.crt")}},
		"basicAuth": map[string]any{"username": secret("username"), "password": secret("password")},
	}
	return vs
}

// TestChartNotesNameTheImage: NOTES.txt, shown after helm install, names
// the image the Pod pulls, the values that set it, and how to build it.
func TestChartNotesNameTheImage(t *testing.T) {
	_, notes, err := chart.Install(t.Context(), chartDir, chartRelease, chartNamespace, map[string]any{"image": map[string]any{"registry": "registry.example"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"registry.example/egress-proxies/provider_health_exporter:" + releaseVersion(t),
		"image.registry", "image.repository", "image.digest",
		"docker buildx build --platform linux/amd64,linux/arm64", "make image-oci", "crane push",
		"helm test " + chartRelease + " -n " + chartNamespace,
	} {
		if !strings.Contains(notes, want) {
			t.Errorf("NOTES.txt lacks %q:\n%s", want, notes)
		}
	}
}
