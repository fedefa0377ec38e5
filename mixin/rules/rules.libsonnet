// The recording rules: what the exporter cannot compute because no one
// exporter sees all of its inputs.

{
  prometheusRules+:: {
    local c = $._config,
    // With showMultiCluster every aggregation and join keeps the cluster
    // label, so that two clusters' entries of the same name never merge
    // (docs/alerts.md: "Multi-cluster").
    local cluster = if c.showMultiCluster then [c.clusterLabel] else [],
    local by(labels) = std.join(', ', cluster + ['job', 'provider'] + labels),
    local entry = by(['name']),
    local domain = by(['name', 'domain']),
    local host = by(['name', 'target', 'domain']),
    // One series per KVM host and domain: a host is a target, and each
    // target is checked by the exporter replica whose shard holds it (or by
    // both of an HA pair, which max counts once). Every replica exports
    // under the same job and its own instance (in /probe mode, the probe
    // target's instance and the exporter label), which the aggregation drops.
    local perHost(metric) = 'max by (%s) (%s{%s, provider="kvm"})' % [host, metric, c.providerHealthSelector],
    local capacity = perHost('provider_health_domain_capacity'),
    local proxies = perHost('provider_health_domain_proxies'),

    groups+: [
      {
        name: 'provider-health-rules',
        rules: [
          {
            // A KVM entry's capacity after losing each failure domain
            // (docs/metrics.md: "Capacity"): the room on its hosts outside
            // the domain, less the proxies the domain ran, which must be
            // created again there. Negative is the number of proxies left
            // without a place. The exporter exports it for kubernetes and
            // gcp entries, whose checks see every domain at once; a KVM
            // entry's hosts may be checked by several replicas, so only
            // Prometheus has them all. It has no target label (the entry's
            // hosts are its targets).
            //
            // A host that reports one of the two numbers without the other
            // (a check that counted the proxy VMs and failed before the room,
            // or an entry without proxy_vm_name) leaves its entry without
            // the series: an unknown number counted as zero would make a
            // loss look better or worse than it is.
            record: 'provider_health_capacity_after_loss',
            expr: |||
              (
                  sum by (%(entry)s) (%(capacity)s)
                - on (%(entry)s) group_right ()
                  sum by (%(domain)s) (%(capacity)s)
                - on (%(domain)s)
                  sum by (%(domain)s) (%(proxies)s)
              )
              unless on (%(entry)s)
              (
                  (%(capacity)s unless on (%(host)s) %(proxies)s)
                or
                  (%(proxies)s unless on (%(host)s) %(capacity)s)
              )
            ||| % { entry: entry, domain: domain, host: host, capacity: capacity, proxies: proxies },
          },
        ],
      },
    ],
  },
}
