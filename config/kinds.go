package config

import (
	"fmt"
	"maps"
	"math"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// The sections of the kubernetes, gcp and kvm kinds. A kind may as well
// declare its Section in its own package; these live here because their
// types predate that. Which kinds the file may configure is the
// exporter's table of kinds (docs/development.md: "Adding a provider").

// KubernetesSection is the kubernetes section: one entry a cluster.
func KubernetesSection() Section {
	return Section{Kind: "kubernetes", New: func() Entry { return &Kubernetes{LabelSelector: DefaultLabelSelector} }}
}

// GCPSection is the gcp section: one entry a project.
func GCPSection() Section {
	return Section{Kind: "gcp", New: func() Entry { return &GCP{Filter: DefaultGCPFilter} }}
}

// KVMSection is the kvm section: one entry a group of hosts.
func KVMSection() Section {
	return Section{Kind: "kvm", New: func() Entry {
		return &KVM{
			LibvirtSocket:      DefaultLibvirtSocket,
			LibvirtURI:         DefaultLibvirtURI,
			Pool:               DefaultPool,
			MaxConcurrentDials: DefaultMaxConcurrentDials,
			DialTimeout:        DefaultDialTimeout,
		}
	}, Summary: func(entries []Entry) string {
		hosts := 0
		for _, e := range entries {
			if e != nil {
				hosts += e.TargetCount()
			}
		}
		return fmt.Sprintf("%d kvm (%d hosts)", len(entries), hosts)
	}}
}

// EntryName implements Entry.
func (k *Kubernetes) EntryName() string { return k.Name }

// ResolvePaths implements Entry.
func (k *Kubernetes) ResolvePaths(join func(*string)) {
	join(&k.Kubeconfig)
	join(&k.PodTemplate.Path)
}

// TargetCount implements Entry: one API server.
func (k *Kubernetes) TargetCount() int { return 1 }

// EntryName implements Entry.
func (g *GCP) EntryName() string { return g.Name }

// ResolvePaths implements Entry.
func (g *GCP) ResolvePaths(join func(*string)) { join(&g.CredentialsFile) }

// TargetCount implements Entry: one Compute API.
func (g *GCP) TargetCount() int { return 1 }

// EntryName implements Entry.
func (v *KVM) EntryName() string { return v.Name }

// ResolvePaths implements Entry.
func (v *KVM) ResolvePaths(join func(*string)) {
	join(&v.PrivateKeyFile)
	join(&v.PassphraseFile)
	join(&v.KnownHostsFile)
	for _, h := range v.Hosts {
		if h != nil {
			join(&h.PrivateKeyFile)
		}
	}
}

// TargetCount implements Entry: one target per host.
func (v *KVM) TargetCount() int { return len(v.Hosts) }

// Kubernetes is one cluster.
type Kubernetes struct {
	Name          string `yaml:"name"`
	Kubeconfig    string `yaml:"kubeconfig,omitempty"`
	Context       string `yaml:"context,omitempty"`
	LabelSelector string `yaml:"label_selector,omitempty"`
	// Namespace, CanI and MinQuotaHeadroom are the optional headroom
	// checks (docs/configuration.md: "Kubernetes"); the last two need the
	// first. MinQuotaHeadroom maps a ResourceQuota resource to a quantity.
	Namespace        string            `yaml:"namespace,omitempty"`
	CanI             []string          `yaml:"can_i,omitempty"`
	MinQuotaHeadroom map[string]string `yaml:"min_quota_headroom,omitempty"`
	// PodTemplate is the optional dry-run placement (docs/configuration.md:
	// "Placement: pod_template"); it needs Namespace.
	PodTemplate PodTemplate `yaml:"pod_template,omitempty"`
	// Schedule fits the Pod the dry run returns on the cluster's Nodes,
	// as kube-scheduler's filters would (docs/configuration.md:
	// "Scheduling: schedule"); it needs PodTemplate.
	Schedule bool `yaml:"schedule,omitempty"`
	Check    `yaml:",inline"`
}

// GCP is one project.
type GCP struct {
	Name            string `yaml:"name"`
	Project         string `yaml:"project"`
	CredentialsFile string `yaml:"credentials_file,omitempty"`
	Filter          string `yaml:"filter,omitempty"`
	Endpoint        string `yaml:"endpoint,omitempty"`
	// Regions and MinQuotaHeadroom are the optional quota check
	// (docs/configuration.md: "GCP"), set together: a quota metric
	// (CPUS) maps to the least limit - usage each region must have.
	Regions          []string           `yaml:"regions,omitempty"`
	MinQuotaHeadroom map[string]float64 `yaml:"min_quota_headroom,omitempty"`
	// SourceImage is the optional image check (docs/configuration.md:
	// "GCP"): projects/P/global/images/NAME or
	// projects/P/global/images/family/F.
	SourceImage string `yaml:"source_image,omitempty"`
	Check       `yaml:",inline"`
}

// KVM is a group of hosts sharing SSH and libvirt settings.
type KVM struct {
	Name                  string   `yaml:"name"`
	User                  string   `yaml:"user,omitempty"`
	PrivateKeyFile        string   `yaml:"private_key_file,omitempty"`
	PassphraseFile        string   `yaml:"passphrase_file,omitempty"`
	KnownHostsFile        string   `yaml:"known_hosts_file,omitempty"`
	InsecureIgnoreHostKey bool     `yaml:"insecure_ignore_host_key,omitempty"`
	LibvirtSocket         string   `yaml:"libvirt_socket,omitempty"`
	LibvirtURI            string   `yaml:"libvirt_uri,omitempty"`
	Pool                  string   `yaml:"pool,omitempty"`
	MaxConcurrentDials    int      `yaml:"max_concurrent_dials,omitempty"`
	DialTimeout           Duration `yaml:"dial_timeout,omitempty"`
	// MinPoolAvailable and MinFreeMemory are byte quantities ("20GiB"),
	// optional, overridable per host (docs/configuration.md: "KVM").
	MinPoolAvailable string     `yaml:"min_pool_available,omitempty"`
	MinFreeMemory    string     `yaml:"min_free_memory,omitempty"`
	Hosts            []*KVMHost `yaml:"hosts"`
	Check            `yaml:",inline"`

	// Volume and Network are the optional placement checks, overridable
	// per host (docs/configuration.md: "KVM"): the base image's volume in
	// the pool and the libvirt network proxies attach to.
	Volume  string `yaml:"volume,omitempty"`
	Network string `yaml:"network,omitempty"`
}

// KVMHost is one host. After Load, User, Pool and PrivateKeyFile hold the
// effective values (the host's own or the group's), Address has a port and
// Name is set.
type KVMHost struct {
	Address        string `yaml:"address"`
	Name           string `yaml:"name,omitempty"`
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
	// Volume and Network override the entry's; after Load they hold the
	// effective values ("": not checked).
	Volume  string `yaml:"volume,omitempty"`
	Network string `yaml:"network,omitempty"`
}

// Validate implements Entry.
func (k *Kubernetes) Validate(where string) error {
	if k.Context != "" && k.Kubeconfig == "" {
		return fmt.Errorf("%s: context: set without kubeconfig (the in-cluster config has no contexts)", where)
	}
	if err := k.validateHeadroom(where); err != nil {
		return err
	}
	if err := k.validatePodTemplate(where); err != nil {
		return err
	}
	if k.Schedule && k.PodTemplate.Path == "" {
		// Without the Pod admission returns there is nothing to fit.
		return fmt.Errorf("%s: schedule: set without pod_template (the Pod fitted on the nodes is the one its dry run returns)", where)
	}
	return readable(where, "kubeconfig", k.Kubeconfig)
}

// validateHeadroom checks the optional headroom keys: each can_i entry
// and quantity must parse, and both need the namespace they are about.
func (k *Kubernetes) validateHeadroom(where string) error {
	if k.Namespace == "" && (len(k.CanI) > 0 || len(k.MinQuotaHeadroom) > 0) {
		return fmt.Errorf("%s: namespace: missing (required by can_i and min_quota_headroom)", where)
	}
	if k.Namespace != "" && !namespaceName.MatchString(k.Namespace) {
		return fmt.Errorf("%s: namespace: %q is not a namespace name (lowercase letters, digits and '-', at most 63)", where, k.Namespace)
	}
	if len(k.CanI) > MaxCanI {
		return fmt.Errorf("%s: can_i: %d entries, at most %d are allowed (each is one access review at every check)", where, len(k.CanI), MaxCanI)
	}
	for i, s := range k.CanI {
		if _, err := ParseCanI(s); err != nil {
			return fmt.Errorf("%s: can_i[%d]: %w", where, i, err)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(k.MinQuotaHeadroom)) {
		if _, err := ParseQuotaMinimum(name, k.MinQuotaHeadroom[name]); err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
	}
	return nil
}

// MaxCanI is the most can_i entries one kubernetes entry may list: each is
// an access review at every check, made at most a few at a time
// (docs/configuration.md: "Kubernetes").
const MaxCanI = 32

// namespaceName is a Kubernetes namespace name (an RFC 1123 label).
var namespaceName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// Validate implements Entry.
func (g *GCP) Validate(where string) error {
	if g.Project == "" {
		return fmt.Errorf("%s: project: missing (required)", where)
	}
	if g.Endpoint != "" {
		u, err := url.Parse(g.Endpoint)
		if err != nil {
			return fmt.Errorf("%s: endpoint: %w", where, err)
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("%s: endpoint: %q is not an http(s) URL", where, g.Endpoint)
		}
		if u.Scheme == "http" && !loopbackHost(u.Hostname()) {
			return fmt.Errorf("%s: endpoint: %q is plain http, which would send the OAuth access token in clear text: use https (plain http is accepted only to a loopback address such as 127.0.0.1, for tests)", where, g.Endpoint)
		}
	}
	if err := g.validateQuotas(where); err != nil {
		return err
	}
	if g.SourceImage != "" {
		if _, err := ParseGCPSourceImage(g.SourceImage); err != nil {
			return fmt.Errorf("%s: source_image: %w", where, err)
		}
	}
	return readable(where, "credentials_file", g.CredentialsFile)
}

// validateQuotas checks the optional quota keys: both or neither, region
// and metric names as Compute writes them, no negative minimum, no region
// twice.
func (g *GCP) validateQuotas(where string) error {
	switch {
	case len(g.Regions) > 0 && len(g.MinQuotaHeadroom) == 0:
		return fmt.Errorf("%s: min_quota_headroom: missing (regions are read only for its quotas)", where)
	case len(g.Regions) == 0 && len(g.MinQuotaHeadroom) > 0:
		return fmt.Errorf("%s: regions: missing (required by min_quota_headroom)", where)
	}
	if len(g.Regions) > MaxGCPRegions {
		return fmt.Errorf("%s: regions: %d regions, more than the %d an entry may check (Compute has about 40)", where, len(g.Regions), MaxGCPRegions)
	}
	seen := map[string]int{}
	for i, r := range g.Regions {
		if !gcpRegion.MatchString(r) {
			return fmt.Errorf("%s: regions[%d]: %q is not a region name like us-central1", where, i, r)
		}
		if j, dup := seen[r]; dup {
			return fmt.Errorf("%s: regions[%d]: %q is already regions[%d]", where, i, r, j)
		}
		seen[r] = i
	}
	for _, m := range slices.Sorted(maps.Keys(g.MinQuotaHeadroom)) {
		v := g.MinQuotaHeadroom[m]
		if !gcpQuotaMetric.MatchString(m) {
			return fmt.Errorf("%s: min_quota_headroom: %q is not a Compute quota metric like CPUS or IN_USE_ADDRESSES", where, m)
		}
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("%s: min_quota_headroom %s: %v is not a non-negative number", where, m, v)
		}
	}
	return nil
}

// gcpRegion and gcpQuotaMetric are how Compute writes a region's name and
// a quota's metric.
var (
	gcpRegion      = regexp.MustCompile(`^[a-z]+(-[a-z0-9]+)+$`)
	gcpQuotaMetric = regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)
)

