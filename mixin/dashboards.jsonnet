// Renders mixin/dashboards_out/: one JSON file per dashboard (jsonnet -m).
local mixin = import 'mixin.libsonnet';

mixin.grafanaDashboards
