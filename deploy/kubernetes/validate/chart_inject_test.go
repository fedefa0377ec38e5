package validate

import (
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/egress-proxies/provider_health_exporter/deploy/kubernetes/validate/chart"
)

// injections are values that would add an object or a field to the
// rendering if a template wrote them into YAML unquoted.
var injections = map[string]string{
	"a Secret":    "ns\n---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: injected\nstringData:\n  token: x",
	"a Pod field": "x\nhostPID: true",
	"a map entry": "x\n  hostPID: true",
}

// scalarValues are the values that land in a YAML scalar of a template:
// namespaces, names, label values and keys, annotations, priorityClassName,
// the image. Each path is set (with the toggles that render it on) by the
// function.
var scalarValues = map[string]func(v string) map[string]any{
	"serviceMonitor.namespace": func(v string) map[string]any { return on("serviceMonitor", "namespace", v) },
	"prometheusRule.namespace": func(v string) map[string]any { return on("prometheusRule", "namespace", v) },
	"scrapeConfig.namespace":   func(v string) map[string]any { return on("scrapeConfig", "namespace", v) },
	"dashboards.namespace":     func(v string) map[string]any { return on("dashboards", "namespace", v) },
	"serviceMonitor.jobLabel":  func(v string) map[string]any { return on("serviceMonitor", "jobLabel", v) },
	"serviceMonitor.targetLabels": func(v string) map[string]any {
		return on("serviceMonitor", "targetLabels", []any{v})
	},
	"priorityClassName":        func(v string) map[string]any { return map[string]any{"priorityClassName": v} },
	"nameOverride":             func(v string) map[string]any { return map[string]any{"nameOverride": v} },
	"fullnameOverride":         func(v string) map[string]any { return map[string]any{"fullnameOverride": v} },
	"serviceAccount.name":      func(v string) map[string]any { return map[string]any{"serviceAccount": map[string]any{"name": v}} },
	"secrets.existingSecret":   func(v string) map[string]any { return map[string]any{"secrets": map[string]any{"existingSecret": v}} },
	"webConfig.existingSecret": func(v string) map[string]any { return map[string]any{"webConfig": map[string]any{"existingSecret": v}} },
	"releaseLabel": func(v string) map[string]any {
		return map[string]any{"releaseLabel": v, "serviceMonitor": map[string]any{"enabled": true}}
	},
	"image.registry":       func(v string) map[string]any { return map[string]any{"image": map[string]any{"registry": v}} },
	"image.repository":     func(v string) map[string]any { return map[string]any{"image": map[string]any{"repository": v}} },
	"image.tag":            func(v string) map[string]any { return map[string]any{"image": map[string]any{"tag": v}} },
	"global.imageRegistry": func(v string) map[string]any { return map[string]any{"global": map[string]any{"imageRegistry": v}} },
	"commonLabels value":   func(v string) map[string]any { return map[string]any{"commonLabels": map[string]any{"team": v}} },
	"commonLabels key":     func(v string) map[string]any { return map[string]any{"commonLabels": map[string]any{v: "x"}} },
	"podLabels value":      func(v string) map[string]any { return map[string]any{"podLabels": map[string]any{"team": v}} },
	"service.labels value": func(v string) map[string]any {
		return map[string]any{"service": map[string]any{"labels": map[string]any{"team": v}}}
	},
	"podAnnotations value": func(v string) map[string]any { return map[string]any{"podAnnotations": map[string]any{"note": v}} },
	"podAnnotations key":   func(v string) map[string]any { return map[string]any{"podAnnotations": map[string]any{v: "x"}} },
	"service.annotations value": func(v string) map[string]any {
		return map[string]any{"service": map[string]any{"annotations": map[string]any{"note": v}}}
	},
	"env name":  func(v string) map[string]any { return map[string]any{"env": map[string]any{v: "x"}} },
	"env value": func(v string) map[string]any { return map[string]any{"env": map[string]any{"NAME": v}} },
	"extraArgs": func(v string) map[string]any { return map[string]any{"extraArgs": []any{v}} },
	"rbac.headroom.namespaces": func(v string) map[string]any {
		return map[string]any{"rbac": map[string]any{"headroom": map[string]any{"enabled": true, "namespaces": []any{v}}}}
	},
	"kubePrometheus.rbac.prometheusServiceAccount.namespace": func(v string) map[string]any {
		return map[string]any{"kubePrometheus": map[string]any{"rbac": map[string]any{"enabled": true, "prometheusServiceAccount": map[string]any{"namespace": v}}}}
	},
	"kubePrometheus.rbac.prometheusServiceAccount.name": func(v string) map[string]any {
		return map[string]any{"kubePrometheus": map[string]any{"rbac": map[string]any{"enabled": true, "prometheusServiceAccount": map[string]any{"name": v}}}}
	},
	"config entry name": func(v string) map[string]any {
		return map[string]any{"config": map[string]any{"kubernetes": []any{map[string]any{"name": v}}}}
	},
}

// hasKey tells whether key is a key of any mapping in v (a value holding
// the text "hostPID: true" is a string, not a key).
func hasKey(v any, key string) bool {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if k == key || hasKey(x, key) {
				return true
			}
		}
	case []any:
		for _, x := range v {
			if hasKey(x, key) {
				return true
			}
		}
	}
	return false
}

// on is values that turn part on and set its key to v.
func on(part, key string, v any) map[string]any {
	return map[string]any{part: map[string]any{"enabled": true, key: v}}
}

// TestChartValuesCannotInject: a value with a newline and YAML after it
// either is refused by values.schema.json (a name, a namespace, a label)
// or stays inside its scalar (an annotation, an env value, the
// configuration's strings): the rendering has the objects of the same
// values without the injection, each decodes strictly into its type (an
// added field such as hostPID would have to be a field of the object it
// landed in: the strict decoding names it), no Secret, and no mapping with
// a key hostPID anywhere.
func TestChartValuesCannotInject(t *testing.T) {
	for path, set := range scalarValues {
		clean := renderChart(t, set("clean"))
		for what, payload := range injections {
			t.Run(path+" with "+what, func(t *testing.T) {
				values := set(payload)
				out, err := chart.Template(t.Context(), chartDir, chartRelease, chartNamespace, values)
				if err != nil {
					if !strings.Contains(err.Error(), "values don't meet the specifications of the schema") {
						t.Errorf("refused, but not by values.schema.json: %v", err)
					}
					return
				}
				for _, o := range splitObjects(t, path, out) {
					var doc any
					if err := yaml.Unmarshal(o.doc, &doc); err != nil {
						t.Fatal(err)
					}
					if hasKey(doc, "hostPID") {
						t.Errorf("%s %s has a key hostPID:\n%s", o.Kind, o.Metadata.Name, o.doc)
					}
				}
				c := renderChart(t, values)
				if got, want := c.kinds(), clean.kinds(); strings.Join(got, ",") != strings.Join(want, ",") {
					t.Errorf("rendered %v, without the injection %v", got, want)
				}
				if c.deployment.Spec.Template.Spec.HostPID {
					t.Error("the Pod got hostPID")
				}
			})
		}
	}
}
