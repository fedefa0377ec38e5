package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/egress-proxies/provider_health_exporter/config"
	"github.com/egress-proxies/provider_health_exporter/internal/engine"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

// TestReloadBuildsOnlyChangedEntries loads the real checkers through the
// kinds table, as a reload does: an entry whose settings did not change is
// not built again (it keeps its client, token and connections), a changed
// one is.
func TestReloadBuildsOnlyChangedEntries(t *testing.T) {
	// No check runs here, but keep any credential lookup on loopback.
	t.Setenv("GCE_METADATA_HOST", "127.0.0.1:1")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "placeholder"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.DiscardHandler)
	builds := map[string]int{}
	load := func(project string) []engine.Entry {
		path := filepath.Join(dir, "provider_health.yml")
		body := `
kubernetes:
  - name: k
    kubeconfig: placeholder
gcp:
  - name: g
    project: ` + project + `
kvm:
  - name: lab
    user: u
    private_key_file: placeholder
    insecure_ignore_host_key: true
    hosts:
      - address: 127.0.0.1:1
`
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Load(path, provider.Sections(builtinKinds()))
		if err != nil {
			t.Fatal(err)
		}
		es := entries(cfg, logger)
		for i := range es {
			build, name := es[i].Build, es[i].Name
			es[i].Build = func() (provider.Checker, error) { builds[name]++; return build() }
		}
		return es
	}
	engine := engine.NewEngine(logger)
	defer engine.Close()
	for _, step := range []struct {
		project string
		want    map[string]int
	}{
		{"p1", map[string]int{"k": 1, "g": 1, "lab": 1}},
		{"p1", map[string]int{"k": 1, "g": 1, "lab": 1}},
		{"p2", map[string]int{"k": 1, "g": 2, "lab": 1}},
	} {
		if err := engine.Load(load(step.project)); err != nil {
			t.Fatal(err)
		}
		for name, n := range step.want {
			if builds[name] != n {
				t.Errorf("project %s: %s built %d times, want %d", step.project, name, builds[name], n)
			}
		}
	}
}

// TestKindsTable: the table main builds passes the checks main runs
// first (provider.NewTable), and collect[] accepts each kind.
func TestKindsTable(t *testing.T) {
	t.Parallel()
	kinds, err := kindTable()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range kinds {
		if !validCollect(kinds, k.Name()) {
			t.Errorf("collect[]=%s is refused", k.Name())
		}
	}
}

// TestOptInReasons: the reasons only a headroom key's check gives are in an
// entry's state set when, and only when, the entry sets that key, so that a
// configuration without them exports exactly the series it did before
// (docs/configuration.md).
func TestOptInReasons(t *testing.T) {
	t.Parallel()
	key := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(key, []byte("a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse([]byte(strings.ReplaceAll(`
kubernetes:
  - name: k-plain
  - name: k-quota
    namespace: egress-proxies
    min_quota_headroom: {pods: "1"}
gcp:
  - name: g-plain
    project: crawl-prod-123
  - name: g-quota
    project: crawl-prod-123
    regions: [us-central1]
    min_quota_headroom: {CPUS: 8}
kvm:
  - name: v-plain
    insecure_ignore_host_key: true
    user: proxyops
    private_key_file: KEY
    hosts: [{address: 127.0.0.1:22}]
  - name: pool
    insecure_ignore_host_key: true
    user: proxyops
    private_key_file: KEY
    hosts: [{address: 127.0.0.1:22, min_pool_available: 20GiB}]
  - name: memory
    insecure_ignore_host_key: true
    user: proxyops
    private_key_file: KEY
    min_free_memory: 4GiB
    hosts: [{address: 127.0.0.1:22}]
  - name: vcpus
    insecure_ignore_host_key: true
    user: proxyops
    private_key_file: KEY
    cpu_allocation_ratio: 8
    hosts: [{address: 127.0.0.1:22}, {address: 127.0.0.2:22, min_free_vcpus: 2}]
  - name: volume
    insecure_ignore_host_key: true
    user: proxyops
    private_key_file: KEY
    hosts: [{address: 127.0.0.1:22}, {address: 127.0.0.2:22, volume: proxy-base.qcow2}]
  - name: network
    insecure_ignore_host_key: true
    user: proxyops
    private_key_file: KEY
    network: proxies
    hosts: [{address: 127.0.0.1:22}]
`, "KEY", key)), provider.Sections(builtinKinds()))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]provider.Reason{
		"kubernetes/k-quota": {"QuotaExhausted"},
		"gcp/g-quota":        {"QuotaExhausted"},
		"kvm/pool":           {"PoolFull"},
		"kvm/memory":         {"HostMemoryLow"},
		"kvm/vcpus":          {"HostCPULow"},
		"kvm/volume":         {"VolumeMissing"},
		"kvm/network":        {"NetworkMissing", "NetworkInactive"},
	}
	optIn := []provider.Reason{"QuotaExhausted", "PoolFull", "HostMemoryLow", "HostCPULow", "VolumeMissing", "NetworkMissing", "NetworkInactive"}
	for _, e := range entries(cfg, slog.New(slog.DiscardHandler)) {
		key := e.Kind + "/" + e.Name
		for _, r := range optIn {
			if got, w := e.Reasons.Contains(r), slices.Contains(want[key], r); got != w {
				t.Errorf("%s: reason %s in the state set: %v, want %v", key, r, got, w)
			}
		}
		if err := e.Reasons.Validate(); err != nil {
			t.Errorf("%s: %v", key, err)
		}
	}
}
