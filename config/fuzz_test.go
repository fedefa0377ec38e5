package config_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/egress-proxies/provider_health_exporter/config"
)

// testdataConfigs are the configuration files under testdata, valid and
// invalid: the fuzzers' seeds.
func testdataConfigs(tb testing.TB) [][]byte {
	tb.Helper()
	files, err := filepath.Glob(filepath.Join("..", "testdata", "*.yml"))
	if err != nil {
		tb.Fatal(err)
	}
	var out [][]byte
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// FuzzParse feeds the loader arbitrary bytes, seeded with every config
// under testdata: no input may panic or hang it.
func FuzzParse(f *testing.F) {
	for _, b := range testdataConfigs(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := config.Parse(data, sections)
		if err != nil {
			if err.Error() == "" {
				t.Error("empty error message")
			}
			return
		}
		// A valid config must describe itself without panicking.
		_ = cfg.Summary()
	})
}

// FuzzLoad: Load, which also resolves and reads the files a config refers
// to, never panics on any file content. The directory holds the files the
// seeds name.
func FuzzLoad(f *testing.F) {
	for _, b := range testdataConfigs(f) {
		f.Add(b)
	}
	f.Add([]byte("kvm:\n  - name: lab\n    user: u\n    private_key_file: key\n    known_hosts_file: known_hosts\n    hosts:\n      - address: 127.0.0.1\n"))
	f.Add([]byte("gcp:\n  - name: g\n    project: p\n    credentials_file: ../outside/creds.json\n"))
	dir := f.TempDir()
	for _, name := range []string{"key", "known_hosts", "creds.json", "kubeconfig", "placeholder"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o600); err != nil {
			f.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "adir"), 0o700); err != nil {
		f.Fatal(err)
	}
	path := filepath.Join(dir, "provider_health.yml")
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Load(path, sections)
		if err != nil {
			if err.Error() == "" {
				t.Error("empty error message")
			}
			return
		}
		_ = cfg.Summary()
	})
}
