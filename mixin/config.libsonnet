{
  _config+:: {
    // Selects the exporter's own scrape job. Every alert expression and the
    // dashboards' default job are built from it.
    providerHealthSelector: 'job="provider-health"',

    // In /probe mode (docs/scaling.md: "Scaling out") every probe target is
    // a scrape of its own under the same job, and its `up` is 0 whenever the
    // exporter is away. The scrape configs of deploy/ (prometheus-probe.yml,
    // prometheus-sharded.yml, the ScrapeConfigs of the kustomize component
    // and the Helm chart) put probeLabel on every probe target, set to the
    // address of the exporter that answered it; the exporter's own scrape
    // (/metrics, or /metrics?collect[]=exporter beside /probe) has no such
    // label. The exporter's own health (ProviderHealthExporterDown,
    // ProviderHealthConfigReloadFailed, the dashboard's "Exporters up") is
    // judged from exporterSelector, its own scrape only, so an exporter that
    // goes away is one alert, not one per probe target;
    // ProviderHealthProbeFailed watches the probe targets.
    probeLabel: 'exporter',
    exporterSelector: '%s, %s=""' % [self.providerHealthSelector, self.probeLabel],

    // The severity label of the alerts that page and of those that do not;
    // set them to what your Alertmanager routes on.
    criticalSeverity: 'critical',
    warningSeverity: 'warning',

    // How long a condition must hold before its alert fires.
    exporterDownFor: '5m',
    probeFailedFor: '5m',
    providerNotReadyFor: '5m',
    providerActionRequiredFor: '5m',
    providerUnavailableFor: '5m',
    nearTimeoutFor: '15m',
    kvmPoolLowSpaceFor: '15m',
    configReloadFailedFor: '5m',
    kvmReconnectsFor: '15m',
    providerQuotaNearLimitFor: '15m',
    kvmPoolFillingUpFor: '1h',

    // A check whose duration is above this fraction of the budget its scrape
    // gave it is about to turn into a Timeout verdict.
    nearTimeoutFraction: 0.8,

    // A KVM storage pool whose available bytes are below this fraction of its
    // capacity cannot take many more proxy disks.
    kvmPoolLowSpaceFraction: 0.1,

    // A configured quota (a GCP region's quota metric, a Kubernetes
    // ResourceQuota's resource: the min_quota_headroom keys of
    // docs/configuration.md) whose usage is above this fraction of its limit
    // raises ProviderQuotaNearLimit, before the check turns QuotaExhausted.
    providerQuotaNearLimitFraction: 0.9,

    // KVMPoolFillingUp extrapolates each pool's available bytes over the
    // last kvmPoolFillingUpWindow and fires when they would fall below
    // kvmPoolMinAvailableBytes within kvmPoolFillingUpHorizon. The exporter
    // exports no series for a host's min_pool_available, so the minimum is
    // set here: 0 (the default) warns before the pool is full; set it to the
    // smallest min_pool_available of your kvm entries to warn before the
    // check turns PoolFull. Durations in s, m, h, d or w.
    kvmPoolFillingUpWindow: '6h',
    kvmPoolFillingUpHorizon: '24h',
    kvmPoolMinAvailableBytes: 0,

    // ProviderCapacityLow fires when a target has room for fewer than
    // capacityLowProxies more proxies (provider_health_capacity,
    // docs/metrics.md: "Capacity") for capacityLowFor: raise it above the
    // largest rollout you make at once.
    capacityLowProxies: 5,
    capacityLowFor: '15m',
    // ProviderCapacityRunningOut extrapolates each target's capacity over
    // the last capacityWindow and fires when it would fall below 1 proxy
    // within capacityHorizon while there is still room now. Durations in
    // s, m, h, d or w.
    capacityWindow: '6h',
    capacityHorizon: '24h',
    capacityRunningOutFor: '1h',
    // ProviderCapacityNotDomainResilient fires when losing some failure
    // domain (a zone, region or rack: docs/metrics.md: "Capacity") would
    // leave proxies without a place for this long.
    capacityNotDomainResilientFor: '15m',

    // Kept KVM connections are reused across scrapes, so sessions established
    // per hour stay near zero in steady state; more than this means the
    // connection to a host keeps breaking.
    kvmReconnectsPerHour: 6,

    // Reasons (docs/metrics.md: "Reasons") that waiting does not fix: a human has to change a
    // credential, a key, an API setting, a filter, a pool, a volume or a
    // network, or what an admission plugin or webhook refuses in the proxy
    // Pod (AdmissionDenied). They raise ProviderActionRequired on top of
    // ProviderNotReady.
    actionRequiredReasons: [
      'APIDisabled',
      'AdmissionDenied',
      'CredentialsUnavailable',
      'Forbidden',
      'HostKeyMismatch',
      'HostKeyUnknown',
      'ImageUnavailable',
      'InvalidRequest',
      'LibvirtConnectFailed',
      'NetworkInactive',
      'NetworkMissing',
      'NotFound',
      'PoolInactive',
      'PoolMissing',
      'SSHAuthFailed',
      'SSHMaterialInvalid',
      'TLSError',
      'Unauthorized',
      'VolumeMissing',
    ],

    // Labels that identify one exporter's view of a target. Joins between
    // series of the same scrape match on these, so that an HA pair of
    // exporters under one job never makes a join many-to-many.
    instanceLabels: ['job', 'instance'],

    // %s is replaced by the lower-cased alert name, which is the anchor
    // GitHub derives from the runbook's "## AlertName" heading.
    runbookURLPattern: 'https://github.com/egress-proxies/provider_health_exporter/blob/main/mixin/runbook.md#%s',

    // Dashboards.
    dashboardNamePrefix: 'Provider health / ',
    dashboardTags: ['provider-health'],
    dashboardUIDPrefix: 'provider-health-',
    dashboardTimezone: 'utc',
    dashboardRefresh: '30s',
    dashboardTimeFrom: 'now-6h',
    // The Prometheus data source the datasource variable starts on.
    grafanaDatasource: 'prometheus',
    // The job variable's default, matching providerHealthSelector; the job
    // variable offers the jobs of the series providerHealthSelector selects.
    dashboardJob: 'provider-health',
    // Several clusters' exporters in one data source or one global ruler
    // (Thanos, Mimir), told apart by clusterLabel: a cluster variable and a
    // cluster filter on every dashboard query, and alerts that keep the
    // label in every aggregation and join and tell which cluster lost its
    // exporter (docs/alerts.md: "Multi-cluster"). Off, the variable is
    // hidden and neither queries nor alerts name the label.
    showMultiCluster: false,
    clusterLabel: 'cluster',
    // With showMultiCluster, how long ProviderHealthExporterDown remembers a
    // cluster whose exporter is no longer scraped at all.
    exporterGoneLookback: '1d',

    // Labels put on the generated PrometheusRule, for a Prometheus Operator
    // whose ruleSelector picks rules by label.
    prometheusRuleName: 'provider-health-exporter',
    prometheusRuleNamespace: 'provider-health',
    prometheusRuleLabels: {
      'app.kubernetes.io/name': 'provider-health-exporter',
      'app.kubernetes.io/component': 'alert-rules',
    },
  },
}
