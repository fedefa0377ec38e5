// Package config loads and validates the exporter's YAML configuration
// (docs/configuration.md: "Configuration"). It checks the file itself and that referenced files can be
// read; what those files contain is each check's business, so a rotated key
// is picked up without a reload.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"

	"github.com/egress-proxies/provider_health_exporter/internal/boundedfile"
)

// Defaults of docs/configuration.md's "Configuration".
const (
	DefaultTimeout            = Duration(10 * time.Second)
	DefaultLabelSelector      = "app.kubernetes.io/managed-by=egress-proxies-operator"
	DefaultGCPFilter          = `labels.managed-by = "egress-proxies-operator"`
	DefaultLibvirtSocket      = "/var/run/libvirt/libvirt-sock"
	DefaultLibvirtURI         = "qemu:///system"
	DefaultPool               = "default"
	DefaultMaxConcurrentDials = 16
	DefaultDialTimeout        = Duration(3 * time.Second)
	DefaultSSHPort            = "22"
)

// Config is the whole file.
type Config struct {
	Defaults   Defaults      `yaml:"defaults,omitempty"`
	Kubernetes []*Kubernetes `yaml:"kubernetes,omitempty"`
	GCP        []*GCP        `yaml:"gcp,omitempty"`
	KVM        []*KVM        `yaml:"kvm,omitempty"`
}

// Defaults apply to every provider entry that does not set its own.
type Defaults struct {
	Timeout     *Duration `yaml:"timeout,omitempty"` // set by Load
	MinInterval Duration  `yaml:"min_interval,omitempty"`
}

// Duration is a duration written as Prometheus writes them ("10s",
// "1m30s"); a bad value is reported with its line.
type Duration model.Duration

// UnmarshalYAML implements yaml.Unmarshaler.
func (d *Duration) UnmarshalYAML(value *yaml.Node) error {
	md, err := model.ParseDuration(value.Value)
	if err != nil {
		return fmt.Errorf("line %d: %q is not a valid duration (examples: 500ms, 10s, 1m30s)", value.Line, value.Value)
	}
	*d = Duration(md)
	return nil
}

// MarshalYAML implements yaml.Marshaler.
func (d Duration) MarshalYAML() (any, error) { return model.Duration(d).String(), nil }

func (d Duration) String() string { return model.Duration(d).String() }

// Check holds the settings every provider entry shares. After Load both
// pointers are set: to the entry's own value or to the file's default.
type Check struct {
	Timeout     *Duration `yaml:"timeout,omitempty"`
	MinInterval *Duration `yaml:"min_interval,omitempty"`
}

// Kubernetes is one cluster.
type Kubernetes struct {
	Name          string `yaml:"name"`
	Kubeconfig    string `yaml:"kubeconfig,omitempty"`
	Context       string `yaml:"context,omitempty"`
	LabelSelector string `yaml:"label_selector,omitempty"`
	Check         `yaml:",inline"`
}

// GCP is one project.
type GCP struct {
	Name            string `yaml:"name"`
	Project         string `yaml:"project"`
	CredentialsFile string `yaml:"credentials_file,omitempty"`
	Filter          string `yaml:"filter,omitempty"`
	Endpoint        string `yaml:"endpoint,omitempty"`
	Check           `yaml:",inline"`
}

// KVM is a group of hosts sharing SSH and libvirt settings.
type KVM struct {
	Name                  string     `yaml:"name"`
	User                  string     `yaml:"user,omitempty"`
	PrivateKeyFile        string     `yaml:"private_key_file,omitempty"`
	PassphraseFile        string     `yaml:"passphrase_file,omitempty"`
	KnownHostsFile        string     `yaml:"known_hosts_file,omitempty"`
	InsecureIgnoreHostKey bool       `yaml:"insecure_ignore_host_key,omitempty"`
	LibvirtSocket         string     `yaml:"libvirt_socket,omitempty"`
	LibvirtURI            string     `yaml:"libvirt_uri,omitempty"`
	Pool                  string     `yaml:"pool,omitempty"`
	MaxConcurrentDials    int        `yaml:"max_concurrent_dials,omitempty"`
	DialTimeout           Duration   `yaml:"dial_timeout,omitempty"`
	Hosts                 []*KVMHost `yaml:"hosts"`
	Check                 `yaml:",inline"`
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
}

