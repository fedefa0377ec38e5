//go:build integration

package kvm_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies/provider_health_exporter/collector/kvm"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

// promisedEnv defines domains and creates volumes in the real session
// libvirtd, each removed at the end of the test.
type promisedEnv struct {
	itEnv
	t *testing.T
}

// define defines a domain of vcpus vCPUs and memMiB MiB, shut off: a
// defined domain is promised its resources whether it runs or not.
func (e promisedEnv) define(name string, vcpus int, memMiB uint64) {
	e.t.Helper()
	xml := fmt.Sprintf(`<domain type='qemu'><name>%s</name><memory unit='MiB'>%d</memory><vcpu>%d</vcpu><os><type arch='x86_64'>hvm</type></os></domain>`,
		name, memMiB, vcpus)
	path := filepath.Join(e.t.TempDir(), name+".xml")
	if err := os.WriteFile(path, []byte(xml), 0o644); err != nil {
		e.t.Fatal(err)
	}
	e.virsh(e.t, "define", path)
	e.t.Cleanup(func() { _, _ = e.tryVirsh("undefine", name) })
}

// volume creates a sparse raw volume of sizeMiB MiB of virtual size and no
// allocation: it costs the pool nothing now and promises its whole size.
func (e promisedEnv) volume(name string, sizeMiB uint64) {
	e.t.Helper()
	e.virsh(e.t, "vol-create-as", e.pool, name, fmt.Sprintf("%dM", sizeMiB), "--allocation", "0", "--format", "raw")
	e.t.Cleanup(func() { _, _ = e.tryVirsh("vol-delete", "--pool", e.pool, name) })
}

// entry is a kvm entry with two hosts on the one sshd and libvirtd, "a"
// and "b", made as Load makes it: the keys as the file has them, then
// validated, which applies the defaults and the per-host overrides.
func (e promisedEnv) entry(mod func(cfg *kvm.Entry)) *kvm.Checker {
	e.t.Helper()
	cfg := e.config(func(cfg *kvm.Entry) {
		cfg.Hosts = []*kvm.Host{{Address: e.address, Name: "a"}, {Address: e.address, Name: "b"}}
		cfg.DialTimeout = kvm.DefaultDialTimeout
	})
	mod(cfg)
	if err := cfg.Validate("kvm[0]"); err != nil {
		e.t.Fatal(err)
	}
	c, err := kvm.New(cfg, logger(e.t))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.Close() })
	return c
}

// checkHost checks one host of c and returns its verdict and the calls
// the check made.
func checkHost(t *testing.T, c *kvm.Checker, host string) (provider.Verdict, *kvm.Facts, string) {
	t.Helper()
	rec := &callLog{next: slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}), rec: &calls{}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	v := c.Check(ctx, slog.New(rec), host)
	if v.Capacity.Contradicts(v.Reason) {
		t.Errorf("capacity %s contradicts the verdict %s (%s)", v.Capacity, v.Reason, v.Message)
	}
	return v, factsOf(t, v), rec.take()
}

func ratio(v float64) *float64 { return &v }

func wantCapacity(t *testing.T, what string, v provider.Verdict, reason provider.Reason, proxies int64, binding string) {
	t.Helper()
	if want := (provider.Capacity{Known: true, Proxies: proxies, Binding: binding}); v.Reason != reason || v.Capacity != want {
		t.Errorf("%s: %s %s (%q), want %s %s", what, v.Reason, v.Capacity, v.Message, reason, want)
	}
	t.Logf("%s: %s, capacity %s, message %q", what, v.Reason, v.Capacity, v.Message)
}

