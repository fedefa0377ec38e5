//go:build integration

package kvm

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/egress-proxies/provider_health_exporter/collector"
)

// HeadroomForTest runs one check of target, then, on the connection it
// kept, the headroom part a wired check will make: NodeGetFreeMemory when
// mins.FreeMemory is set, and the verdict of headroomVerdict. It lets the
// integration tests (package kvm_test) reach both against the real libvirtd
// before the config keys exist.
func (c *Checker) HeadroomForTest(ctx context.Context, logger *slog.Logger, target string, mins Minimums) (collector.Reason, string, uint64, error) {
	v := c.Check(ctx, logger, target)
	f, _ := v.Facts.(*Facts)
	if v.Reason != collector.ReasonReady || f == nil {
		return v.Reason, v.Message, 0, nil
	}
	h := c.byName[target]
	var free uint64
	if mins.FreeMemory > 0 {
		s := h.current(logger)
		if s == nil {
			return collector.ReasonUnknown, "", 0, fmt.Errorf("no kept connection to %s after a Ready check", target)
		}
		var reason collector.Reason
		var err error
		free, reason, err = c.checkFreeMemory(ctx, logger, h, s)
		if err != nil {
			return reason, "", 0, err
		}
	}
	reason, msg := headroomVerdict(v.Reason, f.Pool, f.AvailableBytes, mins, free)
	return reason, msg, free, nil
}
