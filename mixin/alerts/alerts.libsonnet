// The alerts of docs/alerts.md's "Alerts" section. Severity follows what a human has to do:
//   critical: act now, nothing recovers by itself or a whole provider is lost;
//   warning:  look during working hours, or it may clear by itself.

local duration = import '../lib/duration.libsonnet';

local cfg(c) =
  // With showMultiCluster, one ruler sees the exporters of several clusters
  // (Thanos, Mimir): every join and aggregation keeps the cluster label, so
  // that two clusters' series never merge (docs/alerts.md: "Multi-cluster").
  local cluster = if c.showMultiCluster then [c.clusterLabel] else [];
  c {
    onTarget: std.join(', ', cluster + c.instanceLabels + ['provider', 'name', 'target']),
    onProvider: std.join(', ', cluster + c.instanceLabels + ['provider', 'name']),
    byJob: std.join(', ', cluster + ['job']),
    byProbeExporter: std.join(', ', cluster + ['job', c.probeLabel]),
    byProvider: std.join(', ', cluster + ['job', 'provider', 'name']),
    byTarget: std.join(', ', cluster + ['job', 'provider', 'name', 'target']),
    actionRequiredRegex: std.join('|', std.sort(c.actionRequiredReasons)),
    nearTimeoutPercent: std.toString(std.round(c.nearTimeoutFraction * 100)) + '%',
    lowSpacePercent: std.toString(std.round(c.kvmPoolLowSpaceFraction * 100)) + '%',
    // %g prints 0.8, where jsonnet's default number format prints 0.80000000000000004.
    nearTimeoutFraction: '%g' % c.nearTimeoutFraction,
    kvmPoolLowSpaceFraction: '%g' % c.kvmPoolLowSpaceFraction,
    kvmReconnectsPerHour: '%g' % c.kvmReconnectsPerHour,
    providerQuotaNearLimitFraction: '%g' % c.providerQuotaNearLimitFraction,
    quotaNearLimitPercent: std.toString(std.round(c.providerQuotaNearLimitFraction * 100)) + '%',
    // predict_linear's horizon is a number of seconds.
    kvmPoolFillingUpHorizonSeconds: '%d' % duration.seconds('kvmPoolFillingUpHorizon', c.kvmPoolFillingUpHorizon),
    capacityHorizonSeconds: '%d' % duration.seconds('capacityHorizon', c.capacityHorizon),
    capacityLowProxies:
      if std.isNumber(c.capacityLowProxies) && c.capacityLowProxies >= 1
      then '%d' % c.capacityLowProxies
      else error 'capacityLowProxies: want a number of proxies, 1 or more, got %s' % [c.capacityLowProxies],
    kvmPoolMinAvailableBytes:
      if std.isNumber(c.kvmPoolMinAvailableBytes) && c.kvmPoolMinAvailableBytes >= 0
      then '%d' % c.kvmPoolMinAvailableBytes
      else error 'kvmPoolMinAvailableBytes: want a number of bytes, 0 or more, got %s' % [c.kvmPoolMinAvailableBytes],
    // An alert's description names its cluster only where there are several.
    inCluster: if c.showMultiCluster then '{{ with $labels.%s }} in cluster {{ . }}{{ end }}' % c.clusterLabel else '',
  };

// A template's query for the series of the alert's own scrape: the matchers
// `label=%q,...` of a printf and the alert's label values it fills them
// with, the cluster first when there are several.
local same(c, labels) =
  local ls = (if c.showMultiCluster then [c.clusterLabel] else []) + labels;
  {
    matchers: std.join(',', ['%s=%%q' % l for l in ls]),
    args: std.join(' ', ['$labels.' + l for l in ls]),
  };

// A template fragment printing the current reason of the alert's target,
// looked up in the same scrape (job and instance) as the alerting series.
// The exporter exports the current reason only (the old one goes stale at
// the scrape that changes it); == 1 keeps an exporter from before that,
// which exported the rest of the set at 0, right (CHANGELOG.md).
local currentReason(c) =
  local s = same(c, ['job', 'instance', 'provider', 'name', 'target']);
  '{{ with printf "provider_health_reason{%s} == 1" ' % s.matchers
  + s.args + ' | query }}'
  + '{{ range . }}{{ .Labels.reason }}{{ end }}{{ else }}unknown{{ end }}';

