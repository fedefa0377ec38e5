// The alerts of docs/alerts.md's "Alerts" section. Severity follows what a human has to do:
//   critical: act now, nothing recovers by itself or a whole provider is lost;
//   warning:  look during working hours, or it may clear by itself.
local cfg(c) = c {
  onTarget: std.join(', ', c.instanceLabels + ['provider', 'name', 'target']),
  onProvider: std.join(', ', c.instanceLabels + ['provider', 'name']),
  actionRequiredRegex: std.join('|', std.sort(c.actionRequiredReasons)),
  nearTimeoutPercent: std.toString(std.round(c.nearTimeoutFraction * 100)) + '%',
  lowSpacePercent: std.toString(std.round(c.kvmPoolLowSpaceFraction * 100)) + '%',
  // %g prints 0.8, where jsonnet's default number format prints 0.80000000000000004.
  nearTimeoutFraction: '%g' % c.nearTimeoutFraction,
  kvmPoolLowSpaceFraction: '%g' % c.kvmPoolLowSpaceFraction,
  kvmReconnectsPerHour: '%g' % c.kvmReconnectsPerHour,
};

// A template fragment printing the current reason of the alert's target,
// looked up in the same scrape (job and instance) as the alerting series.
local currentReason =
  '{{ with printf "provider_health_reason{job=%q,instance=%q,provider=%q,name=%q,target=%q} == 1" '
  + '$labels.job $labels.instance $labels.provider $labels.name $labels.target | query }}'
  + '{{ range . }}{{ .Labels.reason }}{{ end }}{{ else }}unknown{{ end }}';

{
  prometheusAlerts+:: {
    local c = cfg($._config),
    groups+: [
      {
        name: 'provider-health-exporter',
        rules: [
          {
            alert: 'ProviderHealthExporterDown',
            // absent() catches the job vanishing from service discovery,
            // which up == 0 alone cannot see.
            expr: |||
              up{%(providerHealthSelector)s} == 0
              or
              absent(up{%(providerHealthSelector)s})
            ||| % c,
            'for': c.exporterDownFor,
            labels: { severity: c.criticalSeverity },
            annotations: {
              summary: 'The provider health exporter cannot be scraped.',
              description:
                '{{ with $labels.instance }}Prometheus cannot scrape the exporter at {{ . }}'
                + '{{ else }}Prometheus has no target to scrape{{ end }} (job {{ $labels.job }}) '
                + 'for more than ' + c.exporterDownFor + '. Provider health is unknown meanwhile: '
                + 'no other provider-health alert can fire.',
            },
          },
          {
            alert: 'ProviderHealthConfigReloadFailed',
            expr: |||
              provider_health_exporter_config_last_reload_successful{%(providerHealthSelector)s} == 0
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
                + currentReason + '.',
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
                + '. This does not clear by itself: a credential, key, API setting, filter or '
                + 'storage pool has to be fixed.',
            },
          },
          {
            alert: 'ProviderUnavailable',
            // A target counts as ready when any exporter replica sees it ready.
            expr: |||
              count by (job, provider, name) (
                max by (job, provider, name, target) (provider_health_ready{%(providerHealthSelector)s}) == 0
              )
              unless on (job, provider, name)
                (provider_health_ready{%(providerHealthSelector)s} == 1)
            ||| % c,
            'for': c.providerUnavailableFor,
            labels: { severity: c.criticalSeverity },
            annotations: {
              summary: 'No target of a provider can host proxies.',
              description:
                'None of the {{ $value }} targets of the {{ $labels.provider }} provider {{ $labels.name }} '
                + 'has been ready for more than ' + c.providerUnavailableFor + '; reasons: '
                + '{{ range $i, $r := printf "group by (reason) (provider_health_reason{job=%q,provider=%q,name=%q} == 1)" '
                + '$labels.job $labels.provider $labels.name | query | sortByLabel "reason" }}'
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
                + '{{ with printf "provider_health_check_timeout_seconds{job=%q,instance=%q,provider=%q,name=%q}" '
                + '$labels.job $labels.instance $labels.provider $labels.name | query }}'
                + '{{ . | first | value | humanizeDuration }}{{ end }}, for more than ' + c.nearTimeoutFor
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
                + '({{ with printf "provider_health_kvm_pool_available_bytes{job=%q,instance=%q,name=%q,target=%q,pool=%q}" '
                + '$labels.job $labels.instance $labels.name $labels.target $labels.pool | query }}'
                + '{{ . | first | value | humanize1024 }}B{{ end }}), below the threshold of '
                + c.lowSpacePercent + '.',
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
        ],
      },
    ],
  },
}
