package config

// What the JSON Schema of the file (Schema) says of each key beyond its Go
// type: the checks of Load a schema can express, so an editor or `helm
// lint` shows them where the file is written. Load stays the judge: a
// pattern here admits at least every value Load takes.

// durationPattern is a duration as Prometheus writes them (model.Duration):
// units from y to ms, largest first, or "0".
const durationPattern = `^(0|([0-9]+y)?([0-9]+w)?([0-9]+d)?([0-9]+h)?([0-9]+m)?([0-9]+s)?([0-9]+ms)?)$`

// JSONSchema implements JSONSchemaer: a Duration is a string ("10s"); a
// YAML 0 reads as "0".
func (Duration) JSONSchema() Keywords {
	return Keywords{
		"type":      []string{"string", "integer"},
		"pattern":   durationPattern,
		"minLength": 1,
		"minimum":   0,
		"maximum":   0,
	}
}

// positive makes a duration's schema refuse zero ("0", "0s", "0m0s").
func positive(k Keywords) {
	k["type"] = "string"
	delete(k, "minimum")
	delete(k, "maximum")
	k["not"] = Keywords{"pattern": `^[0ywdhms]*$`}
}

// positiveDuration is the schema of a duration that must not be zero.
func positiveDuration(desc string) Keywords {
	k := Duration(0).JSONSchema()
	positive(k)
	k["minimum"], k["maximum"] = nil, nil // deleted where merged
	k["description"] = desc
	return k
}

// JSONSchema implements JSONSchemaer: the key's value is the template's
// path.
func (PodTemplate) JSONSchema() Keywords { return Keywords{"type": "string", "minLength": 1} }

// bytePattern is what ParseBytes may take: plain bytes or a binary unit,
// with an optional B ("20GiB", "4Gi", "1073741824"); empty is not set.
const bytePattern = `^(\s*\+?([0-9]+(\.[0-9]*)?|\.[0-9]+)((Ki|Mi|Gi|Ti|Pi|Ei)B?)?\s*)?$`

// byteQuantity is the schema of a byte minimum; a YAML number is bytes.
func byteQuantity(desc string) Keywords {
	return Keywords{"type": []string{"string", "integer"}, "pattern": bytePattern, "minimum": 0, "description": desc}
}

// quantityPattern is a non-negative Kubernetes quantity ("1", "500m",
// "4Gi", "1e3") whose exponent has at most two digits (internal/quantity's
// bound is 10^±64).
const quantityPattern = `^\s*\+?([0-9]+(\.[0-9]*)?|\.[0-9]+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]{1,2})?\s*$`

// addressPattern is a kvm host's address: a host, host:port, [IPv6] or
// [IPv6]:port, or a bare IPv6 address; a port from 1 to 65535.
const addressPattern = `^([^:]+|[^:]+:\+?0*(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3})|\[[^\]]+\](:\+?0*(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3}))?|[^\[\]]*:[^\[\]]*:[^\[\]]*)$`

// libvirtName is the schema of a volume or network name.
func libvirtName(desc, pattern string) Keywords {
	return Keywords{"pattern": pattern, "maxLength": maxLibvirtName, "description": desc}
}

// nonEmpty is a branch of anyOf: key is set and not empty.
func nonEmpty(key string) Keywords {
	return Keywords{"required": []string{key}, "properties": map[string]any{key: Keywords{"minLength": 1}}}
}

// SchemaKeywords implements SchemaKeywordser.
func (Defaults) SchemaKeywords() map[string]Keywords {
	return map[string]Keywords{
		"timeout":      positiveDuration("Timeout of every check that sets none (default 10s)."),
		"min_interval": {"description": "Least time between two checks of an entry that sets none (default 0: every scrape checks)."},
	}
}