// A template fragment printing the value of query (a metric, or a function
// of it: %s stands for the selector's matchers) in the alert's own scrape,
// formatted by the template function format and followed by unit; nothing
// when the series is gone. It prints every series the query returns, not the
// first: the order of a query's result is not defined, so a query that
// wrongly returns two series (another cluster's) then shows in every test
// run instead of in some.
local valueOf(c, query, labels, format='humanize', unit='') =
  local s = same(c, labels);
  local q = if std.findSubstr('%s', query) == [] then query + '{%s}' else query;
  '{{ range printf "%s" %s | query }}{{ . | value | %s }}%s{{ end }}'
  % [q % s.matchers, s.args, format, unit];

// absent() has no labels to group by: with several clusters it fires only
// when every cluster's exporter is gone. The middle term is its per-cluster
// form: a cluster whose exporter was scraped within the lookback but has no
// up series now, whether its target left service discovery or its whole
// Prometheus stopped sending. It cannot know a cluster it never saw, and it
// forgets one gone for longer than the lookback: absent() still covers the
// case of no exporter anywhere (docs/alerts.md: "Multi-cluster").
//
// Every term reads the exporter's own scrape only (exporterSelector): in
// /probe mode each probe target's up is 0 too when the exporter is away, and
// counting those would make one page per probe target.
local exporterDownExpr(c) =
  if c.showMultiCluster then |||
    up{%(exporterSelector)s} == 0
    or
    (
      group by (%(byJob)s) (max_over_time(up{%(exporterSelector)s}[%(exporterGoneLookback)s]))
      unless on (%(byJob)s)
      group by (%(byJob)s) (up{%(exporterSelector)s})
    )
    or
    absent(up{%(exporterSelector)s})
  ||| % c
  else |||
    up{%(exporterSelector)s} == 0
    or
    absent(up{%(exporterSelector)s})
  ||| % c;

