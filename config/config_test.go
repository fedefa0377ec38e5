package config_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/egress-proxies/provider_health_exporter/collector/gcp"
	"github.com/egress-proxies/provider_health_exporter/collector/kubernetes"
	"github.com/egress-proxies/provider_health_exporter/collector/kvm"
	"github.com/egress-proxies/provider_health_exporter/config"
)

// sections are the sections of the built-in kinds that these tests
// read files through; the exporter reads them through its table of kinds
// (docs/development.md: "Adding a provider").
var sections = []config.Section{kubernetes.Section(), gcp.Section(), kvm.Section()}

func TestLoadInvalid(t *testing.T) {
	t.Parallel()
	for file, want := range map[string]string{
		"invalid-address-port.yml":                     `kvm[0] "lab": hosts[0]: address: "127.0.0.1:99999" has an invalid port "99999"`,
		"invalid-bad-duration.yml":                     `line 2: defaults: timeout: "10 parsecs" is not a valid duration (examples: 500ms, 10s, 1m30s)`,
		"invalid-context-without-kubeconfig.yml":       `kubernetes[0] "prod": context: set without kubeconfig (the in-cluster config has no contexts)`,
		"invalid-duplicate-host.yml":                   `kvm[0] "lab": hosts[1]: name: "beelink" is already used by hosts[0]`,
		"invalid-duplicate-key.yml":                    `line 4: gcp[0] "crawl-prod": mapping key "project" already defined at line 3`,
		"invalid-duplicate-name.yml":                   `gcp[0] "prod": name: "prod" is already used by kubernetes[0] "prod" (names are unique across the file)`,
		"invalid-endpoint.yml":                         `gcp[0] "crawl-prod": endpoint: "ftp://compute.example" is not an http(s) URL`,
		"invalid-file-is-directory.yml":                `gcp[0] "crawl-prod": credentials_file: ../testdata/files is a directory`,
		"invalid-host-key-file-missing.yml":            `kvm[0] "lab": hosts[0]: private_key_file: stat ../testdata/files/missing_ed25519: no such file or directory`,
		"invalid-inline-secret.yml":                    `line 5: kvm[0] "lab": unknown field "password"`,
		"invalid-list-instead-of-map.yml":              `line 2: cannot unmarshal !!map into the kubernetes list (entries start with "- ")`,
		"invalid-max-concurrent-dials.yml":             `kvm[0] "lab": max_concurrent_dials: must be at least 1, got 0`,
		"invalid-missing-address.yml":                  `kvm[0] "lab": hosts[0]: address: missing (required)`,
		"invalid-missing-file.yml":                     `kubernetes[0] "prod": kubeconfig: stat ../testdata/files/does-not-exist: no such file or directory`,
		"invalid-missing-hosts.yml":                    `kvm[0] "lab": hosts: missing (at least one host is required)`,
		"invalid-missing-known-hosts.yml":              `kvm[0] "lab": known_hosts_file: missing (required unless insecure_ignore_host_key is true)`,
		"invalid-missing-name.yml":                     `gcp[0]: name: missing (required)`,
		"invalid-missing-private-key.yml":              `kvm[0] "lab": hosts[0]: private_key_file: missing (set it on the kvm entry or on every host)`,
		"invalid-missing-project.yml":                  `gcp[0] "crawl-prod": project: missing (required)`,
		"invalid-missing-user.yml":                     `kvm[0] "lab": hosts[1]: user: missing (set user on the kvm entry or on every host)`,
		"invalid-negative-min-interval.yml":            `line 2: defaults: min_interval: "-1m" is not a valid duration (examples: 500ms, 10s, 1m30s)`,
		"invalid-two-documents.yml":                    `more than one YAML document`,
		"invalid-unknown-host-key.yml":                 `line 8: kvm[0] "lab": hosts[0]: unknown field "port"`,
		"invalid-unknown-top-level-key.yml":            `line 1: unknown field "providers"`,
		"invalid-yaml-syntax.yml":                      `yaml: line 3: mapping values are not allowed in this context`,
		"invalid-zero-default-timeout.yml":             `defaults: timeout: must be positive, got 0s`,
		"invalid-empty-pool.yml":                       `kvm[0] "lab": pool: must not be empty`,
		"invalid-zero-timeout.yml":                     `kubernetes[0] "prod": timeout: must be positive, got 0s`,
		"invalid-zero-dial-timeout.yml":                `kvm[0] "lab": dial_timeout: must be positive, got 0s`,
		"invalid-can-i-without-namespace.yml":          `kubernetes[0] "prod": namespace: missing (required by can_i and min_quota_headroom)`,
		"invalid-too-many-can-i.yml":                   `kubernetes[0] "prod": can_i: 33 entries, at most 32 are allowed (each is one access review at every check)`,
		"invalid-quota-headroom-magnitude.yml":         `kubernetes[0] "prod": min_quota_headroom pods: quantity "1e-1000000000": magnitude beyond 10^±64, which no cluster could mean`,
		"invalid-byte-quantity-magnitude.yml":          `kvm[0] "lab": min_free_memory: quantity "1e-1000000000": magnitude beyond 10^±64, which no cluster could mean`,
		"invalid-can-i-entry.yml":                      `kubernetes[0] "prod": can_i[1]: can_i entry "Delete pods": verb "Delete" is not a lowercase name`,
		"invalid-quota-headroom-quantity.yml":          `kubernetes[0] "prod": min_quota_headroom requests.memory: quantity "4 GiB": unknown suffix " GiB" (want Ki, Mi, Gi, Ti, Pi, Ei, n, u, m, k, M, G, T, P, E or an exponent like e3)`,
		"invalid-quota-headroom-without-regions.yml":   `gcp[0] "crawl-prod": regions: missing (required by min_quota_headroom)`,
		"invalid-negative-quota-headroom.yml":          `gcp[0] "crawl-prod": min_quota_headroom INSTANCES: -1 is not a non-negative number`,
		"invalid-bad-quantity.yml":                     `kvm[0] "lab": min_pool_available: quantity "20G": use a binary unit (Ki, Mi, Gi, Ti or KiB, MiB, GiB, TiB) or plain bytes`,
		"invalid-negative-quantity.yml":                `kvm[0] "lab": hosts[1]: min_free_memory: quantity "-4Gi" is negative`,
		"invalid-pod-template-unknown-field.yml":       `kubernetes[0] "prod": pod_template: ../testdata/files/pod-template-unknown-field.yaml: strict decoding: line 9: unknown field "spec.containers[0].imagePullPolic"`,
		"invalid-pod-template-wrong-type.yml":          `kubernetes[0] "prod": pod_template: ../testdata/files/pod-template-wrong-type.yaml: spec.containers.ports: a number where a list is expected`,
		"invalid-pod-template-not-a-pod.yml":           `kubernetes[0] "prod": pod_template: ../testdata/files/pod-template-deployment.yaml: not a Pod: apiVersion "apps/v1", kind "Deployment" (want apiVersion: v1, kind: Pod)`,
		"invalid-schedule-without-pod-template.yml":    `kubernetes[0] "prod": schedule: set without pod_template (the Pod fitted on the nodes is the one its dry run returns)`,
		"invalid-capacity-domain-without-schedule.yml": `kubernetes[0] "prod": capacity_domain: set without schedule: true (the capacity per domain is the fit's, broken down by the Nodes' label)`,
		"invalid-capacity-domain-key.yml":              `kubernetes[0] "prod": capacity_domain: "topology.kubernetes.io/zone name" is not a Node label key: name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')`,
		"invalid-pod-template-without-namespace.yml":   `kubernetes[0] "prod": namespace: missing (required by pod_template)`,
		"invalid-pod-template-missing.yml":             `kubernetes[0] "prod": pod_template: stat ../testdata/files/no-such-template.yaml: no such file or directory`,
		"invalid-pod-template-other-namespace.yml":     `kubernetes[0] "prod": pod_template: ../testdata/files/pod-template-namespaced.yaml: metadata.namespace "egress-proxies" is not the entry's namespace "other"`,
		// Errors in several sections: each is attributed to its own entry.
		"invalid-unknown-keys-in-two-sections.yml": `line 4: gcp[0] "g1": unknown field "bogus1"; line 8: kvm[0] "lab": unknown field "bogus2"`,
		"invalid-errors-in-three-sections.yml": `line 2: defaults: timeout: "10 parsecs" is not a valid duration (examples: 500ms, 10s, 1m30s); ` +
			"line 5: kubernetes[0] \"prod\": label_selector: cannot unmarshal !!seq into string; " +
			`line 11: gcp[1] "g2": unknown field "filters"; ` +
			`line 17: kvm[0] "lab": hosts[0]: unknown field "port"; ` +
			"line 14: kvm[0] \"lab\": max_concurrent_dials: cannot unmarshal !!str `many` into int",
		// gcp: source_image's two forms, the cap on regions, no token in clear text.
		"invalid-gcp-source-image.yml": `gcp[0] "crawl-prod": source_image: "https://www.googleapis.com/compute/v1/projects/debian-cloud/global/images/family/debian-12" ` +
			`is neither projects/PROJECT/global/images/NAME nor projects/PROJECT/global/images/family/FAMILY`,
		"invalid-gcp-too-many-regions.yml": `gcp[0] "crawl-prod": regions: 65 regions, more than the 64 an entry may check (Compute has about 40)`,
		"invalid-gcp-http-endpoint.yml": `gcp[0] "crawl-prod": endpoint: "http://compute.example" is plain http, which would send the OAuth access token in clear text: ` +
			`use https (plain http is accepted only to a loopback address such as 127.0.0.1, for tests)`,
	} {
		t.Run(file, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join("..", "testdata", file)
			_, err := config.Load(path, sections)
			if err == nil {
				t.Fatal("config.Load succeeded, want an error")
			}
			if got, want := err.Error(), "config file "+path+": "+want; got != want {
				t.Errorf("error\n got: %s\nwant: %s", got, want)
			}
		})
	}
}

