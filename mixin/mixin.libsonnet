// The provider health mixin: configuration, alerts, recording rules and
// dashboards, in the monitoring-mixins convention. Override _config to adapt
// it.
(import 'config.libsonnet') +
(import 'alerts/alerts.libsonnet') +
(import 'rules/rules.libsonnet') +
(import 'dashboards/dashboards.libsonnet') +
(import 'lib/add-runbook-links.libsonnet')
