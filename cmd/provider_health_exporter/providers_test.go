package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/egress-proxies/provider_health_exporter/collector"
	"github.com/egress-proxies/provider_health_exporter/config"
)

// TestReloadKeepsUnchangedCheckers builds the real checkers twice, as a
// reload does: unchanged kubernetes and gcp entries keep their checker (and
// so their client and token), a changed one gets a new checker, and kvm
// always gets a new checker (which adopts kept connections).
func TestReloadKeepsUnchangedCheckers(t *testing.T) {
	// No check runs here, but keep any credential lookup on loopback.
	t.Setenv("GCE_METADATA_HOST", "127.0.0.1:1")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "placeholder"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	write := func(project string) *config.Config {
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
		cfg, err := config.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	logger := slog.New(slog.DiscardHandler)
	engine := collector.NewEngine(logger)
	defer engine.Close()

	first, err := buildSpecs(context.Background(), write("p1"), logger, engine.Unchanged)
	if err != nil {
		t.Fatal(err)
	}
	engine.SetProviders(first)
	second, err := buildSpecs(context.Background(), write("p1"), logger, engine.Unchanged)
	if err != nil {
		t.Fatal(err)
	}
	for i, kept := range []bool{true, true, false} { // kubernetes, gcp, kvm
		if same := first[i].Checker == second[i].Checker; same != kept {
			t.Errorf("%s: checker kept = %v, want %v", first[i].Kind, same, kept)
		}
	}
	engine.SetProviders(second)
	third, err := buildSpecs(context.Background(), write("p2"), logger, engine.Unchanged)
	if err != nil {
		t.Fatal(err)
	}
	if third[0].Checker != second[0].Checker {
		t.Error("unchanged kubernetes entry got a new checker")
	}
	if third[1].Checker == second[1].Checker {
		t.Error("gcp entry with another project kept its checker")
	}
	engine.SetProviders(third)
}