// Every invalid-*.yml must have its row above, so none goes untested.
func TestEveryInvalidFileIsPaired(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("..", "testdata", "invalid-*.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 15 {
		t.Fatalf("only %d invalid-*.yml files", len(files))
	}
	src, err := os.ReadFile("config_test.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if !strings.Contains(string(src), `"`+filepath.Base(f)+`"`) {
			t.Errorf("%s has no expected error in TestLoadInvalid", f)
		}
	}
}

func TestLoadValidFull(t *testing.T) {
	t.Parallel()
	cfg, err := config.Load(filepath.Join("..", "testdata", "valid-full.yml"), sections)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Summary(); got != "1 kubernetes, 1 gcp, 1 kvm (3 hosts): 5 targets" {
		t.Errorf("summary %q", got)
	}
	k, g, v := config.EntriesOf[*kubernetes.Entry](cfg, "kubernetes")[0], config.EntriesOf[*gcp.Entry](cfg, "gcp")[0], config.EntriesOf[*kvm.Entry](cfg, "kvm")[0]
	if k.TimeoutDuration() != 5*time.Second || k.MinIntervalDuration() != 0 {
		t.Errorf("kubernetes timeout %v min_interval %v", k.TimeoutDuration(), k.MinIntervalDuration())
	}
	if g.TimeoutDuration() != 10*time.Second || g.MinIntervalDuration() != time.Minute {
		t.Errorf("gcp timeout %v min_interval %v", g.TimeoutDuration(), g.MinIntervalDuration())
	}
	if want := filepath.Join("..", "testdata", "files", "placeholder"); k.Kubeconfig != want {
		t.Errorf("relative kubeconfig resolved to %q, want %q", k.Kubeconfig, want)
	}
	if v.DialTimeout != config.Duration(2*time.Second) {
		t.Errorf("kvm dial_timeout %s, want 2s", v.DialTimeout)
	}
	hosts := v.Hosts
	for i, want := range []struct {
		address, name string
		own           kvm.HostSettings
	}{
		{"192.0.2.10:22", "beelink", kvm.HostSettings{User: "other", Pool: "fast", PrivateKeyFile: v.PrivateKeyFile}},
		{"192.0.2.11:22", "192.0.2.11", kvm.HostSettings{User: "proxyops", Pool: "default", PrivateKeyFile: v.PrivateKeyFile}},
		{"[2001:db8::1]:2222", "2001:db8::1", kvm.HostSettings{User: "proxyops", Pool: "default", PrivateKeyFile: v.PrivateKeyFile}},
	} {
		if h := hosts[i]; h.Address != want.address || h.Name != want.name || *h.HostSettings != want.own {
			t.Errorf("hosts[%d] = %s %s %+v, want %+v", i, h.Address, h.Name, *h.HostSettings, want)
		}
	}
	// The hosts that set nothing of their own share the entry's settings.
	if hosts[1].HostSettings != hosts[2].HostSettings {
		t.Error("hosts[1] and hosts[2] set nothing of their own, but each holds a copy of the entry's settings")
	}
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse([]byte(`
defaults:
  min_interval: 30s
kubernetes:
  - name: in-cluster
gcp:
  - name: g
    project: p
    min_interval: 0s
kvm:
  - name: lab
    user: u
    private_key_file: ../testdata/files/placeholder
    insecure_ignore_host_key: true
    hosts:
      - address: beelink.lab
`), sections)
	if err != nil {
		t.Fatal(err)
	}
	k, g, v := config.EntriesOf[*kubernetes.Entry](cfg, "kubernetes")[0], config.EntriesOf[*gcp.Entry](cfg, "gcp")[0], config.EntriesOf[*kvm.Entry](cfg, "kvm")[0]
	if k.LabelSelector != kubernetes.DefaultLabelSelector || k.TimeoutDuration() != 10*time.Second || k.MinIntervalDuration() != 30*time.Second {
		t.Errorf("kubernetes defaults: %+v", k)
	}
	if g.Filter != gcp.DefaultFilter || g.MinIntervalDuration() != 0 {
		t.Errorf("gcp defaults: filter %q, min_interval %v (explicit 0s must override the default)", g.Filter, g.MinIntervalDuration())
	}
	if v.LibvirtSocket != kvm.DefaultLibvirtSocket || v.LibvirtURI != kvm.DefaultLibvirtURI || v.Pool != kvm.DefaultPool || v.MaxConcurrentDials != kvm.DefaultMaxConcurrentDials || v.DialTimeout != kvm.DefaultDialTimeout {
		t.Errorf("kvm defaults: %+v", v)
	}
	if h := v.Hosts[0]; h.Address != "beelink.lab:22" || h.Name != "beelink.lab" {
		t.Errorf("host defaults: %+v", h)
	}
}