// TestIntegrationPromised: against the real libvirtd, with domains defined
// (shut off) and sparse volumes created in the test pool, each promised
// resource's capacity and reason are the arithmetic on what was defined
// and created; the least constraint binds; the defaults (ratio 4, 512 MiB
// reserved) and a per-host override apply; a domain defined or undefined
// between two checks moves the capacity; an entry without the keys makes
// the one call it always made.
func TestIntegrationPromised(t *testing.T) {
	e := promisedEnv{loadEnv(t), t}

	// What the host has before the test's domains and volumes, read by
	// the exporter itself: its CPUs and memory, and whatever else is
	// defined (nothing, unless another test left something).
	all := e.entry(func(cfg *kvm.Entry) {
		cfg.MinFreeVCPUs, cfg.MinFreeMemory, cfg.MinPoolAvailable = 1, "1MiB", "1MiB"
		cfg.MemoryAllocationRatio, cfg.DiskAllocationRatio = ratio(1), ratio(1)
	})
	_, base, calls := checkHost(t, all, "a")
	if !base.HostKnown || base.HostCPUs == 0 || base.HostMemoryBytes == 0 || !base.DomainsKnown || !base.VolumesKnown {
		t.Fatalf("the keys' readings are not all known: %+v", base)
	}
	if total := memTotal(t); base.HostMemoryBytes > total || base.HostMemoryBytes < total/2 {
		t.Errorf("NodeGetInfo says %d bytes of memory, /proc/meminfo %d", base.HostMemoryBytes, total)
	}
	t.Logf("host: %d CPUs, %d bytes; already defined: %d vCPUs, %d bytes; pool %d bytes, volumes %d bytes; first check's calls %q",
		base.HostCPUs, base.HostMemoryBytes, base.DomainsVCPUs, base.DomainsMemory, base.CapacityBytes, base.VolumesCapacity, calls)
	if !strings.Contains(calls, "NodeGetInfo ") {
		t.Errorf("first check's calls %q, want NodeGetInfo", calls)
	}

	e.define("phe-it-a", 3, 1024)
	e.define("phe-it-b", 2, 2048)
	const definedVCPUs, definedMemory = 5, 3 << 30

	t.Run("no keys: one call per steady check", func(t *testing.T) {
		c := e.entry(func(*kvm.Entry) {})
		checkHost(t, c, "a")
		for range 3 {
			v, f, calls := checkHost(t, c, "a")
			if v.Reason != provider.ReasonReady || calls != "StoragePoolGetInfo" || v.Capacity.Known || f.HostKnown || f.DomainsKnown || f.VolumesKnown {
				t.Errorf("%s %s, calls %q, facts %+v; want Ready with no capacity after StoragePoolGetInfo alone", v.Reason, v.Capacity, calls, f)
			}
		}
	})

	t.Run("vCPUs at the default ratio, a per-host override, and a domain defined and undefined", func(t *testing.T) {
		c := e.entry(func(cfg *kvm.Entry) {
			cfg.MinFreeVCPUs = 1
			cfg.Hosts[1].HostSettings = &kvm.HostSettings{CPUAllocationRatio: ratio(8)}
		})
		v, f, _ := checkHost(t, c, "a")
		promised := base.DomainsVCPUs + definedVCPUs
		if f.DomainsVCPUs != promised {
			t.Fatalf("%d vCPUs promised, want %d + %d defined", f.DomainsVCPUs, base.DomainsVCPUs, definedVCPUs)
		}
		alloc := int64(base.HostCPUs) * 4
		proxies := max(alloc-int64(promised), 0)
		reason := provider.ReasonReady
		if proxies < 1 {
			reason = kvm.ReasonHostCPULow
		}
		wantCapacity(t, "ratio 4 (the default)", v, reason, proxies, fmt.Sprintf("vCPUs: %d of %d at ratio 4", promised, alloc))

		v, _, _ = checkHost(t, c, "b")
		alloc8 := int64(base.HostCPUs) * 8
		wantCapacity(t, "host b's ratio 8", v, provider.ReasonReady, alloc8-int64(promised), fmt.Sprintf("vCPUs: %d of %d at ratio 8", promised, alloc8))

		e.define("phe-it-c", 4, 512)
		v, _, calls := checkHost(t, c, "b")
		wantCapacity(t, "host b after defining 4 vCPUs more", v, provider.ReasonReady, alloc8-int64(promised)-4,
			fmt.Sprintf("vCPUs: %d of %d at ratio 8", promised+4, alloc8))
		if calls != "StoragePoolGetInfo ConnectGetAllDomainStats" {
			t.Errorf("steady check's calls %q, want the pool's info and the domains' stats", calls)
		}
		e.virsh(t, "undefine", "phe-it-c")
		v, _, _ = checkHost(t, c, "b")
		wantCapacity(t, "host b after undefining them", v, provider.ReasonReady, alloc8-int64(promised), fmt.Sprintf("vCPUs: %d of %d at ratio 8", promised, alloc8))

		// One proxy of more vCPUs than are left.
		need := alloc8 - int64(promised) + 1
		c = e.entry(func(cfg *kvm.Entry) { cfg.MinFreeVCPUs, cfg.CPUAllocationRatio = int(need), ratio(8) })
		v, _, _ = checkHost(t, c, "a")
		wantCapacity(t, fmt.Sprintf("min_free_vcpus %d", need), v, kvm.ReasonHostCPULow, 0, fmt.Sprintf("vCPUs: %d of %d at ratio 8", promised, alloc8))
		if want := fmt.Sprintf("vCPUs: %d of %d at ratio 8; one proxy needs %d vCPUs", promised, alloc8, need); v.Message != want {
			t.Errorf("message %q, want %q", v.Message, want)
		}
	})

	t.Run("memory promised, 512 MiB reserved by default", func(t *testing.T) {
		alloc := int64(base.HostMemoryBytes) - 512<<20
		// A domain that leaves 1.5 GiB of what may be promised (half of
		// what is left on a host with less than 3 GiB to promise), in
		// whole MiB as libvirt keeps memory; one proxy's memory that fits
		// in it once (1 GiB) and one that does not (2 GiB), two thirds and
		// four thirds of it.
		room := alloc - int64(base.DomainsMemory) - definedMemory
		left := min(3<<29, room/2) &^ (1<<20 - 1)
		if left < 6<<20 {
			t.Fatalf("%d bytes of the host's memory may be promised beyond the domains already defined: the test needs 12 MiB", room)
		}
		e.define("phe-it-big", 1, uint64((room-left)>>20))
		promised := int64(base.DomainsMemory) + definedMemory + (room-left)&^(1<<20-1)
		for _, tc := range []struct {
			need   int64
			reason provider.Reason
		}{{left * 2 / 3 &^ (1<<20 - 1), provider.ReasonReady}, {left * 4 / 3 &^ (1<<20 - 1), kvm.ReasonHostMemoryLow}} {
			c := e.entry(func(cfg *kvm.Entry) {
				cfg.MinFreeMemory, cfg.MemoryAllocationRatio = fmt.Sprint(tc.need), ratio(1)
			})
			v, f, _ := checkHost(t, c, "a")
			if int64(f.DomainsMemory) != promised {
				t.Fatalf("%d bytes promised, want %d", f.DomainsMemory, promised)
			}
			// The least of what is promised and what is free now, both
			// read in this check.
			byPromise := (alloc - promised) / tc.need
			byFree := int64(f.FreeMemoryBytes) / tc.need
			binding := "memory promised: " + promisedOfForTest(uint64(promised), uint64(alloc))
			proxies := byPromise
			if byFree < byPromise {
				proxies, binding = byFree, "memory"
			}
			reason := tc.reason
			if byFree < 1 {
				reason = kvm.ReasonHostMemoryLow
			}
			wantCapacity(t, fmt.Sprintf("min_free_memory %d", tc.need), v, reason, proxies, binding)
			if tc.reason == kvm.ReasonHostMemoryLow && byFree >= 1 && !strings.HasSuffix(v.Message, "; one proxy needs "+kvm.FormatBytesForTest(uint64(tc.need))) {
				t.Errorf("message %q, want it to name one proxy's need", v.Message)
			}
		}
	})

	t.Run("pool promised by sparse volumes", func(t *testing.T) {
		// One proxy's disk: 20 GiB, or on a smaller pool half of what is
		// available and unpromised, so that the bytes available never
		// bind first. A sparse volume that leaves one and a half of it of
		// the pool's capacity unpromised while holding no byte of it.
		capacity := int64(base.CapacityBytes)
		room := capacity - int64(base.VolumesCapacity)
		need := min(20<<30, int64(base.AvailableBytes)/2, room/2) &^ (1<<20 - 1)
		if need < 4<<20 {
			t.Fatalf("pool %s: %d bytes available, %d unpromised: the test needs 8 MiB of each", e.pool, base.AvailableBytes, room)
		}
		sizeMiB := (room - need*3/2) >> 20
		e.volume("phe-it-1.img", uint64(sizeMiB))
		c := e.entry(func(cfg *kvm.Entry) { cfg.MinPoolAvailable, cfg.DiskAllocationRatio = fmt.Sprint(need), ratio(1) })
		v, f, calls := checkHost(t, c, "a")
		promised := int64(base.VolumesCapacity) + sizeMiB<<20
		if int64(f.VolumesCapacity) != promised {
			t.Fatalf("volumes of %d bytes, want %d", f.VolumesCapacity, promised)
		}
		left := int64(f.CapacityBytes) - promised
		byPromise, byAvailable := left/need, int64(f.AvailableBytes)/need
		binding := "pool " + e.pool + " promised: " + promisedOfForTest(uint64(promised), f.CapacityBytes)
		proxies := byPromise
		if byAvailable < byPromise {
			proxies, binding = byAvailable, "pool "+e.pool
		}
		wantCapacity(t, "one sparse volume", v, provider.ReasonReady, proxies, binding)
		if !strings.Contains(calls, "StoragePoolListAllVolumes StorageVolGetInfo") {
			t.Errorf("calls %q, want the volume list and each volume's info", calls)
		}
		// And a second of three quarters of one proxy's disk: what is left
		// unpromised is less than one.
		second := need * 3 / 4 &^ (1<<20 - 1)
		e.volume("phe-it-2.img", uint64(second>>20))
		v, f, _ = checkHost(t, c, "a")
		promised += second
		wantCapacity(t, "and a second of three quarters of one proxy", v, kvm.ReasonPoolFull, 0,
			"pool "+e.pool+" promised: "+promisedOfForTest(uint64(promised), f.CapacityBytes))
		if !strings.HasSuffix(v.Message, "; one proxy needs "+kvm.FormatBytesForTest(uint64(need))) || int64(f.AvailableBytes) < need {
			t.Errorf("message %q with %d bytes available: want the promise, not the bytes available, to be short", v.Message, f.AvailableBytes)
		}
		// The connection keeps the sizes by the volumes' keys: a steady
		// check of the two volumes lists them and reads one again.
		v, f, calls = checkHost(t, c, "a")
		if n := strings.Count(calls, "StorageVolGetInfo"); n != 1 || int64(f.VolumesCapacity) != promised || v.Reason != kvm.ReasonPoolFull {
			t.Errorf("steady check: %s, %d bytes of volumes, calls %q; want PoolFull with %d bytes and one volume's info", v.Reason, f.VolumesCapacity, calls, promised)
		}
		// At ratio 2 the pool may promise twice its capacity.
		c = e.entry(func(cfg *kvm.Entry) { cfg.MinPoolAvailable, cfg.DiskAllocationRatio = fmt.Sprint(need), ratio(2) })
		v, f, _ = checkHost(t, c, "a")
		byPromise = (2*int64(f.CapacityBytes) - promised) / need
		byAvailable = int64(f.AvailableBytes) / need
		want := min(byPromise, byAvailable)
		if v.Reason != provider.ReasonReady || v.Capacity.Proxies != want {
			t.Errorf("ratio 2: %s %s, want Ready with %d", v.Reason, v.Capacity, want)
		}
		t.Logf("ratio 2: %s, capacity %s", v.Reason, v.Capacity)
	})

	t.Run("least of all: every key, the vCPUs bind", func(t *testing.T) {
		// 1 vCPU per proxy at ratio 1: at most the host's CPUs less what
		// is defined, far below what 1 MiB of memory or pool allows.
		_, now, _ := checkHost(t, all, "a") // what the subtests before defined
		c := e.entry(func(cfg *kvm.Entry) {
			cfg.MinFreeVCPUs, cfg.CPUAllocationRatio = 1, ratio((float64(now.DomainsVCPUs)+1.5)/float64(base.HostCPUs))
			cfg.MinFreeMemory, cfg.MemoryAllocationRatio, cfg.ReservedMemory = "1MiB", ratio(2), "0"
			cfg.MinPoolAvailable, cfg.DiskAllocationRatio = "1MiB", ratio(1000)
		})
		v, f, _ := checkHost(t, c, "a")
		if v.Reason != provider.ReasonReady || v.Capacity.Proxies < 1 || !strings.HasPrefix(v.Capacity.Binding, "vCPUs: ") {
			t.Errorf("%s %s, want Ready bound by the vCPUs", v.Reason, v.Capacity)
		}
		t.Logf("every key: %s, capacity %s, facts %d vCPUs promised of %d CPUs", v.Reason, v.Capacity, f.DomainsVCPUs, f.HostCPUs)
		_, _, calls := checkHost(t, c, "a")
		if !strings.HasPrefix(calls, "StoragePoolGetInfo NodeGetFreeMemory ConnectGetAllDomainStats StoragePoolListAllVolumes") || strings.Contains(calls, "NodeGetInfo") {
			t.Errorf("steady check's calls %q", calls)
		}
	})
}

// promisedOfForTest is the status's "28 of 31.5 GiB" at ratio 1, written
// from its parts as a reader would check it.
func promisedOfForTest(promised, alloc uint64) string {
	p, a := kvm.FormatBytesForTest(promised), kvm.FormatBytesForTest(alloc)
	if pu, au := p[strings.LastIndexByte(p, ' '):], a[strings.LastIndexByte(a, ' '):]; pu == au {
		p = strings.TrimSuffix(p, pu)
	}
	return p + " of " + a
}