// Load reads, parses and validates the file at path.
func Load(path string) (*Config, error) {
	data, err := boundedfile.Read(path, boundedfile.Config)
	if err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	cfg, err := parse(data, filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	return cfg, nil
}

// Parse parses and validates a configuration. Unknown keys are errors.
// Relative file paths are taken relative to the working directory; Load
// takes them relative to the config file, as Prometheus does.
func Parse(data []byte) (*Config, error) {
	return parse(data, "")
}

func parse(data []byte, dir string) (*Config, error) {
	cfg := &Config{}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil && !errors.Is(err, io.EOF) {
		return nil, locateYAMLError(data, cleanYAMLError(err))
	}
	// A second document would be silently ignored; say so instead.
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("more than one YAML document")
	}
	cfg.resolvePaths(dir)
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// resolvePaths makes relative paths of local files relative to dir.
func (c *Config) resolvePaths(dir string) {
	if dir == "" {
		return
	}
	join := func(p *string) {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
	for _, k := range c.Kubernetes {
		if k != nil {
			join(&k.Kubeconfig)
		}
	}
	for _, g := range c.GCP {
		if g != nil {
			join(&g.CredentialsFile)
		}
	}
	for _, v := range c.KVM {
		if v == nil {
			continue
		}
		join(&v.PrivateKeyFile)
		join(&v.PassphraseFile)
		join(&v.KnownHostsFile)
		for _, h := range v.Hosts {
			if h != nil {
				join(&h.PrivateKeyFile)
			}
		}
	}
}

// cleanYAMLError keeps yaml's line numbers but drops Go type names that mean
// nothing to the person editing the file.
func cleanYAMLError(err error) error {
	msg := err.Error()
	for _, r := range []struct{ from, to string }{
		{" in type config.plainKubernetes", " in kubernetes entry"},
		{" in type config.plainGCP", " in gcp entry"},
		{" in type config.plainKVMHost", " in kvm host"},
		{" in type config.plainKVM", " in kvm entry"},
		{" in type config.Defaults", " in defaults"},
		{" in type config.Config", " at top level"},
		{" into []*config.Kubernetes", " into the kubernetes list (entries start with \"- \")"},
		{" into []*config.GCP", " into the gcp list (entries start with \"- \")"},
		{" into []*config.KVMHost", " into the hosts list (entries start with \"- \")"},
		{" into []*config.KVM", " into the kvm list (entries start with \"- \")"},
		{"yaml: unmarshal errors:\n  ", ""},
	} {
		msg = strings.ReplaceAll(msg, r.from, r.to)
	}
	msg = strings.ReplaceAll(msg, "\n  ", "; ")
	// "field x not found in kvm entry": the entry is named by
	// locateYAMLError, the key is what the reader needs.
	msg = unknownFieldRE.ReplaceAllString(msg, `unknown field "$1"`)
	return errors.New(msg)
}

var unknownFieldRE = regexp.MustCompile(`field (\S+) not found (?:in (?:kubernetes entry|gcp entry|kvm entry|kvm host|defaults)|at top level)`)

var lineRE = regexp.MustCompile(`^line (\d+): `)

// locateYAMLError adds the entry to yaml's "line N:" messages, so that an
// unknown key reads "line 8: kvm[0] "lab": hosts[0]: field port not found".
func locateYAMLError(data []byte, err error) error {
	var root yaml.Node
	if yaml.Unmarshal(data, &root) != nil || len(root.Content) == 0 || root.Content[0].Kind != yaml.MappingNode {
		return err
	}
	top := root.Content[0]
	parts := strings.Split(err.Error(), "; ")
	for i, part := range parts {
		m := lineRE.FindStringSubmatch(part)
		if m == nil {
			continue
		}
		line, _ := strconv.Atoi(m[1])
		where, key := entryAt(top, line)
		rest := part[len(m[0]):]
		// The key is in the message already for these.
		if key != "" && !strings.HasPrefix(rest, "unknown field ") && !strings.HasPrefix(rest, "mapping key ") {
			where += ": " + key
		}
		if where != "" {
			parts[i] = m[0] + where + ": " + rest
		}
	}
	return errors.New(strings.Join(parts, "; "))
}

// entryAt names the provider entry (and kvm host) that spans a line, and
// the key on that line when there is one.
func entryAt(top *yaml.Node, line int) (where, key string) {
	where, m := entryNodeAt(top, line)
	if m != nil {
		for i := 0; i+1 < len(m.Content); i += 2 {
			if k := m.Content[i]; k.Line == line && k.Kind == yaml.ScalarNode {
				return where, k.Value
			}
		}
	}
	return where, ""
}

func entryNodeAt(top *yaml.Node, line int) (string, *yaml.Node) {
	for i := 0; i+1 < len(top.Content); i += 2 {
		kind, seq := top.Content[i].Value, top.Content[i+1]
		if kind == "defaults" && seq.Kind == yaml.MappingNode {
			end := int(^uint(0) >> 1)
			if i+2 < len(top.Content) {
				end = top.Content[i+2].Line
			}
			if top.Content[i].Line <= line && line < end {
				return "defaults", seq
			}
			continue
		}
		if seq.Kind != yaml.SequenceNode || (kind != "kubernetes" && kind != "gcp" && kind != "kvm") {
			continue
		}
		idx, item := itemAt(seq, line)
		if item == nil {
			continue
		}
		where := entry(kind, idx, scalar(item, "name"))
		if kind == "kvm" {
			for j := 0; j+1 < len(item.Content); j += 2 {
				if item.Content[j].Value == "hosts" && item.Content[j+1].Kind == yaml.SequenceNode {
					if h, host := itemAt(item.Content[j+1], line); host != nil {
						return where + fmt.Sprintf(": hosts[%d]", h), host
					}
				}
			}
		}
		return where, item
	}
	return "", nil
}

// itemAt finds the sequence item whose lines include line: items start at
// their own line and end before the next one starts.
func itemAt(seq *yaml.Node, line int) (int, *yaml.Node) {
	for i, it := range seq.Content {
		next := int(^uint(0) >> 1)
		if i+1 < len(seq.Content) {
			next = seq.Content[i+1].Line
		}
		if it.Line <= line && line < next && it.Kind == yaml.MappingNode {
			return i, it
		}
	}
	return 0, nil
}

func scalar(m *yaml.Node, key string) string {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key && m.Content[i+1].Kind == yaml.ScalarNode {
			return m.Content[i+1].Value
		}
	}
	return ""
}

func (c *Config) validate() error {
	if c.Defaults.Timeout == nil {
		t := DefaultTimeout
		c.Defaults.Timeout = &t
	}
	if *c.Defaults.Timeout <= 0 {
		return fmt.Errorf("defaults: timeout: must be positive, got %s", c.Defaults.Timeout)
	}
	if c.Defaults.MinInterval < 0 {
		return errors.New("defaults: min_interval: must not be negative")
	}
	names := map[string]string{}
	unique := func(where, name string) error {
		if prev, ok := names[name]; ok {
			return fmt.Errorf("%s: name: %q is already used by %s (names are unique across the file)", where, name, prev)
		}
		names[name] = where
		return nil
	}
	for i, k := range c.Kubernetes {
		if k == nil {
			return fmt.Errorf("kubernetes[%d]: empty entry", i)
		}
		where := entry("kubernetes", i, k.Name)
		if err := k.validate(c.Defaults, where); err != nil {
			return err
		}
		if err := unique(where, k.Name); err != nil {
			return err
		}
	}
	for i, g := range c.GCP {
		if g == nil {
			return fmt.Errorf("gcp[%d]: empty entry", i)
		}
		where := entry("gcp", i, g.Name)
		if err := g.validate(c.Defaults, where); err != nil {
			return err
		}
		if err := unique(where, g.Name); err != nil {
			return err
		}
	}
	for i, v := range c.KVM {
		if v == nil {
			return fmt.Errorf("kvm[%d]: empty entry", i)
		}
		where := entry("kvm", i, v.Name)
		if err := v.validate(c.Defaults, where); err != nil {
			return err
		}
		if err := unique(where, v.Name); err != nil {
			return err
		}
	}
	return nil
}

func entry(kind string, i int, name string) string {
	if name == "" {
		return fmt.Sprintf("%s[%d]", kind, i)
	}
	return fmt.Sprintf("%s[%d] %q", kind, i, name)
}

// Targets is the number of targets the file configures.
func (c *Config) Targets() int {
	n := len(c.Kubernetes) + len(c.GCP)
	for _, v := range c.KVM {
		n += len(v.Hosts)
	}
	return n
}

// Summary is the one line --config.check prints for a valid file.
func (c *Config) Summary() string {
	hosts := 0
	for _, v := range c.KVM {
		hosts += len(v.Hosts)
	}
	return fmt.Sprintf("%d kubernetes, %d gcp, %d kvm (%d hosts): %d targets",
		len(c.Kubernetes), len(c.GCP), len(c.KVM), hosts, c.Targets())
}

func (ch *Check) resolve(d Defaults, where string) error {
	if ch.Timeout == nil {
		t := *d.Timeout
		ch.Timeout = &t
	}
	if *ch.Timeout <= 0 {
		return fmt.Errorf("%s: timeout: must be positive, got %s", where, ch.Timeout)
	}
	if ch.MinInterval == nil {
		m := d.MinInterval
		ch.MinInterval = &m
	}
	if *ch.MinInterval < 0 {
		return fmt.Errorf("%s: min_interval: must not be negative", where)
	}
	return nil
}

// TimeoutDuration is the effective check timeout.
func (ch Check) TimeoutDuration() time.Duration {
	if ch.Timeout == nil {
		return time.Duration(DefaultTimeout)
	}
	return time.Duration(*ch.Timeout)
}

// MinIntervalDuration is the effective min_interval.
func (ch Check) MinIntervalDuration() time.Duration {
	if ch.MinInterval == nil {
		return 0
	}
	return time.Duration(*ch.MinInterval)
}

func validName(where, name string) error {
	if name == "" {
		return fmt.Errorf("%s: name: missing (required)", where)
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%s: name: %q contains a control character", where, name)
		}
	}
	return nil
}

