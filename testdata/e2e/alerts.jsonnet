// The mixin's alerts with short `for` durations, for the end-to-end test
// (testdata/e2e/run-e2e.sh): Prometheus evaluates them every second, so an
// alert fires a few seconds after its condition starts instead of minutes.
// Only durations change; expressions, labels and annotations are the
// mixin's own.
//
//   go tool -modfile=tools/go.mod jsonnet -S testdata/e2e/alerts.jsonnet
local mixin = (import '../../mixin/mixin.libsonnet') + {
  _config+:: {
    exporterDownFor: '5s',
    providerNotReadyFor: '5s',
    providerActionRequiredFor: '5s',
    providerUnavailableFor: '5s',
    nearTimeoutFor: '5s',
    kvmPoolLowSpaceFor: '5s',
    configReloadFailedFor: '3s',
    kvmReconnectsFor: '5s',
    providerQuotaNearLimitFor: '5s',
    kvmPoolFillingUpFor: '5s',
    capacityLowFor: '5s',
    capacityNotDomainResilientFor: '5s',
    // Not shortened: the real host's free memory moves within seconds, and
    // a trend of seconds extrapolated over capacityHorizon is noise, which
    // the mixin's hour of `for` is there to ignore.
  },
};

// The recording rules too: ProviderCapacityNotDomainResilient reads KVM
// entries' provider_health_capacity_after_loss from one.
std.manifestYamlDoc({ groups: mixin.prometheusAlerts.groups + mixin.prometheusRules.groups }, indent_array_in_object=true, quote_keys=false)
