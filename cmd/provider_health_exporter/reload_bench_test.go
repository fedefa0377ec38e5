package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// largeKVMConfig is a configuration of one KVM entry with as many hosts as
// fill size bytes: 16 MiB, the cap of a configuration file, holds some
// 128,000 (docs/scaling.md: "Large configurations").
func largeKVMConfig(size int) string {
	var cfg strings.Builder
	cfg.Grow(size)
	cfg.WriteString("kvm:\n  - name: fleet\n    user: proxyops\n    private_key_file: key\n    insecure_ignore_host_key: true\n    hosts:\n")
	for i := 0; ; i++ {
		host := fmt.Sprintf("      - address: 10.%d.%d.%d:22\n        name: proxy-host-%06d\n", i>>16&255, i>>8&255, i&255, i)
		if cfg.Len()+len(host) > size {
			break
		}
		cfg.WriteString(host)
	}
	return cfg.String()
}

// BenchmarkReloadLarge reloads a 16 MiB configuration through the
// exporter's reload, with the real kinds: the parse, the entries, the
// engine's load. Run it with -memprofile to see where a reload's memory
// goes. yaml.v3's node tree of the whole file (211 MiB held at once) is
// no longer built: the file is decoded list by list (config/large.go),
// whose garbage is trees of 64 KiB pieces. Working out a struct's fields
// per host and hashing each field through its own conversion or JSON
// encoding made another 300 MB until they were cached and buffered (988 MB
// and 24 million allocations per reload before, 581 MB and 10.4 million
// after; 505 MB and 10.0 million decoded list by list).
// TestLargeReloadsUnderTheDeploymentLimit measures the real binary's peak.
func BenchmarkReloadLarge(b *testing.B) {
	dir := b.TempDir()
	writeFile(b, filepath.Join(dir, "key"), "not a key")
	path := filepath.Join(dir, "provider_health.yml")
	cfg := largeKVMConfig(16<<20 - 1)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		b.Fatal(err)
	}
	x := newExporter(exporterOptions{logger: slog.New(slog.DiscardHandler), configFile: path, metricsPath: "/metrics"})
	b.Cleanup(x.engine.Close)
	b.ReportAllocs()
	for b.Loop() {
		if err := x.reload(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(cfg)), "config-bytes")
}