// readable checks that a referenced file exists and can be read, without
// judging its contents.
func readable(where, field, path string) error {
	if path == "" {
		return nil
	}
	// Stat first: opening a FIFO or a device could block or never end.
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%s: %s: %w", where, field, err)
	}
	if st.IsDir() {
		return fmt.Errorf("%s: %s: %s is a directory", where, field, path)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s: %s: %s is not a regular file", where, field, path)
	}
	// Opened without blocking, and within the cap of its kind of file
	// (docs/security.md: "What the exporter bounds"), as the check will read it.
	if err := boundedfile.Check(path, fileKind(field)); err != nil {
		return fmt.Errorf("%s: %s: %w", where, field, err)
	}
	return nil
}

// fileKind is the kind of the file a configuration field names.
func fileKind(field string) boundedfile.Kind {
	switch field {
	case "kubeconfig":
		return boundedfile.Kubeconfig
	case "credentials_file":
		return boundedfile.Credentials
	case "passphrase_file":
		return boundedfile.Passphrase
	case "known_hosts_file":
		return boundedfile.KnownHosts
	default:
		return boundedfile.PrivateKey
	}
}

type plainKubernetes Kubernetes

// UnmarshalYAML applies defaults and decodes strictly.
func (k *Kubernetes) UnmarshalYAML(unmarshal func(any) error) error {
	*k = Kubernetes{LabelSelector: DefaultLabelSelector}
	return unmarshal((*plainKubernetes)(k))
}

