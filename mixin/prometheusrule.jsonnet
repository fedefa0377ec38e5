// Renders deploy/kubernetes/components/prometheus-operator/prometheusrule.yaml:
// the same alerts and recording rules wrapped in a Prometheus Operator
// PrometheusRule.
local mixin = import 'mixin.libsonnet';
local c = mixin._config;

'# Generated from mixin/*.libsonnet by `make mixin`; do not edit.\n'
+ std.manifestYamlDoc({
  apiVersion: 'monitoring.coreos.com/v1',
  kind: 'PrometheusRule',
  metadata: {
    name: c.prometheusRuleName,
    namespace: c.prometheusRuleNamespace,
    labels: c.prometheusRuleLabels,
  },
  spec: { groups: mixin.prometheusAlerts.groups + mixin.prometheusRules.groups },
}, indent_array_in_object=true, quote_keys=false)
