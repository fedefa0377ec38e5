// Renders deploy/kubernetes/components/kube-prometheus/dashboards-configmap.yaml:
// every dashboard of mixin/dashboards_out/ in one ConfigMap labelled
// grafana_dashboard: "1", the label the Grafana sidecar of
// kube-prometheus-stack loads dashboards from.
local mixin = import 'mixin.libsonnet';
local dashboards = mixin.grafanaDashboards;

'# Generated from mixin/*.libsonnet by `make mixin`; do not edit.\n'
+ std.manifestYamlDoc({
  apiVersion: 'v1',
  kind: 'ConfigMap',
  metadata: {
    name: 'provider-health-exporter-dashboards',
    namespace: 'provider-health',
    labels: {
      'app.kubernetes.io/name': 'provider-health-exporter',
      grafana_dashboard: '1',
    },
  },
  // The same JSON as the files of dashboards_out, minified: the sidecar
  // only parses it.
  data: {
    [name]: std.manifestJsonMinified(dashboards[name])
    for name in std.objectFields(dashboards)
  },
}, indent_array_in_object=true, quote_keys=false)