// SchemaKeywords implements SchemaKeywordser.
func (Kubernetes) SchemaKeywords() map[string]Keywords {
	ns := []string{"namespace"}
	return map[string]Keywords{
		"": {"dependencies": map[string]any{
			"context":            []string{"kubeconfig"},
			"can_i":              ns,
			"min_quota_headroom": ns,
			"pod_template":       ns,
			"schedule":           []string{"pod_template"},
		}},
		"kubeconfig":     {"description": "Kubeconfig file of the cluster; empty: the in-cluster ServiceAccount."},
		"context":        {"description": "Context of the kubeconfig; default: its current context. Needs kubeconfig."},
		"label_selector": {"description": "Label selector of the operator's proxy Pods (default app.kubernetes.io/managed-by=egress-proxies-operator)."},
		"namespace": {
			"pattern":     namespaceName.String(),
			"description": "Namespace of the proxies, for can_i, min_quota_headroom and pod_template.",
		},
		"can_i": {
			"maxItems":    MaxCanI,
			"description": "What the exporter's identity must be allowed in namespace, as kubectl auth can-i takes it (\"create pods\").",
			"items":       Keywords{"type": "string", "pattern": `^\s*(\*|[a-z0-9]([-a-z0-9]*[a-z0-9])?)\s+[a-z0-9*][-a-z0-9.*/]*\s*$`},
		},
		"min_quota_headroom": {
			"description":          "Least hard - used a proxy needs per ResourceQuota resource of namespace (pods: 1, requests.memory: 4Gi).",
			"propertyNames":        Keywords{"minLength": 1},
			"additionalProperties": Keywords{"type": []string{"string", "number"}, "pattern": quantityPattern, "minimum": 0},
		},
		"pod_template": {"description": "File of the Pod manifest the operator creates proxies from, dry-run in namespace. Needs namespace."},
		"schedule":     {"description": "Fit the Pod the dry run returns on the cluster's Nodes as kube-scheduler's filters would (Unschedulable, capacity); needs pod_template and list/watch on nodes and pods."},
	}
}

// SchemaKeywords implements SchemaKeywordser.
func (GCP) SchemaKeywords() map[string]Keywords {
	return map[string]Keywords{
		"": {
			"required": []string{"project"},
			"allOf": []any{
				Keywords{
					"if":   Keywords{"required": []string{"regions"}, "properties": map[string]any{"regions": Keywords{"minItems": 1}}},
					"then": Keywords{"required": []string{"min_quota_headroom"}, "properties": map[string]any{"min_quota_headroom": Keywords{"minProperties": 1}}},
				},
				Keywords{
					"if":   Keywords{"required": []string{"min_quota_headroom"}, "properties": map[string]any{"min_quota_headroom": Keywords{"minProperties": 1}}},
					"then": Keywords{"required": []string{"regions"}, "properties": map[string]any{"regions": Keywords{"minItems": 1}}},
				},
			},
		},
		"project":          {"minLength": 1, "description": "ID of the Google Cloud project."},
		"credentials_file": {"description": "Service account key or external account file; empty: Application Default Credentials."},
		"filter":           {"description": "Compute API filter of the proxy instances (default labels.managed-by = \"egress-proxies-operator\")."},
		"endpoint": {
			"description": "Compute API endpoint; default https://compute.googleapis.com/compute/v1/. Plain http only to a loopback address.",
			"pattern":     `^([Hh][Tt][Tt][Pp][Ss]://[^/?#]+([/?#].*)?|[Hh][Tt][Tt][Pp]://(127\.[0-9.]+|\[[0-9a-fA-F:.]+\])(:[0-9]+)?([/?#].*)?)$`,
		},
		"regions": {
			"maxItems":    MaxGCPRegions,
			"uniqueItems": true,
			"items":       Keywords{"pattern": gcpRegion.String()},
			"description": "Regions whose quotas min_quota_headroom checks; set together with it.",
		},
		"min_quota_headroom": {
			"description":          "Least limit - usage per Compute quota metric (CPUS: 8) in every region; set together with regions.",
			"propertyNames":        Keywords{"pattern": gcpQuotaMetric.String()},
			"additionalProperties": Keywords{"type": "number", "minimum": 0},
		},
		"source_image": {
			"pattern":     gcpSourceImage.String(),
			"description": "Image the proxies boot: projects/P/global/images/NAME or projects/P/global/images/family/F.",
		},
	}
}

