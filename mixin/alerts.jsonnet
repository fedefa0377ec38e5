// Renders mixin/alerts.yaml: a plain Prometheus rule file.
local mixin = import 'mixin.libsonnet';

'# Generated from mixin/*.libsonnet by `make mixin`; do not edit.\n'
+ std.manifestYamlDoc(mixin.prometheusAlerts, indent_array_in_object=true, quote_keys=false)
