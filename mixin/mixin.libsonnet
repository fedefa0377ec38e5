// The provider health mixin: configuration, alerts and dashboards, in the
// monitoring-mixins convention. Override _config to adapt it.
(import 'config.libsonnet') +
(import 'alerts/alerts.libsonnet') +
(import 'dashboards/dashboards.libsonnet') +
(import 'lib/add-runbook-links.libsonnet')
