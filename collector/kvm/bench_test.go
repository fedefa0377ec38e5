package kvm

import (
	"context"
	"log/slog"
	"testing"

	"github.com/egress-proxies/provider_health_exporter/collector"
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
				if v := c.Check(ctx, logger, hostName); v.Reason != collector.ReasonReady {
					b.Fatalf("reason %s (%s)", v.Reason, v.Message)
				}
				if bc.redial {
					h := c.byName[hostName]
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
