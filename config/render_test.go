package config_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/egress-proxies/provider_health_exporter/config"
)

// TestRenderYAMLIsMarshalYAML: /config's rendering, entry by entry and a
// long list in pieces, is byte for byte what marshalling the whole
// configuration at once gives: for the full example, and for entries of
// hundreds of hosts with every optional key, a multi-line value and a
// second entry after them.
func TestRenderYAMLIsMarshalYAML(t *testing.T) {
	t.Parallel()
	full, err := config.Load(filepath.Join("..", "testdata", "valid-full.yml"), sections)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	key := filepath.Join(dir, "key")
	if err := os.WriteFile(key, []byte("k"), 0o600); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "defaults: {timeout: 5s}\nkvm:\n")
	for e, n := range []int{300, 1, config.RenderChunk + 1, config.RenderChunk} {
		fmt.Fprintf(&b, "  - name: lab%d\n    user: proxyops\n    private_key_file: %s\n    insecure_ignore_host_key: true\n    pool: \"multi\\nline\\n\\npool\"\n    hosts:\n", e, key)
		for i := range n {
			fmt.Fprintf(&b, "      - address: 10.0.%d.%d:22\n", i/256, i%256)
			if i%3 == 0 {
				fmt.Fprintf(&b, "        name: \"host: %d\"\n        min_pool_available: %dGiB\n        pool: \"a\\nb\"\n", i, i+1)
			}
		}
	}
	b.WriteString("kubernetes:\n  - name: k\n    namespace: egress-proxies\n    can_i: [create pods]\n")
	b.WriteString("gcp:\n  - name: g\n    project: p\n    endpoint: https://user:s3cret@compute.example:8443/api?key=k3y\n")
	large, err := config.Parse([]byte(b.String()), sections)
	if err != nil {
		t.Fatal(err)
	}
	for name, cfg := range map[string]*config.Config{"valid-full.yml": full, "large": large} {
		want, err := yaml.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		got, err := cfg.RenderYAML()
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("%s: RenderYAML differs from yaml.Marshal:\n%s", name, firstDifference(string(want), string(got)))
		}
		if strings.Contains(string(got), "s3cret") || strings.Contains(string(got), "k3y") {
			t.Errorf("%s: a URL's secret in /config", name)
		}
	}
}

func firstDifference(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := range min(len(w), len(g)) {
		if w[i] != g[i] {
			return fmt.Sprintf("line %d: want %q, got %q", i+1, w[i], g[i])
		}
	}
	return fmt.Sprintf("want %d lines, got %d", len(w), len(g))
}

// BenchmarkRenderYAML: /config of 5,000 hosts (docs/scaling.md: "Large
// configurations"); compare with yaml.Marshal of the same.
func BenchmarkRenderYAML(b *testing.B) {
	key := filepath.Join(b.TempDir(), "key")
	if err := os.WriteFile(key, []byte("k"), 0o600); err != nil {
		b.Fatal(err)
	}
	var s strings.Builder
	s.WriteString("kvm:\n  - name: fleet\n    user: proxyops\n    private_key_file: " + key + "\n    insecure_ignore_host_key: true\n    hosts:\n")
	for i := range 5000 {
		fmt.Fprintf(&s, "      - address: 10.0.%d.%d:22\n", i/256, i%256)
	}
	cfg, err := config.Parse([]byte(s.String()), sections)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("RenderYAML", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := cfg.RenderYAML(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("yaml.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := yaml.Marshal(cfg); err != nil {
				b.Fatal(err)
			}
		}
	})
}
