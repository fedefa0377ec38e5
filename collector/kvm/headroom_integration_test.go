//go:build integration

package kvm_test

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/egress-proxies/provider_health_exporter/collector/kvm"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

// TestIntegrationHeadroom: against the real sshd and the session libvirtd,
// a min_pool_available above the pool's real available bytes gives
// PoolFull, one below gives Ready, and NodeGetFreeMemory is answered with
// the host's free memory.
func TestIntegrationHeadroom(t *testing.T) {
	e := loadEnv(t)
	run := func(mins kvm.Minimums) (provider.Reason, string, uint64) {
		t.Helper()
		c := e.checker(t, func(cfg *kvm.Entry) {
			cfg.Hosts[0].MinPoolAvailableBytes, cfg.Hosts[0].MinFreeMemoryBytes = mins.PoolAvailable, mins.FreeMemory
		})
		v := check(t, c)
		f := factsOf(t, v)
		answered := v.Reason == provider.ReasonReady || v.Reason == kvm.ReasonHostMemoryLow || v.Reason == kvm.ReasonPoolFull
		if answered && f.FreeMemoryKnown != (mins.FreeMemory > 0) {
			t.Errorf("free memory known %v with min_free_memory %d (%s %q)", f.FreeMemoryKnown, mins.FreeMemory, v.Reason, v.Message)
		}
		return v.Reason, v.Message, f.FreeMemoryBytes
	}
	v := check(t, e.checker(t, nil))
	want(t, v, provider.ReasonReady)
	available := factsOf(t, v).AvailableBytes
	if available == 0 {
		t.Fatal("the pool reports 0 available bytes")
	}

	if reason, msg, _ := run(kvm.Minimums{PoolAvailable: available * 2}); reason != kvm.ReasonPoolFull ||
		!strings.HasPrefix(msg, "pool "+e.pool+": ") || !strings.HasSuffix(msg, " required") {
		t.Errorf("min_pool_available twice the real %d bytes: %s %q, want PoolFull", available, reason, msg)
	}
	if reason, msg, _ := run(kvm.Minimums{PoolAvailable: 1}); reason != provider.ReasonReady {
		t.Errorf("min_pool_available 1 byte: %s %q, want Ready", reason, msg)
	}

	// The capacity is what the real pool's available bytes allow, read in
	// the same check: a third of them per proxy fits three (the pool's
	// use by others may move its bytes between checks, never within one).
	for _, tc := range []struct {
		need    uint64
		atLeast int64
	}{{available / 3, 3}, {available, 1}, {available * 2, 0}, {1 << 20, 1}} {
		c := e.checker(t, func(cfg *kvm.Entry) { cfg.Hosts[0].MinPoolAvailableBytes = tc.need })
		v := check(t, c)
		f := factsOf(t, v)
		want := provider.Capacity{Known: true, Proxies: int64(f.AvailableBytes / tc.need), Binding: "pool " + e.pool}
		if v.Capacity != want || (v.Capacity.Proxies >= 1) != (v.Reason == provider.ReasonReady) {
			t.Errorf("min_pool_available %d of %d available: capacity %s (%s), want %s", tc.need, f.AvailableBytes, v.Capacity, v.Reason, want)
		}
		t.Logf("min_pool_available %d: capacity %s, %s %q", tc.need, v.Capacity, v.Reason, v.Message)
	}

	reason, msg, free := run(kvm.Minimums{FreeMemory: 1})
	if reason != provider.ReasonReady {
		t.Fatalf("min_free_memory 1 byte: %s %q, want Ready", reason, msg)
	}
	// libvirtd reads the free memory of the whole host from /proc/meminfo
	// (or NUMA nodes), which changes all the time: only a sane range can
	// be asserted, whatever the load.
	total := memTotal(t)
	if free == 0 || free > total {
		t.Errorf("NodeGetFreeMemory says %d bytes free, want 0 < free <= MemTotal %d", free, total)
	}
	t.Logf("NodeGetFreeMemory: %d bytes free of %d", free, total)
	// Memory and pool together: the capacity is the lesser of the two
	// from the readings of the one check.
	c := e.checker(t, func(cfg *kvm.Entry) {
		cfg.Hosts[0].MinPoolAvailableBytes, cfg.Hosts[0].MinFreeMemoryBytes = available/1000, 64<<20
	})
	v = check(t, c)
	f := factsOf(t, v)
	pool, mem := int64(f.AvailableBytes/(available/1000)), int64(f.FreeMemoryBytes/(64<<20))
	wantCap := provider.Capacity{Known: true, Proxies: pool, Binding: "pool " + e.pool}
	if mem < pool {
		wantCap = provider.Capacity{Known: true, Proxies: mem, Binding: "memory"}
	}
	if v.Capacity != wantCap {
		t.Errorf("both keys: capacity %s, want %s (pool %d, memory %d)", v.Capacity, wantCap, pool, mem)
	}
	t.Logf("min_pool_available %d, min_free_memory 64MiB: capacity %s, %s %q", available/1000, v.Capacity, v.Reason, v.Message)
	if reason, msg, _ := run(kvm.Minimums{FreeMemory: total + 1}); reason != kvm.ReasonHostMemoryLow ||
		!strings.HasPrefix(msg, "host free memory: ") {
		t.Errorf("min_free_memory above MemTotal: %s %q, want HostMemoryLow", reason, msg)
	}
	if reason, _, _ := run(kvm.Minimums{PoolAvailable: available * 2, FreeMemory: total + 1}); reason != kvm.ReasonPoolFull {
		t.Errorf("both short: %s, want PoolFull first", reason)
	}
}

// memTotal is MemTotal of /proc/meminfo in bytes: the sshd and libvirtd of
// the integration tests run on this machine.
func memTotal(t *testing.T) uint64 {
	t.Helper()
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 3 && fields[0] == "MemTotal:" && fields[2] == "kB" {
			kb, err := strconv.ParseUint(fields[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no MemTotal in /proc/meminfo")
	return 0
}
