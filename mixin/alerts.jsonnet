// Renders mixin/alerts.yaml: a plain Prometheus rule file with the alerts'
// groups, then the recording rules' (an alert reads one of them), in the
// order kube-prometheus's addMixin puts them.
local mixin = import 'mixin.libsonnet';

'# Generated from mixin/*.libsonnet by `make mixin`; do not edit.\n'
+ std.manifestYamlDoc({ groups: mixin.prometheusAlerts.groups + mixin.prometheusRules.groups }, indent_array_in_object=true, quote_keys=false)