func TestEmptyFileIsValid(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse(nil, sections)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Targets() != 0 {
		t.Errorf("targets = %d", cfg.Targets())
	}
}

func TestNotARegularFile(t *testing.T) {
	t.Parallel()
	// A FIFO would block the loader forever if it were opened.
	_, err := config.Parse([]byte("kubernetes:\n  - name: k\n    kubeconfig: /dev/null\n"), sections)
	if err == nil || !strings.Contains(err.Error(), "is not a regular file") {
		t.Errorf("error = %v, want a refusal of /dev/null", err)
	}
}

// TestFilesThatWouldHang: the configuration file, or a file it names,
// that is a named pipe, a device or over its cap is a config error naming
// the file, the entry and the field, and never blocks the load.
func TestFilesThatWouldHang(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "zero")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 30); err != nil {
		t.Fatal(err)
	}
	f.Close()
	key := filepath.Join(dir, "key")
	if err := os.WriteFile(key, []byte("key"), 0o600); err != nil {
		t.Fatal(err)
	}
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	kvm := func(field, path string) string {
		return "kvm:\n  - name: lab\n    user: u\n    private_key_file: " + key + "\n    insecure_ignore_host_key: true\n    " +
			field + ": " + path + "\n    hosts: [{address: 127.0.0.1}]\n"
	}
	for _, tc := range []struct{ name, path, want string }{
		{"config file is a named pipe", fifo, "config file " + fifo + ": read " + fifo + ": not a regular file (a named pipe)"},
		{"config file is /dev/zero", zero, "not a regular file (a character device)"},
		{"config file of 1 GiB", big, "a configuration file may be at most 16 MiB"},
		{"kubeconfig is a named pipe", write("k.yml", "kubernetes: [{name: k, kubeconfig: "+fifo+"}]\n"),
			`kubernetes[0] "k": kubeconfig: ` + fifo + " is not a regular file"},
		{"credentials of 1 GiB", write("g.yml", "gcp: [{name: g, project: p, credentials_file: "+big+"}]\n"),
			`gcp[0] "g": credentials_file: read ` + big + ": file too large: a credentials file may be at most 1 MiB"},
		{"passphrase of 1 GiB", write("p.yml", kvm("passphrase_file", big)),
			`kvm[0] "lab": passphrase_file: read ` + big + ": file too large: a passphrase file may be at most 4 KiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := config.Load(tc.path, sections)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("config.Load = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// nestedEntry is the entry of a kind with a nested mapping and a list of
// them, to show that the loader is strict at every depth for any kind.
type nestedEntry struct {
	Name string `yaml:"name"`
	Auth struct {
		User string `yaml:"user"`
	} `yaml:"auth"`
	Paths []struct {
		Path string `yaml:"path"`
	} `yaml:"paths"`
	config.Check `yaml:",inline"`
}

func (e *nestedEntry) EntryName() string          { return e.Name }
func (e *nestedEntry) ResolvePaths(func(*string)) {}
func (e *nestedEntry) Validate(string) error      { return nil }
func (e *nestedEntry) TargetCount() int           { return len(e.Paths) }

func TestSectionOfAnotherKindIsStrict(t *testing.T) {
	t.Parallel()
	sections := append(slices.Clone(sections), config.Section{Kind: "toy", New: func() config.Entry { return &nestedEntry{} }})
	data := "toy:\n  - name: a\n    auth:\n      user: u\n      password: p\n    paths:\n      - path: /x\n        mode: 1\n    timeout: 1s\n"
	_, err := config.Parse([]byte(data), sections)
	want := `line 5: toy[0] "a": auth: unknown field "password"; line 8: toy[0] "a": paths[0]: unknown field "mode"`
	if err == nil || err.Error() != want {
		t.Fatalf("parse = %v\nwant %s", err, want)
	}
	cfg, err := config.Parse([]byte("toy:\n  - name: a\n    auth: {user: u}\n    paths: [{path: /x}, {path: /y}]\n"), sections)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Summary(); got != "0 kubernetes, 0 gcp, 0 kvm (0 hosts), 1 toy: 2 targets" {
		t.Errorf("summary %q", got)
	}
	if e := cfg.Entries("toy")[0].(*nestedEntry); e.Auth.User != "u" || *e.Timeout != config.DefaultTimeout {
		t.Errorf("decoded %+v", e)
	}
}

// The kvm minimums: plain bytes or binary units, the entry's taken by a
// host that sets none, a host's own winning.
func TestKVMMinimums(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse([]byte(`
kvm:
  - name: lab
    user: u
    private_key_file: ../testdata/files/placeholder
    insecure_ignore_host_key: true
    min_pool_available: 1073741824
    hosts:
      - address: beelink.lab
      - address: nuc.lab
        min_pool_available: 20GiB
        min_free_memory: 4Gi
`), sections)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []struct{ pool, mem uint64 }{{1 << 30, 0}, {20 << 30, 4 << 30}} {
		h := config.EntriesOf[*kvm.Entry](cfg, "kvm")[0].Hosts[i]
		if h.MinPoolAvailableBytes != want.pool || h.MinFreeMemoryBytes != want.mem {
			t.Errorf("hosts[%d]: min_pool_available %d, min_free_memory %d; want %d, %d",
				i, h.MinPoolAvailableBytes, h.MinFreeMemoryBytes, want.pool, want.mem)
		}
	}
}

// The kvm placement names: the entry's taken by a host that sets none, a
// host's own kept, and a name libvirt would refuse is an error naming the
// entry, the host and the field.
func TestKVMPlacement(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse([]byte(`
kvm:
  - name: lab
    user: u
    private_key_file: ../testdata/files/placeholder
    insecure_ignore_host_key: true
    volume: proxy-base.qcow2
    hosts:
      - address: beelink.lab
      - address: nuc.lab
        volume: other.qcow2
        network: proxies
`), sections)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []struct{ volume, network string }{{"proxy-base.qcow2", ""}, {"other.qcow2", "proxies"}} {
		h := config.EntriesOf[*kvm.Entry](cfg, "kvm")[0].Hosts[i]
		if h.Volume != want.volume || h.Network != want.network {
			t.Errorf("hosts[%d]: volume %q, network %q; want %q, %q", i, h.Volume, h.Network, want.volume, want.network)
		}
	}
	for _, tt := range []struct{ yaml, want string }{
		{"    network: a/b\n    hosts:\n      - address: h\n", `kvm[0] "lab": network: "a/b" contains '/', which libvirt does not allow in a network name`},
		{"    hosts:\n      - address: h\n        volume: \"a\\nb\"\n", `kvm[0] "lab": hosts[0]: volume: "a\nb" contains a control character`},
		{"    volume: " + strings.Repeat("v", 1025) + "\n    hosts:\n      - address: h\n", `kvm[0] "lab": volume: 1025 bytes, at most 1024`},
	} {
		_, err := config.Parse([]byte("kvm:\n  - name: lab\n    user: u\n    private_key_file: ../testdata/files/placeholder\n    insecure_ignore_host_key: true\n"+tt.yaml), sections)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("error %v, want one containing %q", err, tt.want)
		}
	}
}

// TestMarshalRedactsURLs: /config's text shows no URL userinfo or query
// value, while the entry keeps them for its check.
func TestMarshalRedactsURLs(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse([]byte("gcp:\n  - name: g\n    project: p\n    endpoint: https://user:s3cret@compute.example:8443/api?key=k3y#frag\n"), sections)
	if err != nil {
		t.Fatal(err)
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "endpoint: https://compute.example:8443/api?key=xxxxx\n") || strings.Contains(string(out), "s3cret") || strings.Contains(string(out), "k3y") {
		t.Errorf("marshalled configuration:\n%s", out)
	}
	if g := config.EntriesOf[*gcp.Entry](cfg, "gcp")[0]; g.Endpoint != "https://user:s3cret@compute.example:8443/api?key=k3y#frag" {
		t.Errorf("the entry's endpoint became %q", g.Endpoint)
	}
}