{
  prometheusAlerts+:: {
    local c = cfg($._config),
    local reasonsOf = same(c, ['job', 'provider', 'name']),
    local timeoutLabels = ['job', 'instance', 'provider', 'name'],
    local poolLabels = ['job', 'instance', 'name', 'target', 'pool'],
    local gcpQuotaLabels = ['job', 'instance', 'name', 'region', 'metric'],
    local kubernetesQuotaLabels = ['job', 'instance', 'name', 'namespace', 'quota', 'resource'],
    local lossPerHour = '-3600 * deriv(provider_health_kvm_pool_available_bytes{%%s}[%s])' % c.kvmPoolFillingUpWindow,
    groups+: [
      {
        name: 'provider-health-exporter',
        rules: [
          {
            alert: 'ProviderHealthExporterDown',
            // absent() catches the job vanishing from service discovery,
            // which up == 0 alone cannot see.
            expr: exporterDownExpr(c),
            'for': c.exporterDownFor,
            labels: { severity: c.criticalSeverity },
            annotations: {
              summary: 'The provider health exporter cannot be scraped.',
              description:
                '{{ with $labels.instance }}Prometheus cannot scrape the exporter at {{ . }}'
                + "{{ else }}Prometheus has no target scraping the exporter's own /metrics{{ end }}" + c.inCluster + ' (job {{ $labels.job }}) '
                + 'for more than ' + c.exporterDownFor + '. Provider health is unknown meanwhile: '
                + 'no other provider-health alert can fire.',
            },
          },
          {
            // The probe targets of one exporter that Prometheus cannot
            // scrape while the exporter's own scrape works (a ScrapeConfig
            // whose TLS or credentials differ from the ServiceMonitor's, a
            // scrape timeout too short for /probe): one alert per exporter,
            // whatever the number of its targets. When the exporter itself is
            // away, ProviderHealthExporterDown says so and this stays quiet.
            alert: 'ProviderHealthProbeFailed',
            expr: |||
              count by (%(byProbeExporter)s) (up{%(providerHealthSelector)s, %(probeLabel)s!=""} == 0)
              unless on (%(byJob)s)
              (up{%(exporterSelector)s} == 0)
            ||| % c,
            'for': c.probeFailedFor,
            labels: { severity: c.criticalSeverity },
            annotations: {
              summary: 'Prometheus cannot scrape /probe of the provider health exporter.',
              description:
                '{{ $value }} probe targets of the exporter at {{ $labels.%s }}' % c.probeLabel + c.inCluster
                + ' (job {{ $labels.job }}) failed to scrape for more than ' + c.probeFailedFor
                + ', while its own scrape works. The health of their providers is unknown meanwhile.',
            },
          },
          {
            alert: 'ProviderHealthConfigReloadFailed',
            expr: |||
              provider_health_exporter_config_last_reload_successful{%(exporterSelector)s} == 0
            ||| % c,
            'for': c.configReloadFailedFor,
            labels: { severity: c.warningSeverity },
            annotations: {
              summary: 'The provider health exporter refused its new configuration.',
              description:
                'The exporter at {{ $labels.instance }} (job {{ $labels.job }}) failed to reload '
                + 'its configuration file and keeps checking with the previous one.',
            },
          },
        ],
      },
      {
        name: 'provider-health-providers',
        rules: [
          {
            alert: 'ProviderNotReady',
            // The reason is read in the description, not joined into the
            // labels (group_left (reason)): an alert is identified by its
            // labels, so a reason label would make every change of reason a
            // new alert whose `for` starts over, and a target flapping
            // between two failures would never fire.
            expr: |||
              provider_health_ready{%(providerHealthSelector)s} == 0
            ||| % c,
            'for': c.providerNotReadyFor,
            labels: { severity: c.warningSeverity },
            annotations: {
              summary: 'A provider target cannot host proxies.',
              description:
                'Target {{ $labels.target }} of the {{ $labels.provider }} provider {{ $labels.name }} '
                + 'has not been ready for more than ' + c.providerNotReadyFor + '; reason: '
                + currentReason(c) + '.',
            },
          },
          {
            alert: 'ProviderActionRequired',
            // The reason is part of the alert's labels: each one asks for a
            // different fix, and routing may depend on it.
            expr: |||
              provider_health_reason{%(providerHealthSelector)s, reason=~"%(actionRequiredRegex)s"} == 1
            ||| % c,
            'for': c.providerActionRequiredFor,
            labels: { severity: c.criticalSeverity },
            annotations: {
              summary: 'A provider target is not ready for a reason that waiting will not fix.',
              description:
                'Target {{ $labels.target }} of the {{ $labels.provider }} provider {{ $labels.name }} '
                + 'has reported {{ $labels.reason }} for more than ' + c.providerActionRequiredFor
                + '. This does not clear by itself: a credential, key, API setting, filter, '
                + 'storage pool, base volume, network, admission policy or image has to be fixed.',
            },
          },
          {
            alert: 'ProviderUnavailable',
            // A target counts as ready when any exporter replica sees it ready.
            expr: |||
              count by (%(byProvider)s) (
                max by (%(byTarget)s) (provider_health_ready{%(providerHealthSelector)s}) == 0
              )
              unless on (%(byProvider)s)
                (provider_health_ready{%(providerHealthSelector)s} == 1)
            ||| % c,
            'for': c.providerUnavailableFor,
            labels: { severity: c.criticalSeverity },
            annotations: {
              summary: 'No target of a provider can host proxies.',
              description:
                'None of the {{ $value }} targets of the {{ $labels.provider }} provider {{ $labels.name }} '
                + 'has been ready for more than ' + c.providerUnavailableFor + '; reasons: '
                + '{{ range $i, $r := printf "group by (reason) (provider_health_reason{%s} == 1)" ' % reasonsOf.matchers
                + reasonsOf.args + ' | query | sortByLabel "reason" }}'
                + '{{ if $i }}, {{ end }}{{ $r.Labels.reason }}{{ end }}.',
            },
          },
          {
            alert: 'ProviderCheckNearTimeout',
            // A check that already timed out is ProviderNotReady's business.
            expr: |||
              (
                provider_health_check_duration_seconds{%(providerHealthSelector)s}
                  > on (%(onProvider)s) group_left ()
                (%(nearTimeoutFraction)s * provider_health_check_timeout_seconds{%(providerHealthSelector)s})
              )
              unless on (%(onTarget)s)
                (provider_health_reason{%(providerHealthSelector)s, reason="Timeout"} == 1)
            ||| % c,
            'for': c.nearTimeoutFor,
            labels: { severity: c.warningSeverity },
            annotations: {
              summary: 'A provider check is close to its timeout.',
              description:
                'The check of target {{ $labels.target }} of the {{ $labels.provider }} provider '
                + '{{ $labels.name }} took {{ $value | humanizeDuration }}, more than '
                + c.nearTimeoutPercent + ' of its budget of '
                + valueOf(c, 'provider_health_check_timeout_seconds', timeoutLabels, 'humanizeDuration')
                + ', for more than ' + c.nearTimeoutFor
                + '. It will soon report Timeout.',
            },
          },
          {
            alert: 'KVMPoolLowSpace',
            // A pool of zero capacity gives NaN or +Inf here, never a match.
            expr: |||
              (
                provider_health_kvm_pool_available_bytes{%(providerHealthSelector)s}
                  / provider_health_kvm_pool_capacity_bytes{%(providerHealthSelector)s}
              ) < %(kvmPoolLowSpaceFraction)s
            ||| % c,
            'for': c.kvmPoolLowSpaceFor,
            labels: { severity: c.warningSeverity },
            annotations: {
              summary: 'A KVM storage pool is running out of space.',
              description:
                'Storage pool {{ $labels.pool }} on KVM host {{ $labels.target }} ({{ $labels.name }}) '
                + 'has {{ $value | humanizePercentage }} of its capacity available '
                + '(' + valueOf(c, 'provider_health_kvm_pool_available_bytes', poolLabels, 'humanize1024', 'B')
                + '), below the threshold of '
                + c.lowSpacePercent + '.',
            },
          },
          {
            alert: 'KVMPoolFillingUp',
            // Like node-mixin's NodeFilesystemSpaceFillingUp: the trend of
            // the last window, extrapolated over the horizon. A pool already
            // below the minimum is PoolFull (ProviderNotReady) or
            // KVMPoolLowSpace's business, not a forecast.
            expr: |||
              (
                predict_linear(provider_health_kvm_pool_available_bytes{%(providerHealthSelector)s}[%(kvmPoolFillingUpWindow)s], %(kvmPoolFillingUpHorizonSeconds)s)
                  < %(kvmPoolMinAvailableBytes)s
              )
              and
                provider_health_kvm_pool_available_bytes{%(providerHealthSelector)s} > %(kvmPoolMinAvailableBytes)s
            ||| % c,
            'for': c.kvmPoolFillingUpFor,
            labels: { severity: c.warningSeverity },
            annotations: {
              summary: 'A KVM storage pool is filling up.',
              description:
                'Storage pool {{ $labels.pool }} on KVM host {{ $labels.target }} ({{ $labels.name }}) has '
                + valueOf(c, 'provider_health_kvm_pool_available_bytes', poolLabels, 'humanize1024', 'B')
                + ' available and lost '
                + valueOf(c, lossPerHour, poolLabels, 'humanize1024', 'B')
                + ' per hour over the last '
                + c.kvmPoolFillingUpWindow + ': at that rate it '
                + (if c.kvmPoolMinAvailableBytes == '0' then 'is full'
                   else 'falls below {{ "%s" | humanize1024 }}B' % c.kvmPoolMinAvailableBytes)
                + ' within ' + c.kvmPoolFillingUpHorizon + '.',
            },
          },
          {
            alert: 'ProviderQuotaNearLimit',
            // Only the quotas configured in min_quota_headroom are exported.
            // A limit of 0 gives NaN (nothing used) or +Inf (used anyway).
            expr: |||
              (
                provider_health_gcp_quota_usage{%(providerHealthSelector)s}
                  / provider_health_gcp_quota_limit{%(providerHealthSelector)s}
                or
                provider_health_kubernetes_quota_used{%(providerHealthSelector)s}
                  / provider_health_kubernetes_quota_hard{%(providerHealthSelector)s}
              ) > %(providerQuotaNearLimitFraction)s
            ||| % c,
            'for': c.providerQuotaNearLimitFor,
            labels: { severity: c.warningSeverity },
            annotations: {
              summary: 'A provider quota is nearly used up.',
              description:
                '{{ if $labels.region }}GCP quota {{ $labels.metric }} of {{ $labels.name }} in region {{ $labels.region }} is at '
                + '{{ $value | humanizePercentage }} of its limit ('
                + valueOf(c, 'provider_health_gcp_quota_usage', gcpQuotaLabels) + ' of '
                + valueOf(c, 'provider_health_gcp_quota_limit', gcpQuotaLabels) + ')'
                + '{{ else }}ResourceQuota {{ $labels.quota }} in namespace {{ $labels.namespace }} ({{ $labels.name }}) '
                + 'is at {{ $value | humanizePercentage }} of its {{ $labels.resource }} limit ('
                + valueOf(c, 'provider_health_kubernetes_quota_used', kubernetesQuotaLabels) + ' of '
                + valueOf(c, 'provider_health_kubernetes_quota_hard', kubernetesQuotaLabels) + ')'
                + '{{ end }}, above ' + c.quotaNearLimitPercent + ' for more than ' + c.providerQuotaNearLimitFor
                + '. Once less than its min_quota_headroom is left, the check reports QuotaExhausted.',
            },
          },
          {
            alert: 'KVMConnectionFlapping',
            // Kept connections make this counter flat in steady state.
            expr: |||
              increase(provider_health_kvm_connects_total{%(providerHealthSelector)s}[1h]) > %(kvmReconnectsPerHour)s
            ||| % c,
            'for': c.kvmReconnectsFor,
            labels: { severity: c.warningSeverity },
            annotations: {
              summary: 'The exporter keeps reconnecting to a KVM host.',
              description:
                'The exporter established {{ $value | printf "%.0f" }} SSH+libvirt sessions to KVM host '
                + '{{ $labels.target }} ({{ $labels.name }}) in the last hour; a kept connection '
                + 'should last across scrapes.',
            },
          },
          {
            alert: 'ProviderCapacityLow',
            // The capacity is absent where no headroom key is set: only
            // the entries that say what one proxy needs are judged.
            expr: |||
              provider_health_capacity{%(providerHealthSelector)s} < %(capacityLowProxies)s
            ||| % c,
            'for': c.capacityLowFor,
            labels: { severity: c.warningSeverity },
            annotations: {
              summary: 'Few more proxies fit on a provider.',
              description:
                '{{ $labels.provider }} entry {{ $labels.name }} (target {{ $labels.target }})' + c.inCluster
                + ' has room for {{ $value | printf "%.0f" }} more proxies, fewer than ' + c.capacityLowProxies
                + ' for more than ' + c.capacityLowFor + '. The status page names the constraint that binds it.',
            },
          },
          {
            alert: 'ProviderCapacityRunningOut',
            // Like KVMPoolFillingUp: the trend of the last window,
            // extrapolated over the horizon. A target with no room left is
            // ProviderNotReady's (and ProviderCapacityLow's), not a forecast.
            expr: |||
              (
                predict_linear(provider_health_capacity{%(providerHealthSelector)s}[%(capacityWindow)s], %(capacityHorizonSeconds)s)
                  < 1
              )
              and
                provider_health_capacity{%(providerHealthSelector)s} >= 1
            ||| % c,
            'for': c.capacityRunningOutFor,
            labels: { severity: c.warningSeverity },
            annotations: {
              summary: 'A provider is running out of room for proxies.',
              description:
                '{{ $labels.provider }} entry {{ $labels.name }} (target {{ $labels.target }})' + c.inCluster
                + ' has room for ' + valueOf(c, 'provider_health_capacity', ['job', 'instance', 'provider', 'name', 'target'], 'printf "%.0f"')
                + ' more proxies; at the rate it lost room over the last '
                + c.capacityWindow + ' none is left within ' + c.capacityHorizon + '.',
            },
          },
          {
            alert: 'ProviderCapacityNotDomainResilient',
            // provider_health_capacity_after_loss below 0, negated so that
            // the value is the number of proxies left without a place. The
            // exporter exports it for kubernetes and gcp entries (one series
            // per target and domain); the recording rule of
            // rules/rules.libsonnet makes it for kvm entries, per entry and
            // domain, without a target.
            expr: |||
              -provider_health_capacity_after_loss{%(providerHealthSelector)s} > 0
            ||| % c,
            'for': c.capacityNotDomainResilientFor,
            labels: { severity: c.warningSeverity },
            annotations: {
              summary: 'Losing one failure domain would leave proxies without a place.',
              description:
                '{{ $labels.provider }} entry {{ $labels.name }}{{ with $labels.target }} (target {{ . }}){{ end }}' + c.inCluster
                + ': if domain {{ $labels.domain }} were lost, {{ $value | printf "%.0f" }} of the proxies it runs'
                + ' would find no place in the other domains, for more than ' + c.capacityNotDomainResilientFor
                + ". The status page shows each domain's capacity, proxies and capacity after its loss.",
            },
          },
        ],
      },
    ],
  },
}
