// Renders mixin/tests/multicluster/alerts.yaml: the alerts and recording
// rules as a global ruler over several clusters gets them, with
// showMultiCluster on, for the promtool tests next to it. It also sets a KVM pool minimum (0 by default), so that
// the tests next to it cover KVMPoolFillingUp's minimum too.
local mixin = (import 'mixin.libsonnet') + { _config+:: {
  showMultiCluster: true,
  kvmPoolMinAvailableBytes: 20 * 1024 * 1024 * 1024,
} };

'# Generated from mixin/*.libsonnet by `make mixin`; do not edit.\n'
+ std.manifestYamlDoc({ groups: mixin.prometheusAlerts.groups + mixin.prometheusRules.groups }, indent_array_in_object=true, quote_keys=false)
