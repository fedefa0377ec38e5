package kvm

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// BenchmarkCheck compares a check on the kept connection (the steady state:
// two pool calls) with one that must dial first (TCP, SSH handshake, socket,
// libvirt connect), against the in-process SSH server and the fake libvirt.
func BenchmarkCheck(b *testing.B) {
	for _, bc := range []struct {
		name   string
		redial bool
	}{{"kept", false}, {"dial", true}} {
		b.Run(bc.name, func(b *testing.B) {
			e := newEnv(b)
			c := e.checker()
			logger := slog.New(slog.DiscardHandler)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if v := c.Check(ctx, logger, hostName); v.Reason != provider.ReasonReady {
					b.Fatalf("reason %s (%s)", v.Reason, v.Message)
				}
				if bc.redial {
					h := c.lookup(hostName)
					h.mu.Lock()
					s := h.sess
					h.sess = nil
					h.mu.Unlock()
					s.close()
				}
			}
		})
	}
}

// BenchmarkKnownHostsHeap measures the heap a parsed known_hosts holds, per
// line: the entry's hosts share one parse (material), so this is a cost per
// entry, not per host, and the fleet benchmark's heap per host carries it
// divided by the number of hosts (docs/scaling.md: "Memory").
func BenchmarkKnownHostsHeap(b *testing.B) {
	for _, lines := range []int{1000, 5000} {
		b.Run(fmt.Sprintf("lines=%d", lines), func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "known_hosts")
			var buf strings.Builder
			for i := range lines {
				buf.WriteString(knownHostsLine(fmt.Sprintf("192.0.2.%d:%d", i%250+1, 2000+i), randomKey(b)))
			}
			if err := os.WriteFile(path, []byte(buf.String()), 0o600); err != nil {
				b.Fatal(err)
			}
			var held int64
			for b.Loop() {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				cb, err := loadKnownHosts(settings{knownHostsFile: path})
				if err != nil {
					b.Fatal(err)
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				runtime.KeepAlive(cb)
				held = int64(after.HeapAlloc) - int64(before.HeapAlloc)
			}
			b.ReportMetric(float64(held)/float64(lines), "heap-B/line")
			b.ReportMetric(float64(held)/(1<<10), "heap-KiB")
		})
	}
}
