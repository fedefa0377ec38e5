// "Provider health / Overview": can each provider host proxies, and if not,
// why, since when, and how close the checks are to their budget.
local g = import '../lib/dashboard.libsonnet';
local duration = import '../lib/duration.libsonnet';

{
  grafanaDashboards+:: {
    local c = $._config,
    // Provider metrics carry provider, name and target; the KVM-only metrics
    // carry no provider label, so they are filtered by job and name alone.
    local cluster = if c.showMultiCluster then '%s=~"$cluster", ' % c.clusterLabel else '',
    // Every query is of the instances selected: with several exporters
    // under one job (each with a part of the configuration, or an HA
    // pair), one exporter's view.
    local instance = 'instance=~"$instance"',
    local sel = cluster + 'job=~"$job", %s, provider=~"$provider", name=~"$name"' % instance,
    local kvmSel = cluster + 'job=~"$job", %s, name=~"$name"' % instance,
    local jobSel = cluster + 'job=~"$job"',
    // The exporter's own scrape, without the probe targets of /probe mode
    // (config.libsonnet: probeLabel).
    local exporterSel = jobSel + ', %s, %s=""' % [instance, c.probeLabel],
    local byTarget = 'provider, name, target',
    local targetLegend = '{{provider}}/{{name}}/{{target}}',
    local hostLegend = '{{name}}/{{target}} {{pool}}',

    'provider-health-overview.json': g.dashboard(c, 'overview', 'Overview', [
      g.datasourceVariable(c.grafanaDatasource),
      g.queryVariable('cluster', 'Cluster', 'provider_health_up{%s}' % c.providerHealthSelector, c.clusterLabel, multi=false, hide=!c.showMultiCluster),
      g.queryVariable('job', 'Job', 'provider_health_up{%s%s}' % [cluster, c.providerHealthSelector], 'job', multi=false, current=c.dashboardJob),
      g.queryVariable('instance', 'Instance', 'provider_health_up{%s}' % jobSel, 'instance'),
      g.queryVariable('provider', 'Provider', 'provider_health_up{%s, %s}' % [jobSel, instance], 'provider'),
      g.queryVariable('name', 'Name', 'provider_health_up{%s, %s, provider=~"$provider"}' % [jobSel, instance], 'name'),
    ], [
      g.stat('Targets ready', 'Targets that can host proxies now (seen ready by any exporter replica).', [
        g.target('count(max by (%s) (provider_health_ready{%s}) == 1) or vector(0)' % [byTarget, sel]),
      ]) + g.size(6, 4) + g.thresholds([[null, 'green']]),

      g.stat('Targets not ready', 'Targets that cannot host proxies now.', [
        g.target('count(max by (%s) (provider_health_ready{%s}) == 0) or vector(0)' % [byTarget, sel]),
      ]) + g.size(6, 4) + g.thresholds([[null, 'green'], [1, 'red']]),

      g.stat('Exporters up', "Exporter instances Prometheus scrapes successfully, of all it tries: the exporters' own scrapes, not the probe targets of /probe mode.", [
        g.target('sum(up{%s})' % exporterSel, 'up'),
        g.target('count(up{%s})' % exporterSel, 'scraped'),
      ]) + g.size(6, 4) + g.thresholds([[null, 'blue']]),

      g.stat('Last config reload', 'Whether every exporter instance runs the configuration file it was last asked to load.', [
        g.target('min(provider_health_exporter_config_last_reload_successful{%s})' % exporterSel),
      ]) + g.size(6, 4)
      + g.valueMappings({ '0': ['Failed', 'red'], '1': ['OK', 'green'] }),

      g.stateTimeline('Ready per target', 'provider_health_ready over time, one row per target.', [
        g.target('max by (%s) (provider_health_ready{%s})' % [byTarget, sel], targetLegend),
      ]) + g.size(24, 8)
      + g.valueMappings({ '0': ['Not ready', 'red'], '1': ['Ready', 'green'] }),

      // The exporter exports only a target's current reason; == 1 keeps
      // the panels right for an exporter from before that, which exported
      // the rest of the set at 0 (CHANGELOG.md).
      g.stateTimeline('Reason per target', 'The reason each target reported over time (provider_health_reason, whose series is the current reason), one row per target and reason.', [
        g.target('max by (%s, reason) (provider_health_reason{%s} == 1)' % [byTarget, sel], targetLegend + ': {{reason}}'),
      ]) + g.size(24, 10)
      + g.fixedColor('red')
      // Each row is one target and reason, so the value (always 1) says nothing.
      + { options+: { showValue: 'never' } }
      + g.overrideByRegexp('/: Ready$/', { color: { mode: 'fixed', fixedColor: 'green' } }),

      g.timeseries('Targets per reason', 'How many targets report each reason, across the fleet (a target seen by several exporter replicas counts once per reason they report).', [
        g.target('count by (reason) (max by (%s, reason) (provider_health_reason{%s} == 1))' % [byTarget, sel], '{{reason}}'),
      ], stack=true) + g.size(24, 8)
      + g.overrideByRegexp('/^Ready$/', { color: { mode: 'fixed', fixedColor: 'green' } }),

      g.table('Targets not ready now', 'Every target not ready at the end of the time range, with its reason and since when it has not been ready (provider_health_last_transition_timestamp_seconds).', [
        g.tableTarget(|||
          max by (%(byTarget)s, reason) (
            provider_health_last_transition_timestamp_seconds{%(sel)s} * 1000
            * on (job, instance, %(byTarget)s) group_left (reason)
            (provider_health_reason{%(sel)s, reason!="Ready"} == 1)
          )
        ||| % { byTarget: byTarget, sel: sel }),
        g.tableTarget(|||
          max by (%(byTarget)s, reason) (
            time() - provider_health_last_transition_timestamp_seconds{%(sel)s}
            * on (job, instance, %(byTarget)s) group_left (reason)
            (provider_health_reason{%(sel)s, reason!="Ready"} == 1)
          )
        ||| % { byTarget: byTarget, sel: sel }),
      ]) + g.size(24, 8)
      + g.mergeTables()
      + g.organize({
        provider: 'Provider',
        name: 'Name',
        target: 'Target',
        reason: 'Reason',
        'Value #A': 'Not ready since',
        'Value #B': 'Not ready for',
      })
      + {
        fieldConfig+: { overrides+: [
          { matcher: { id: 'byName', options: 'Not ready since' }, properties: [{ id: 'unit', value: 'dateTimeAsIso' }] },
          { matcher: { id: 'byName', options: 'Not ready for' }, properties: [{ id: 'unit', value: 's' }] },
          { matcher: { id: 'byName', options: 'Reason' }, properties: [
            { id: 'custom.cellOptions', value: { type: 'color-background' } },
            { id: 'color', value: { mode: 'fixed', fixedColor: 'red' } },
          ] },
        ] },
        options+: { sortBy: [{ displayName: 'Not ready since', desc: false }] },
      },

      g.timeseries('Check duration and budget', 'Wall time of the check behind each verdict (solid), and the budget the scrape gave each provider (dashed).', [
        g.target('max by (%s) (provider_health_check_duration_seconds{%s})' % [byTarget, sel], targetLegend),
        g.target('max by (provider, name) (provider_health_check_timeout_seconds{%s})' % sel, 'budget {{provider}}/{{name}}'),
      ]) + g.size(12, 8) + g.unit('s')
      + g.overrideByRegexp('/^budget /', { 'custom.lineStyle': { fill: 'dash', dash: [10, 10] } }),

      g.timeseries('Check duration / budget', 'Share of its budget each check used. ProviderCheckNearTimeout fires above the red line; at 100%% the verdict is Timeout.', [
        g.target(|||
          max by (%(byTarget)s) (
            provider_health_check_duration_seconds{%(sel)s}
            / on (job, instance, provider, name) group_left ()
            provider_health_check_timeout_seconds{%(sel)s}
          )
        ||| % { byTarget: byTarget, sel: sel }, targetLegend),
      ]) + g.size(12, 8) + g.unit('percentunit')
      + g.thresholds([[null, 'green'], [c.nearTimeoutFraction, 'red']])
      + { fieldConfig+: { defaults+: { min: 0, custom+: { thresholdsStyle: { mode: 'line+area' } } } } },

      g.timeseries('Checks per mode', "Checks per second by mode: live (ran), shared (joined a concurrent scrape's check), cached (reused within min_interval).", [
        g.target('sum by (provider, name, mode) (rate(provider_health_exporter_checks_total{%s}[$__rate_interval]))' % sel, '{{provider}}/{{name}} {{mode}}'),
      ], stack=true) + g.size(12, 8) + g.unit('ops'),

      g.timeseries('KVM sessions established', 'SSH+libvirt sessions the exporter opened per host. Kept connections make this flat; steps mean the connection keeps breaking.', [
        g.target('sum by (name, target) (increase(provider_health_kvm_connects_total{%s}[$__rate_interval]))' % kvmSel, '{{name}}/{{target}}'),
      ]) + g.size(12, 8) + g.unit('short'),

      g.barGauge('KVM pool usage per host', 'Allocated share of each KVM storage pool. KVMPoolLowSpace fires when less than %d%% is available.' % std.round(c.kvmPoolLowSpaceFraction * 100), [
        g.target(|||
          max by (name, target, pool) (
            provider_health_kvm_pool_allocation_bytes{%(kvmSel)s}
            / provider_health_kvm_pool_capacity_bytes{%(kvmSel)s}
          )
        ||| % { kvmSel: kvmSel }, hostLegend),
      ]) + g.size(12, 8) + g.unit('percentunit')
      + { fieldConfig+: { defaults+: { min: 0, max: 1 } } }
      + g.thresholds([[null, 'green'], [1 - c.kvmPoolLowSpaceFraction, 'red']]),

      g.timeseries('KVM pool available space', 'Available bytes of each KVM storage pool (solid) and its capacity (dashed).', [
        g.target('max by (name, target, pool) (provider_health_kvm_pool_available_bytes{%s})' % kvmSel, hostLegend),
        g.target('max by (name, target, pool) (provider_health_kvm_pool_capacity_bytes{%s})' % kvmSel, 'capacity ' + hostLegend),
      ]) + g.size(12, 8) + g.unit('bytes')
      + g.overrideByRegexp('/^capacity /', { 'custom.lineStyle': { fill: 'dash', dash: [10, 10] } }),

      g.table('Targets', 'Where each target is (provider_health_target_info).', [
        g.tableTarget('max by (%s, address) (provider_health_target_info{%s})' % [byTarget, sel]),
      ]) + g.size(14, 8)
      + g.organize({ provider: 'Provider', name: 'Name', target: 'Target', address: 'Address' }, ['Time', 'Value']),

      g.table('KVM hosts', 'SSH user and libvirt version of each KVM host (provider_health_kvm_host_info).', [
        g.tableTarget('max by (name, target, user, libvirt_version) (provider_health_kvm_host_info{%s})' % kvmSel),
      ]) + g.size(10, 8)
      + g.organize({ name: 'Name', target: 'Host', user: 'User', libvirt_version: 'libvirt' }, ['Time', 'Value']),

      // Headroom: what the opt-in headroom keys of docs/configuration.md
      // (min_quota_headroom, min_pool_available, min_free_memory) read. Its
      // series exist only for entries that set them, like the two alerts
      // that watch them (ProviderQuotaNearLimit, KVMPoolFillingUp).
      g.row('Headroom'),

      g.barGauge('Quota used', 'Usage of each configured quota as a share of its limit: GCP per region and quota metric, Kubernetes per ResourceQuota and resource. ProviderQuotaNearLimit fires above %d%%; the check reports QuotaExhausted once less than min_quota_headroom is left.' % std.round(c.providerQuotaNearLimitFraction * 100), [
        g.target(|||
          max by (name, region, metric) (
            provider_health_gcp_quota_usage{%(kvmSel)s}
            / provider_health_gcp_quota_limit{%(kvmSel)s}
          )
        ||| % { kvmSel: kvmSel }, '{{name}} {{region}} {{metric}}'),
        g.target(|||
          max by (name, namespace, quota, resource) (
            provider_health_kubernetes_quota_used{%(kvmSel)s}
            / provider_health_kubernetes_quota_hard{%(kvmSel)s}
          )
        ||| % { kvmSel: kvmSel }, '{{name}} {{namespace}}/{{quota}} {{resource}}'),
      ]) + g.size(8, 8) + g.unit('percentunit')
      + { fieldConfig+: { defaults+: { min: 0, max: 1 } } }
      + g.thresholds([[null, 'green'], [c.providerQuotaNearLimitFraction, 'red']]),

      g.table('GCP quota per region', 'Usage and limit of each configured quota metric in each configured region (regions.get). A region Compute answered without quota data has no row.', [
        g.tableTarget('max by (name, region, metric) (provider_health_gcp_quota_usage{%s})' % kvmSel),
        g.tableTarget('max by (name, region, metric) (provider_health_gcp_quota_limit{%s})' % kvmSel),
      ]) + g.size(8, 8)
      + g.mergeTables()
      + g.organize({ name: 'Name', region: 'Region', metric: 'Metric', 'Value #A': 'Usage', 'Value #B': 'Limit' }),

      g.table('Kubernetes ResourceQuotas', 'Used and hard of each configured resource in each ResourceQuota of the namespace; CPU in cores, memory in bytes.', [
        g.tableTarget('max by (name, namespace, quota, resource) (provider_health_kubernetes_quota_used{%s})' % kvmSel),
        g.tableTarget('max by (name, namespace, quota, resource) (provider_health_kubernetes_quota_hard{%s})' % kvmSel),
      ]) + g.size(8, 8)
      + g.mergeTables()
      + g.organize({ name: 'Name', namespace: 'Namespace', quota: 'ResourceQuota', resource: 'Resource', 'Value #A': 'Used', 'Value #B': 'Hard' }),

      g.timeseries('KVM pool available against minimum', "Available bytes of each KVM storage pool (solid), and where the trend of the last %(w)s puts them %(h)s later (dashed), which KVMPoolFillingUp compares with the red line (the mixin's kvmPoolMinAvailableBytes; the exporter reports PoolFull below each host's min_pool_available)." % { w: c.kvmPoolFillingUpWindow, h: c.kvmPoolFillingUpHorizon }, [
        g.target('max by (name, target, pool) (provider_health_kvm_pool_available_bytes{%s})' % kvmSel, hostLegend),
        g.target('max by (name, target, pool) (predict_linear(provider_health_kvm_pool_available_bytes{%s}[%s], %d))' % [kvmSel, c.kvmPoolFillingUpWindow, duration.seconds('kvmPoolFillingUpHorizon', c.kvmPoolFillingUpHorizon)], 'in %s %s' % [c.kvmPoolFillingUpHorizon, hostLegend]),
      ]) + g.size(12, 8) + g.unit('bytes')
      + g.overrideByRegexp('/^in /', { 'custom.lineStyle': { fill: 'dash', dash: [10, 10] } })
      + g.thresholds([[null, 'red'], [c.kvmPoolMinAvailableBytes, 'green']])
      + { fieldConfig+: { defaults+: { custom+: { thresholdsStyle: { mode: 'line' } } } } },

      g.timeseries('KVM host free memory', "Free memory of each KVM host (libvirt's NodeGetFreeMemory), for hosts whose entry sets min_free_memory; below it the check reports HostMemoryLow.", [
        g.target('max by (name, target) (provider_health_kvm_host_free_memory_bytes{%s})' % kvmSel, '{{name}}/{{target}}'),
      ]) + g.size(12, 8) + g.unit('bytes'),

      // Capacity: how many more proxies fit (docs/metrics.md: "Capacity"),
      // for the entries with headroom keys; watched by ProviderCapacityLow
      // and ProviderCapacityRunningOut.
      g.row('Capacity'),

      g.timeseries('Capacity per entry', "How many more proxies fit on each target (provider_health_capacity): the least, over its headroom constraints, of floor(headroom / one proxy's need). ProviderCapacityLow fires below the red line (the mixin's capacityLowProxies); the status page names the constraint that binds each.", [
        g.target('max by (%s) (provider_health_capacity{%s})' % [byTarget, sel], targetLegend),
      ]) + g.size(16, 8) + g.unit('short')
      + g.thresholds([[null, 'red'], [c.capacityLowProxies, 'green']])
      + { fieldConfig+: { defaults+: { decimals: 0, min: 0, custom+: { thresholdsStyle: { mode: 'line' } } } } },

      g.barGauge('Least capacity', 'The 10 targets with the least room for more proxies now (bottomk of provider_health_capacity).', [
        // Instant: bottomk over a range would show each step's 10.
        g.target('bottomk(10, max by (%s) (provider_health_capacity{%s}))' % [byTarget, sel], targetLegend) + { range: false, instant: true },
      ]) + g.size(8, 8) + g.unit('short')
      + g.thresholds([[null, 'red'], [1, 'orange'], [c.capacityLowProxies, 'green']])
      + { fieldConfig+: { defaults+: { decimals: 0, min: 0 } } },

      // Per failure domain (a zone, node pool, region or KVM rack), for the
      // entries that configure domains. A KVM host is a target of its own,
      // so a domain's numbers are the sum over its hosts, each counted once
      // however many exporter replicas see it.
      g.timeseries('Capacity per domain', 'How many more proxies fit in each failure domain alone (provider_health_domain_capacity, solid) and how many run there (provider_health_domain_proxies, dashed), for entries with domains; a KVM domain sums its hosts.', [
        g.target('sum by (provider, name, domain) (max by (%s, domain) (provider_health_domain_capacity{%s}))' % [byTarget, sel], '{{provider}}/{{name}} {{domain}}'),
        g.target('sum by (provider, name, domain) (max by (%s, domain) (provider_health_domain_proxies{%s}))' % [byTarget, sel], 'proxies {{provider}}/{{name}} {{domain}}'),
      ]) + g.size(14, 8) + g.unit('short')
      + { fieldConfig+: { defaults+: { decimals: 0, min: 0 } } }
      + g.overrideByRegexp('/^proxies /', { 'custom.lineStyle': { fill: 'dash', dash: [10, 10] } }),

      // KVM entries' rows come from the mixin's recording rule, which sums
      // the hosts of every exporter replica and so has no instance label:
      // they show while Instance is All.
      g.table('Survives losing a domain', "How many more proxies fit after each failure domain is lost and its proxies are created again elsewhere (provider_health_capacity_after_loss); red when negative, the number of proxies left without a place, which ProviderCapacityNotDomainResilient alerts on. KVM entries' rows (the mixin's recording rule, over every exporter replica) have no target and show while Instance is All.", [
        g.tableTarget('max by (%s, domain) (provider_health_capacity_after_loss{%s})' % [byTarget, sel]),
      ]) + g.size(10, 8)
      + g.organize({ provider: 'Provider', name: 'Name', target: 'Target', domain: 'Domain lost', Value: 'Capacity after loss' })
      + g.thresholds([[null, 'red'], [0, 'green']])
      + {
        fieldConfig+: { overrides+: [
          { matcher: { id: 'byName', options: 'Capacity after loss' }, properties: [
            { id: 'custom.cellOptions', value: { type: 'color-background' } },
            { id: 'color', value: { mode: 'thresholds' } },
            { id: 'decimals', value: 0 },
          ] },
        ] },
        options+: { sortBy: [{ displayName: 'Capacity after loss', desc: false }] },
      },
    ]),
  },
}
