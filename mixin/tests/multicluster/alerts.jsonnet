// Renders mixin/tests/multicluster/alerts.yaml: the alerts as a global ruler
// over several clusters gets them, with showMultiCluster on, for the promtool
// tests next to it.
local mixin = (import 'mixin.libsonnet') + { _config+:: { showMultiCluster: true } };

'# Generated from mixin/*.libsonnet by `make mixin`; do not edit.\n'
+ std.manifestYamlDoc(mixin.prometheusAlerts, indent_array_in_object=true, quote_keys=false)