// SchemaKeywords implements SchemaKeywordser. A host takes user and
// private_key_file from the entry when it sets none, so each must be on
// the entry or on every host.
func (KVM) SchemaKeywords() map[string]Keywords {
	everyHost := func(key string) Keywords {
		return Keywords{"properties": map[string]any{"hosts": Keywords{"items": nonEmpty(key)}}}
	}
	return map[string]Keywords{
		"": {
			"required": []string{"hosts"},
			"allOf": []any{
				Keywords{"anyOf": []any{nonEmpty("known_hosts_file"), Keywords{"required": []string{"insecure_ignore_host_key"}, "properties": map[string]any{"insecure_ignore_host_key": Keywords{"const": true}}}}},
				Keywords{"anyOf": []any{nonEmpty("user"), everyHost("user")}},
				Keywords{"anyOf": []any{nonEmpty("private_key_file"), everyHost("private_key_file")}},
			},
		},
		"user":                     {"description": "SSH user of every host that sets none."},
		"private_key_file":         {"description": "SSH private key of every host that sets none."},
		"passphrase_file":          {"description": "File holding the private key's passphrase."},
		"known_hosts_file":         {"description": "known_hosts file the hosts' keys are checked against; required unless insecure_ignore_host_key."},
		"insecure_ignore_host_key": {"description": "Accept any host key (tests only)."},
		"libvirt_socket":           {"minLength": 1, "description": "libvirtd's socket on the host (default /var/run/libvirt/libvirt-sock)."},
		"libvirt_uri":              {"minLength": 1, "description": "libvirt connection URI (default qemu:///system)."},
		"pool":                     {"minLength": 1, "description": "Storage pool of the proxies' disks (default default)."},
		"max_concurrent_dials":     {"minimum": 1, "description": "Most SSH connections dialled at once (default 128)."},
		"dial_timeout":             positiveDuration("Timeout of one SSH dial and handshake (default 3s)."),
		"min_pool_available":       byteQuantity("Least free space of the pool (20GiB); overridable per host."),
		"min_free_memory":          byteQuantity("Least free memory of the host (4GiB); overridable per host."),
		"hosts":                    {"minItems": 1, "description": "The hosts, each a target."},
		"volume":                   libvirtName("Base image volume that must exist in the pool; overridable per host.", NoControlCharacters),
		"network":                  libvirtName("libvirt network the proxies attach to, which must be active; overridable per host.", `^[^\x00-\x1f\x7f/]*$`),
	}
}

// SchemaKeywords implements SchemaKeywordser.
func (KVMHost) SchemaKeywords() map[string]Keywords {
	return map[string]Keywords{
		"": {"required": []string{"address"}},
		"address": {
			"pattern":     addressPattern,
			"description": "SSH address, host or host:port (port 22 by default).",
		},
		"name":               {"pattern": NoControlCharacters, "description": "The target label; default: the address's host."},
		"user":               {"description": "SSH user; default: the entry's."},
		"pool":               {"description": "Storage pool; default: the entry's."},
		"private_key_file":   {"description": "SSH private key; default: the entry's."},
		"min_pool_available": byteQuantity("Least free space of the pool; default: the entry's."),
		"min_free_memory":    byteQuantity("Least free memory; default: the entry's."),
		"volume":             libvirtName("Base image volume; default: the entry's.", NoControlCharacters),
		"network":            libvirtName("libvirt network; default: the entry's.", `^[^\x00-\x1f\x7f/]*$`),
	}
}
