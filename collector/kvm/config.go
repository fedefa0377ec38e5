package kvm

// The kvm section of the configuration file (docs/configuration.md:
// "KVM"): an entry's keys and its hosts', their defaults, how Load
// validates them and what the JSON Schema says of them.

import (
	"errors"
	"fmt"
	"math"
	"net"
	"path"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/egress-proxies/provider_health_exporter/config"
	"github.com/egress-proxies/provider_health_exporter/internal/boundedfile"
	"github.com/egress-proxies/provider_health_exporter/internal/quantity"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

// The defaults of a kvm entry's keys (docs/configuration.md: "KVM").
const (
	DefaultLibvirtSocket      = "/var/run/libvirt/libvirt-sock"
	DefaultLibvirtURI         = "qemu:///system"
	DefaultPool               = "default"
	DefaultMaxConcurrentDials = 128
	DefaultDialTimeout        = config.Duration(3 * time.Second)
	DefaultSSHPort            = "22"
	// DefaultCPUAllocationRatio and DefaultReservedMemory apply where
	// min_free_vcpus, respectively memory_allocation_ratio, is set and
	// the key itself is not (docs/configuration.md: "Promised
	// resources (KVM)"): OpenStack Nova's initial_cpu_allocation_ratio and
	// reserved_host_memory_mb, 4.0 and 512 MB since its 2023.1 release
	// (nova/conf/compute.py at tag 27.0.0).
	DefaultCPUAllocationRatio = 4.0
	DefaultReservedMemory     = "512MiB"
)

// Section is the kvm section of the configuration file: one entry a group
// of hosts.
func Section() config.Section {
	return config.Section{Kind: Name, New: func() config.Entry {
		return &Entry{
			LibvirtSocket:      DefaultLibvirtSocket,
			LibvirtURI:         DefaultLibvirtURI,
			Pool:               DefaultPool,
			MaxConcurrentDials: DefaultMaxConcurrentDials,
			DialTimeout:        DefaultDialTimeout,
		}
	}, Summary: func(entries []config.Entry) string {
		hosts := 0
		for _, e := range entries {
			if e != nil {
				hosts += e.TargetCount()
			}
		}
		return fmt.Sprintf("%d kvm (%d hosts)", len(entries), hosts)
	}}
}

// Entry is one entry of the kvm section: a group of hosts sharing SSH and
// libvirt settings.
type Entry struct {
	Name                  string          `yaml:"name"`
	User                  string          `yaml:"user,omitempty"`
	PrivateKeyFile        string          `yaml:"private_key_file,omitempty"`
	PassphraseFile        string          `yaml:"passphrase_file,omitempty"`
	KnownHostsFile        string          `yaml:"known_hosts_file,omitempty"`
	InsecureIgnoreHostKey bool            `yaml:"insecure_ignore_host_key,omitempty"`
	LibvirtSocket         string          `yaml:"libvirt_socket,omitempty"`
	LibvirtURI            string          `yaml:"libvirt_uri,omitempty"`
	Pool                  string          `yaml:"pool,omitempty"`
	MaxConcurrentDials    int             `yaml:"max_concurrent_dials,omitempty"`
	DialTimeout           config.Duration `yaml:"dial_timeout,omitempty"`
	// MinPoolAvailable and MinFreeMemory are byte quantities ("20GiB"),
	// optional, overridable per host (docs/configuration.md: "KVM").
	MinPoolAvailable string `yaml:"min_pool_available,omitempty"`
	MinFreeMemory    string `yaml:"min_free_memory,omitempty"`
	// The promised-resource keys (docs/configuration.md: "Promised
	// resources (KVM)"), overridable per host: one proxy's vCPUs, the
	// allocation ratios and the memory never promised to domains. A
	// ratio is a pointer so that an explicit 0 is refused, not taken for
	// unset.
	MinFreeVCPUs          int      `yaml:"min_free_vcpus,omitempty"`
	CPUAllocationRatio    *float64 `yaml:"cpu_allocation_ratio,omitempty"`
	MemoryAllocationRatio *float64 `yaml:"memory_allocation_ratio,omitempty"`
	ReservedMemory        string   `yaml:"reserved_memory,omitempty"`
	DiskAllocationRatio   *float64 `yaml:"disk_allocation_ratio,omitempty"`
	Hosts                 []*Host  `yaml:"hosts"`
	config.Check          `yaml:",inline"`

	// Volume and Network are the optional placement checks, overridable
	// per host (docs/configuration.md: "KVM"): the base image's volume in
	// the pool and the libvirt network proxies attach to.
	Volume  string `yaml:"volume,omitempty"`
	Network string `yaml:"network,omitempty"`
	// ProxyVMName is the glob (path.Match) of the proxy VMs' libvirt
	// domain names, overridable per host: with it each host counts its
	// proxies (docs/configuration.md: "Failure domains (KVM)").
	ProxyVMName string `yaml:"proxy_vm_name,omitempty"`
}

// EntryName implements config.Entry.
func (v *Entry) EntryName() string { return v.Name }

// ResolvePaths implements config.Entry.
func (v *Entry) ResolvePaths(join func(*string)) {
	join(&v.PrivateKeyFile)
	join(&v.PassphraseFile)
	join(&v.KnownHostsFile)
	for _, h := range v.Hosts {
		if h != nil && h.HostSettings != nil {
			join(&h.PrivateKeyFile)
		}
	}
}

// TargetCount implements config.Entry: one target per host.
func (v *Entry) TargetCount() int { return len(v.Hosts) }

// Host is one host of an entry. After Load, Address has a port, Name is
// set, and HostSettings holds the effective settings (the host's own or
// the entry's).
type Host struct {
	Address string `yaml:"address"`
	Name    string `yaml:"name,omitempty"`
	// Domain is the failure domain the host shares with others (a rack,
	// a room, a zone), the domain label of its domain series; a host's
	// own, never the entry's (docs/configuration.md: "Failure domains
	// (KVM)").
	Domain string `yaml:"domain,omitempty"`
	// HostSettings holds the keys a host may set over its entry's. Read
	// from the file it is nil unless the host sets one of them. After
	// Load it is never nil, and every host that sets none shares the
	// entry's one value: a 16 MiB file's 261,571 hosts are held twice
	// during a reload, and a host costs 72 bytes (its domain included) instead of 264
	// (docs/scaling.md: "Large configurations"). Write to it only
	// through a host's own copy.
	*HostSettings `yaml:",inline"`
}

// HostSettings are the keys a host may set over its entry's.
type HostSettings struct {
	User           string `yaml:"user,omitempty"`
	Pool           string `yaml:"pool,omitempty"`
	PrivateKeyFile string `yaml:"private_key_file,omitempty"`
	// MinPoolAvailable and MinFreeMemory override the entry's; after Load
	// they hold the effective values, and the Bytes fields below them
	// parsed (0: not set).
	MinPoolAvailable      string `yaml:"min_pool_available,omitempty"`
	MinFreeMemory         string `yaml:"min_free_memory,omitempty"`
	MinPoolAvailableBytes uint64 `yaml:"-"`
	MinFreeMemoryBytes    uint64 `yaml:"-"`
	// The promised-resource keys override the entry's; after Load they
	// hold the effective values and Promised their parsed form, with the
	// defaults applied where a resource is counted.
	MinFreeVCPUs          int       `yaml:"min_free_vcpus,omitempty"`
	CPUAllocationRatio    *float64  `yaml:"cpu_allocation_ratio,omitempty"`
	MemoryAllocationRatio *float64  `yaml:"memory_allocation_ratio,omitempty"`
	ReservedMemory        string    `yaml:"reserved_memory,omitempty"`
	DiskAllocationRatio   *float64  `yaml:"disk_allocation_ratio,omitempty"`
	Promised              *Promised `yaml:"-"`
	// Volume and Network override the entry's; after Load they hold the
	// effective values ("": not checked).
	Volume  string `yaml:"volume,omitempty"`
	Network string `yaml:"network,omitempty"`
	// ProxyVMName overrides the entry's; after Load it holds the
	// effective value ("": proxies not counted).
	ProxyVMName string `yaml:"proxy_vm_name,omitempty"`
}

// Validate implements config.Entry: the entry's own keys, its files, then
// each host, resolved against the entry.
func (v *Entry) Validate(where string) error {
	if err := v.validateKeys(where); err != nil {
		return err
	}
	if err := v.validateFiles(where); err != nil {
		return err
	}
	return v.resolveHosts(where)
}

// validateKeys checks the entry's keys but its files and hosts.
func (v *Entry) validateKeys(where string) error {
	if v.KnownHostsFile == "" && !v.InsecureIgnoreHostKey {
		return fmt.Errorf("%s: known_hosts_file: missing (required unless insecure_ignore_host_key is true)", where)
	}
	if v.MaxConcurrentDials < 1 {
		return fmt.Errorf("%s: max_concurrent_dials: must be at least 1, got %d", where, v.MaxConcurrentDials)
	}
	if v.DialTimeout <= 0 {
		return fmt.Errorf("%s: dial_timeout: must be positive, got %s", where, v.DialTimeout)
	}
	if v.LibvirtSocket == "" {
		return fmt.Errorf("%s: libvirt_socket: must not be empty", where)
	}
	if v.LibvirtURI == "" {
		return fmt.Errorf("%s: libvirt_uri: must not be empty", where)
	}
	if v.Pool == "" {
		return fmt.Errorf("%s: pool: must not be empty", where)
	}
	if len(v.Hosts) == 0 {
		return fmt.Errorf("%s: hosts: missing (at least one host is required)", where)
	}
	var unused uint64
	if err := byteMinimum(where, "min_pool_available", v.MinPoolAvailable, &unused); err != nil {
		return err
	}
	if err := byteMinimum(where, "min_free_memory", v.MinFreeMemory, &unused); err != nil {
		return err
	}
	if err := placementNames(where, v.Volume, v.Network); err != nil {
		return err
	}
	if err := proxyVMName(where, v.ProxyVMName); err != nil {
		return err
	}
	_, err := promisedKeys(where, v.MinFreeVCPUs, v.CPUAllocationRatio, v.MemoryAllocationRatio, v.ReservedMemory, v.DiskAllocationRatio)
	return err
}

// validateFiles checks that the entry's key, passphrase and known_hosts
// files can be read.
func (v *Entry) validateFiles(where string) error {
	for _, f := range []struct {
		field string
		kind  boundedfile.Kind
		path  string
	}{
		{"private_key_file", boundedfile.PrivateKey, v.PrivateKeyFile},
		{"passphrase_file", boundedfile.Passphrase, v.PassphraseFile},
		{"known_hosts_file", boundedfile.KnownHosts, v.KnownHostsFile},
	} {
		if err := config.Readable(where, f.field, f.kind, f.path); err != nil {
			return err
		}
	}
	return nil
}

// resolveHosts resolves each host's address and settings, and checks that
// no two hosts share a name.
func (v *Entry) resolveHosts(where string) error {
	hostNames := map[string]int{}
	// The settings of every host that sets none of its own: resolved once,
	// at the first such host (its errors are the entry's, named as that
	// host's, as when each host was resolved on its own).
	var shared *HostSettings
	for i, h := range v.Hosts {
		hwhere := fmt.Sprintf("%s: hosts[%d]", where, i)
		if h == nil {
			return fmt.Errorf("%s: empty host entry", hwhere)
		}
		if err := h.resolveAddress(hwhere); err != nil {
			return err
		}
		switch {
		case h.HostSettings != nil:
			if err := h.resolve(v, hwhere); err != nil {
				return err
			}
		case shared == nil:
			h.HostSettings = &HostSettings{}
			if err := h.resolve(v, hwhere); err != nil {
				return err
			}
			shared = h.HostSettings
		default:
			h.HostSettings = shared
		}
		if j, ok := hostNames[h.Name]; ok {
			return fmt.Errorf("%s: name: %q is already used by hosts[%d]", hwhere, h.Name, j)
		}
		hostNames[h.Name] = i
	}
	return nil
}

func (h *Host) resolveAddress(where string) error {
	if h.Address == "" {
		return fmt.Errorf("%s: address: missing (required)", where)
	}
	host, port, err := net.SplitHostPort(h.Address)
	if err != nil {
		// No port: the whole address is the host. A bare IPv6 address has
		// colons but no brackets; JoinHostPort adds them.
		host, port = strings.Trim(h.Address, "[]"), DefaultSSHPort
	}
	if host == "" {
		return fmt.Errorf("%s: address: %q has no host", where, h.Address)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("%s: address: %q has an invalid port %q", where, h.Address, port)
	}
	h.Address = net.JoinHostPort(host, port)
	if h.Name == "" {
		h.Name = host
	}
	if err := config.ValidName(where, h.Name); err != nil {
		return err
	}
	return failureDomain(where, h.Domain)
}

// failureDomain checks a host's domain, which becomes a label value: no
// control character, valid UTF-8, at most provider.MaxLabelValue bytes.
// Empty is not set: the host is a domain of its own.
func failureDomain(where, domain string) error {
	switch {
	case strings.ContainsFunc(domain, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return fmt.Errorf("%s: domain: %q contains a control character", where, domain)
	case !utf8.ValidString(domain):
		return fmt.Errorf("%s: domain: %q is not valid UTF-8", where, domain)
	case len(domain) > provider.MaxLabelValue:
		return fmt.Errorf("%s: domain: %d bytes, at most %d", where, len(domain), provider.MaxLabelValue)
	}
	return nil
}

// proxyVMName checks a proxy_vm_name glob: a pattern path.Match takes
// (a bad one would match nothing, silently), bounded as a libvirt name.
func proxyVMName(where, glob string) error {
	if glob == "" {
		return nil
	}
	switch {
	case strings.ContainsFunc(glob, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return fmt.Errorf("%s: proxy_vm_name: %q contains a control character", where, glob)
	case len(glob) > maxLibvirtName:
		return fmt.Errorf("%s: proxy_vm_name: %d bytes, at most %d", where, len(glob), maxLibvirtName)
	}
	if _, err := path.Match(glob, ""); err != nil {
		return fmt.Errorf("%s: proxy_vm_name: %q is not a glob (as path.Match: *, ?, [a-z], \\ escapes): %w", where, glob, err)
	}
	return nil
}

// resolve fills in the entry's settings where h.HostSettings (h's own, not
// shared) sets none, and checks and parses them.
func (h *HostSettings) resolve(v *Entry, where string) error {
	if h.User == "" {
		h.User = v.User
	}
	if h.User == "" {
		return fmt.Errorf("%s: user: missing (set user on the kvm entry or on every host)", where)
	}
	if h.Pool == "" {
		h.Pool = v.Pool
	}
	if err := placementNames(where, h.Volume, h.Network); err != nil {
		return err
	}
	if err := proxyVMName(where, h.ProxyVMName); err != nil {
		return err
	}
	if h.ProxyVMName == "" {
		h.ProxyVMName = v.ProxyVMName
	}
	if h.Volume == "" {
		h.Volume = v.Volume
	}
	if h.Network == "" {
		h.Network = v.Network
	}
	if h.PrivateKeyFile == "" {
		h.PrivateKeyFile = v.PrivateKeyFile
	} else if err := config.Readable(where, "private_key_file", boundedfile.PrivateKey, h.PrivateKeyFile); err != nil {
		return err
	}
	if h.PrivateKeyFile == "" {
		return fmt.Errorf("%s: private_key_file: missing (set it on the kvm entry or on every host)", where)
	}
	return h.resolveMinimums(v, where)
}

// resolveMinimums takes the entry's minimums where the host sets none and
// parses them; a bad one of the entry is reported once, as the entry's.
func (h *HostSettings) resolveMinimums(v *Entry, where string) error {
	for _, m := range []struct {
		field       string
		own, parent *string
		dst         *uint64
	}{
		{"min_pool_available", &h.MinPoolAvailable, &v.MinPoolAvailable, &h.MinPoolAvailableBytes},
		{"min_free_memory", &h.MinFreeMemory, &v.MinFreeMemory, &h.MinFreeMemoryBytes},
	} {
		if *m.own == "" {
			*m.own = *m.parent
		}
		if err := byteMinimum(where, m.field, *m.own, m.dst); err != nil {
			return err
		}
	}
	if _, err := promisedKeys(where, h.MinFreeVCPUs, h.CPUAllocationRatio, h.MemoryAllocationRatio, h.ReservedMemory, h.DiskAllocationRatio); err != nil {
		return err
	}
	if h.MinFreeVCPUs == 0 {
		h.MinFreeVCPUs = v.MinFreeVCPUs
	}
	for _, r := range []struct{ own, parent **float64 }{
		{&h.CPUAllocationRatio, &v.CPUAllocationRatio},
		{&h.MemoryAllocationRatio, &v.MemoryAllocationRatio},
		{&h.DiskAllocationRatio, &v.DiskAllocationRatio},
	} {
		if *r.own == nil {
			*r.own = *r.parent
		}
	}
	if h.ReservedMemory == "" {
		h.ReservedMemory = v.ReservedMemory
	}
	p, err := promisedKeys(where, h.MinFreeVCPUs, h.CPUAllocationRatio, h.MemoryAllocationRatio, h.ReservedMemory, h.DiskAllocationRatio)
	if err != nil {
		return err
	}
	// A ratio counts a resource against one proxy's need of it: memory
	// against min_free_memory, disk against min_pool_available.
	if p.MemoryRatio > 0 && h.MinFreeMemoryBytes == 0 {
		return fmt.Errorf("%s: memory_allocation_ratio: set without min_free_memory, one proxy's memory, which it is counted against", where)
	}
	if p.DiskRatio > 0 && h.MinPoolAvailableBytes == 0 {
		return fmt.Errorf("%s: disk_allocation_ratio: set without min_pool_available, one proxy's disk, which it is counted against", where)
	}
	// nil where no resource is counted: a Host is held twice during a
	// reload of a large file, so what most hosts do not use costs them a
	// pointer, not the struct (docs/scaling.md: "Large configurations").
	h.Promised = nil
	if p.counts() {
		h.Promised = &p
	}
	return nil
}

// Promised is a host's promised-resource policy (docs/configuration.md:
// "Promised resources (KVM)"), parsed, the defaults applied: a resource whose
// key is not set is not counted (0).
type Promised struct {
	// VCPUs is min_free_vcpus, one proxy's vCPUs; CPURatio the vCPUs
	// promised per core, set whenever VCPUs is.
	VCPUs    uint64
	CPURatio float64
	// MemoryRatio is memory_allocation_ratio; ReservedMemory, in bytes,
	// is set whenever it is.
	MemoryRatio    float64
	ReservedMemory uint64
	// DiskRatio is disk_allocation_ratio.
	DiskRatio float64
}

// maxAllocationRatio bounds a ratio: far above any overcommit a host
// survives (Nova's defaults are at most 16, its CPU ratio before 2023.1), far below where a
// host's cores times it would lose precision.
const maxAllocationRatio = 1000

// promisedKeys checks the promised-resource keys of an entry or a host and
// parses them, the defaults applied where their resource is counted.
func promisedKeys(where string, vcpus int, cpu, memory *float64, reserved string, disk *float64) (Promised, error) {
	var p Promised
	if vcpus < 0 {
		return p, fmt.Errorf("%s: min_free_vcpus: must not be negative, got %d", where, vcpus)
	}
	for _, r := range []struct {
		field string
		v     *float64
	}{{"cpu_allocation_ratio", cpu}, {"memory_allocation_ratio", memory}, {"disk_allocation_ratio", disk}} {
		if r.v == nil {
			continue
		}
		if !(*r.v > 0) || *r.v > maxAllocationRatio {
			return p, fmt.Errorf("%s: %s: must be above 0 and at most %d, got %g", where, r.field, maxAllocationRatio, *r.v)
		}
	}
	if err := byteMinimum(where, "reserved_memory", reserved, &p.ReservedMemory); err != nil {
		return p, err
	}
	if vcpus > 0 {
		p.VCPUs, p.CPURatio = uint64(vcpus), DefaultCPUAllocationRatio
		if cpu != nil {
			p.CPURatio = *cpu
		}
	}
	if memory != nil {
		p.MemoryRatio = *memory
		if reserved == "" {
			p.ReservedMemory, _ = ParseBytes(DefaultReservedMemory)
		}
	} else {
		p.ReservedMemory = 0
	}
	if disk != nil {
		p.DiskRatio = *disk
	}
	return p, nil
}

// placementNames checks the names of the optional volume and network: a
// name with a control character is a mistake in the file, and libvirt
// refuses a network name with a '/'.
func placementNames(where, volume, network string) error {
	for _, f := range []struct{ field, name string }{{"volume", volume}, {"network", network}} {
		if strings.ContainsFunc(f.name, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return fmt.Errorf("%s: %s: %q contains a control character", where, f.field, f.name)
		}
		if len(f.name) > maxLibvirtName {
			return fmt.Errorf("%s: %s: %d bytes, at most %d", where, f.field, len(f.name), maxLibvirtName)
		}
	}
	if strings.Contains(network, "/") {
		return fmt.Errorf("%s: network: %q contains '/', which libvirt does not allow in a network name", where, network)
	}
	return nil
}

// maxLibvirtName bounds a volume or network name: far above any name a
// libvirt object has, far below what the check's one RPC could carry.
const maxLibvirtName = 1024

// bytePattern is what ParseBytes may take: plain bytes or a binary unit,
// with an optional B ("20GiB", "4Gi", "1073741824"); empty is not set.
const bytePattern = `^(\s*\+?([0-9]+(\.[0-9]*)?|\.[0-9]+)((Ki|Mi|Gi|Ti|Pi|Ei)B?)?\s*)?$`

// byteQuantity is the schema of a byte minimum; a YAML number is bytes.
func byteQuantity(desc string) config.Keywords {
	return config.Keywords{"type": []string{"string", "integer"}, "pattern": bytePattern, "minimum": 0, "description": desc}
}

// allocationRatio is the schema of an allocation ratio.
func allocationRatio(desc string) config.Keywords {
	return config.Keywords{"type": "number", "exclusiveMinimum": 0, "maximum": maxAllocationRatio, "description": desc}
}

// addressPattern is a kvm host's address: a host, host:port, [IPv6] or
// [IPv6]:port, or a bare IPv6 address; a port from 1 to 65535.
const addressPattern = `^([^:]+|[^:]+:\+?0*(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3})|\[[^\]]+\](:\+?0*(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3}))?|[^\[\]]*:[^\[\]]*:[^\[\]]*)$`

// libvirtName is the schema of a volume or network name.
func libvirtName(desc, pattern string) config.Keywords {
	return config.Keywords{"pattern": pattern, "maxLength": maxLibvirtName, "description": desc}
}

// nonEmpty is a branch of anyOf: key is set and not empty.
func nonEmpty(key string) config.Keywords {
	return config.Keywords{"required": []string{key}, "properties": map[string]any{key: config.Keywords{"minLength": 1}}}
}

// SchemaKeywords implements config.SchemaKeywordser. A host takes user and
// private_key_file from the entry when it sets none, so each must be on
// the entry or on every host.
func (Entry) SchemaKeywords() map[string]config.Keywords {
	everyHost := func(key string) config.Keywords {
		return config.Keywords{"properties": map[string]any{"hosts": config.Keywords{"items": nonEmpty(key)}}}
	}
	return map[string]config.Keywords{
		"": {
			"required": []string{"hosts"},
			"allOf": []any{
				config.Keywords{"anyOf": []any{nonEmpty("known_hosts_file"), config.Keywords{"required": []string{"insecure_ignore_host_key"}, "properties": map[string]any{"insecure_ignore_host_key": config.Keywords{"const": true}}}}},
				config.Keywords{"anyOf": []any{nonEmpty("user"), everyHost("user")}},
				config.Keywords{"anyOf": []any{nonEmpty("private_key_file"), everyHost("private_key_file")}},
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
		"dial_timeout":             config.PositiveDuration("Timeout of one SSH dial and handshake (default 3s)."),
		"min_pool_available":       byteQuantity("Least free space of the pool (20GiB); overridable per host."),
		"min_free_memory":          byteQuantity("Least free memory of the host (4GiB); overridable per host."),
		"min_free_vcpus":           {"minimum": 0, "description": "One proxy's vCPUs, against the host's cores times cpu_allocation_ratio less the vCPUs of its defined domains; overridable per host."},
		"cpu_allocation_ratio":     allocationRatio("vCPUs promised per core (default 4.0, where min_free_vcpus is set); overridable per host."),
		"memory_allocation_ratio":  allocationRatio("When set, memory promised to defined domains counts against (memory - reserved_memory) times it; needs min_free_memory; overridable per host."),
		"reserved_memory":          byteQuantity("Host memory never promised to domains (default 512MiB, where memory_allocation_ratio is set); overridable per host."),
		"disk_allocation_ratio":    allocationRatio("When set, the pool volumes' virtual sizes count against the pool's capacity times it; needs min_pool_available; overridable per host."),
		"hosts":                    {"minItems": 1, "description": "The hosts, each a target."},
		"volume":                   libvirtName("Base image volume that must exist in the pool; overridable per host.", config.NoControlCharacters),
		"network":                  libvirtName("libvirt network the proxies attach to, which must be active; overridable per host.", `^[^\x00-\x1f\x7f/]*$`),
		"proxy_vm_name":            libvirtName("Glob (as Go's path.Match) of the proxy VMs' libvirt domain names: each host counts the defined domains it matches as its proxies; overridable per host.", config.NoControlCharacters),
	}
}

// SchemaKeywords implements config.SchemaKeywordser.
func (Host) SchemaKeywords() map[string]config.Keywords {
	return map[string]config.Keywords{
		"": {"required": []string{"address"}},
		"address": {
			"pattern":     addressPattern,
			"description": "SSH address, host or host:port (port 22 by default).",
		},
		"name":                    {"pattern": config.NoControlCharacters, "description": "The target label; default: the address's host."},
		"user":                    {"description": "SSH user; default: the entry's."},
		"pool":                    {"description": "Storage pool; default: the entry's."},
		"private_key_file":        {"description": "SSH private key; default: the entry's."},
		"min_pool_available":      byteQuantity("Least free space of the pool; default: the entry's."),
		"min_free_memory":         byteQuantity("Least free memory; default: the entry's."),
		"min_free_vcpus":          {"minimum": 0, "description": "One proxy's vCPUs; default: the entry's."},
		"cpu_allocation_ratio":    allocationRatio("vCPUs promised per core; default: the entry's."),
		"memory_allocation_ratio": allocationRatio("Memory allocation ratio; default: the entry's."),
		"reserved_memory":         byteQuantity("Host memory never promised to domains; default: the entry's."),
		"disk_allocation_ratio":   allocationRatio("Disk allocation ratio; default: the entry's."),
		"volume":                  libvirtName("Base image volume; default: the entry's.", config.NoControlCharacters),
		"network":                 libvirtName("libvirt network; default: the entry's.", `^[^\x00-\x1f\x7f/]*$`),
		"proxy_vm_name":           libvirtName("Glob of the proxy VMs' domain names; default: the entry's.", config.NoControlCharacters),
		"domain":                  {"pattern": config.NoControlCharacters, "maxLength": provider.MaxLabelValue, "description": "The failure domain (rack, room, zone) the host shares with others, the domain label of its domain series; default: none, the host is a domain of its own. Per host only."},
	}
}

// ParseBytes reads a byte quantity of the file (min_pool_available,
// min_free_memory): plain bytes ("1073741824") or a binary unit, in
// Kubernetes' form ("4Gi") or with a trailing B ("20GiB"). Decimal units
// ("20G", "20GB") are refused: which one was meant is a guess.
// k8s.io/apimachinery's resource.Quantity does the parsing.
func ParseBytes(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, errors.New("empty quantity: want bytes or a binary unit (20GiB, 4Gi)")
	}
	num := t
	if strings.HasSuffix(t, "iB") {
		num = strings.TrimSuffix(t, "B")
	}
	if !strings.ContainsAny(num[:1], "0123456789.+-") {
		// resource.ParseQuantity reads a bare "Gi" as 0.
		return 0, fmt.Errorf("quantity %q has no number; want bytes or a binary unit (20GiB, 4Gi)", s)
	}
	// The bounded parser first: resource.ParseQuantity never returns on
	// some values ("1e-1000000000"); its own words for the rest.
	if _, err := quantity.Parse(num); errors.Is(err, quantity.ErrMagnitude) {
		return 0, fmt.Errorf("quantity %q: %w", s, quantity.ErrMagnitude)
	}
	q, err := resource.ParseQuantity(num)
	if err != nil {
		return 0, fmt.Errorf("quantity %q: %w; want bytes or a binary unit (20GiB, 4Gi)", s, err)
	}
	if q.Sign() < 0 {
		return 0, fmt.Errorf("quantity %q is negative", s)
	}
	if q.Format != resource.BinarySI && !allDigits(num) {
		if strings.ContainsAny(num, "kMGTPEm") || strings.ContainsAny(num, "eE") {
			return 0, fmt.Errorf("quantity %q: use a binary unit (Ki, Mi, Gi, Ti or KiB, MiB, GiB, TiB) or plain bytes", s)
		}
		return 0, fmt.Errorf("quantity %q is not a whole number of bytes", s)
	}
	if q.Cmp(*resource.NewQuantity(math.MaxInt64, resource.BinarySI)) >= 0 {
		// ParseQuantity clamps what is larger to this.
		return 0, fmt.Errorf("quantity %q is too large", s)
	}
	v := q.Value() // rounded up
	if q.Cmp(*resource.NewQuantity(v, resource.BinarySI)) != 0 {
		return 0, fmt.Errorf("quantity %q is not a whole number of bytes", s)
	}
	return uint64(v), nil
}

func allDigits(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return s != ""
}

// byteMinimum parses an optional byte minimum of the file into *dst; an
// empty value leaves it 0, which means not set.
func byteMinimum(where, field, value string, dst *uint64) error {
	if value == "" {
		return nil
	}
	n, err := ParseBytes(value)
	if err != nil {
		return fmt.Errorf("%s: %s: %w", where, field, err)
	}
	*dst = n
	return nil
}