func (k *Kubernetes) validate(d Defaults, where string) error {
	if err := validName(where, k.Name); err != nil {
		return err
	}
	if k.Context != "" && k.Kubeconfig == "" {
		return fmt.Errorf("%s: context: set without kubeconfig (the in-cluster config has no contexts)", where)
	}
	if err := readable(where, "kubeconfig", k.Kubeconfig); err != nil {
		return err
	}
	return k.resolve(d, where)
}

type plainGCP GCP

// UnmarshalYAML applies defaults and decodes strictly.
func (g *GCP) UnmarshalYAML(unmarshal func(any) error) error {
	*g = GCP{Filter: DefaultGCPFilter}
	return unmarshal((*plainGCP)(g))
}

func (g *GCP) validate(d Defaults, where string) error {
	if err := validName(where, g.Name); err != nil {
		return err
	}
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
	}
	if err := readable(where, "credentials_file", g.CredentialsFile); err != nil {
		return err
	}
	return g.resolve(d, where)
}

type plainKVM KVM

// UnmarshalYAML applies defaults and decodes strictly.
func (v *KVM) UnmarshalYAML(unmarshal func(any) error) error {
	*v = KVM{
		LibvirtSocket:      DefaultLibvirtSocket,
		LibvirtURI:         DefaultLibvirtURI,
		Pool:               DefaultPool,
		MaxConcurrentDials: DefaultMaxConcurrentDials,
		DialTimeout:        DefaultDialTimeout,
	}
	return unmarshal((*plainKVM)(v))
}

func (v *KVM) validate(d Defaults, where string) error {
	if err := validName(where, v.Name); err != nil {
		return err
	}
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
	return v.resolve(d, where)
}

type plainKVMHost KVMHost

// UnmarshalYAML decodes strictly.
func (h *KVMHost) UnmarshalYAML(unmarshal func(any) error) error {
	*h = KVMHost{}
	return unmarshal((*plainKVMHost)(h))
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
	if h.PrivateKeyFile == "" {
		h.PrivateKeyFile = v.PrivateKeyFile
	} else if err := readable(where, "private_key_file", h.PrivateKeyFile); err != nil {
		return err
	}
	if h.PrivateKeyFile == "" {
		return fmt.Errorf("%s: private_key_file: missing (set it on the kvm entry or on every host)", where)
	}
	return nil
}