// MaxGCPRegions is the most regions one gcp entry may list
// (docs/security.md: "What the exporter bounds"): every check reads each
// of them, and Compute has about 40, so a longer list is a mistake that
// would cost a read request per region per check.
const MaxGCPRegions = 64

// loopbackHost tells whether host is a loopback IP address, the only
// place a plain-http endpoint may send a token to: it never leaves the
// machine. A name is not resolved here, so "localhost" does not count.
func loopbackHost(host string) bool {
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// GCPSourceImage is a parsed source_image: an image by name, or the image
// an image family points to.
type GCPSourceImage struct {
	Project string
	// Image is set for projects/P/global/images/NAME, Family for
	// projects/P/global/images/family/F.
	Image, Family string
}

// gcpSourceImage is the two forms of source_image. A project ID is
// lowercase letters, digits and hyphens, optionally behind a domain
// ("example.com:proj"); image and family names are RFC 1035 labels.
var gcpSourceImage = regexp.MustCompile(`^projects/((?:[a-z0-9.-]+:)?[a-z][-a-z0-9]{0,61}[a-z0-9])/global/images/(family/)?([a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)$`)

// ParseGCPSourceImage reads a source_image value.
func ParseGCPSourceImage(s string) (GCPSourceImage, error) {
	m := gcpSourceImage.FindStringSubmatch(s)
	if m == nil {
		return GCPSourceImage{}, fmt.Errorf("%q is neither projects/PROJECT/global/images/NAME nor projects/PROJECT/global/images/family/FAMILY", s)
	}
	if m[2] != "" {
		return GCPSourceImage{Project: m[1], Family: m[3]}, nil
	}
	return GCPSourceImage{Project: m[1], Image: m[3]}, nil
}

// Validate implements Entry.
func (v *KVM) Validate(where string) error {
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
	for _, f := range []struct{ field, path string }{
		{"private_key_file", v.PrivateKeyFile},
		{"passphrase_file", v.PassphraseFile},
		{"known_hosts_file", v.KnownHostsFile},
	} {
		if err := readable(where, f.field, f.path); err != nil {
			return err
		}
	}
	hostNames := map[string]int{}
	for i, h := range v.Hosts {
		hwhere := fmt.Sprintf("%s: hosts[%d]", where, i)
		if h == nil {
			return fmt.Errorf("%s: empty host entry", hwhere)
		}
		if err := h.resolve(v, hwhere); err != nil {
			return err
		}
		if j, ok := hostNames[h.Name]; ok {
			return fmt.Errorf("%s: name: %q is already used by hosts[%d]", hwhere, h.Name, j)
		}
		hostNames[h.Name] = i
	}
	return nil
}

func (h *KVMHost) resolve(v *KVM, where string) error {
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
	if err := validName(where, h.Name); err != nil {
		return err
	}
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
	if h.Volume == "" {
		h.Volume = v.Volume
	}
	if h.Network == "" {
		h.Network = v.Network
	}
	if h.PrivateKeyFile == "" {
		h.PrivateKeyFile = v.PrivateKeyFile
	} else if err := readable(where, "private_key_file", h.PrivateKeyFile); err != nil {
		return err
	}
	if h.PrivateKeyFile == "" {
		return fmt.Errorf("%s: private_key_file: missing (set it on the kvm entry or on every host)", where)
	}
	return h.resolveMinimums(v, where)
}

// resolveMinimums takes the entry's minimums where the host sets none and
// parses them; a bad one of the entry is reported once, as the entry's.
func (h *KVMHost) resolveMinimums(v *KVM, where string) error {
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
	return nil
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
