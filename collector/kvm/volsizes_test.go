package kvm

import (
	"context"
	"fmt"
	"maps"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/digitalocean/go-libvirt"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// volumesEnv is a host with disk_allocation_ratio 1 and a 20 GiB proxy
// disk, on the fake whose 100 GiB pool holds vols.
func volumesEnv(t *testing.T, vols map[string]uint64) (*env, *Checker) {
	t.Helper()
	e := newEnv(t)
	e.fake.set(func(f *fakeLibvirt) { maps.Copy(f.volCaps, vols) })
	h := e.cfg.Hosts[0]
	h.MinPoolAvailable, h.MinPoolAvailableBytes, h.Promised = "20GiB", 20*gib, &Promised{DiskRatio: 1}
	return e, e.checker()
}

// volumesCheck checks the host and returns the volumes' summed capacity it
// read, and the StorageVolGetInfo calls it made, by volume.
func volumesCheck(t *testing.T, e *env, c *Checker) (provider.Verdict, uint64, map[string]int) {
	t.Helper()
	before := e.fake.volInfoCounts()
	v := check(t, c, hostName, time.Minute)
	asked := e.fake.volInfoCounts()
	for k, n := range before {
		if asked[k] -= n; asked[k] == 0 {
			delete(asked, k)
		}
	}
	f, ok := v.Facts.(*Facts)
	if !ok || !f.VolumesKnown {
		t.Fatalf("%s (%s): no volumes' capacity read", v.Reason, v.Message)
	}
	return v, f.VolumesCapacity, asked
}

func (f *fakeLibvirt) volInfoCounts() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.volInfos)
}

// keptVolumes is how many volumes' capacities the host's connection keeps.
func keptVolumes(t *testing.T, c *Checker) int {
	t.Helper()
	s := c.lookup(hostName).current(testLogger(t))
	if s == nil {
		t.Fatal("no kept connection")
	}
	s.volumes.mu.Lock()
	defer s.volumes.mu.Unlock()
	return len(s.volumes.sizes)
}

// TestVolumeSizesKept: a steady check asks the size of the volumes it has
// not seen and of one more, the one read longest ago, so that every size
// is read again within as many checks as the pool has volumes; a resize
// shows by then, a new volume at once, a deleted one is dropped at once,
// and what is kept is only what the last list had.
func TestVolumeSizesKept(t *testing.T) {
	e, c := volumesEnv(t, map[string]uint64{"a": 10 * gib, "b": 10 * gib, "c": 10 * gib})
	if _, sum, asked := volumesCheck(t, e, c); sum != 30*gib || len(asked) != 3 {
		t.Fatalf("first check: %d bytes, asked %v; want 30 GiB, every volume asked", sum, asked)
	}
	// Three steady checks read each volume once more, one a check.
	seen := map[string]int{}
	for i := range 3 {
		_, sum, asked := volumesCheck(t, e, c)
		if sum != 30*gib || len(asked) != 1 {
			t.Fatalf("steady check %d: %d bytes, asked %v; want 30 GiB and one volume refreshed", i+1, sum, asked)
		}
		for k := range asked {
			seen[k]++
		}
	}
	if want := map[string]int{"a": 1, "b": 1, "c": 1}; !maps.Equal(seen, want) {
		t.Errorf("three steady checks refreshed %v, want each volume once", seen)
	}

	// A resize shows within three checks; until then the sum is the old
	// one, never a mix of neither.
	e.fake.set(func(f *fakeLibvirt) { f.volCaps["b"] = 50 * gib })
	shown := 0
	for i := range 3 {
		_, sum, _ := volumesCheck(t, e, c)
		switch {
		case sum == 70*gib && shown == 0:
			shown = i + 1
		case sum != 30*gib && shown == 0, sum != 70*gib && shown > 0:
			t.Fatalf("check %d after a resize: %d bytes", i+1, sum)
		}
	}
	if shown == 0 {
		t.Fatal("a resize not seen within as many checks as the pool has volumes")
	}

	// A new volume is read at the next check, with the one refreshed.
	e.fake.set(func(f *fakeLibvirt) { f.volCaps["d"] = 5 * gib })
	if _, sum, asked := volumesCheck(t, e, c); sum != 75*gib || asked["d"] != 1 || len(asked) != 2 {
		t.Fatalf("after a new volume: %d bytes, asked %v; want 75 GiB, the new one and one refreshed", sum, asked)
	}
	// A deleted one counts no more, and is no more kept.
	e.fake.set(func(f *fakeLibvirt) { delete(f.volCaps, "b") })
	if _, sum, asked := volumesCheck(t, e, c); sum != 25*gib || len(asked) != 1 {
		t.Fatalf("after a deletion: %d bytes, asked %v; want 25 GiB and one refreshed", sum, asked)
	}
	if n := keptVolumes(t, c); n != 3 {
		t.Errorf("%d volumes' sizes kept for a pool of 3", n)
	}

	// A new connection reads every size again.
	h := c.lookup(hostName)
	h.drop(testLogger(t), h.current(testLogger(t)), "test", nil)
	if _, sum, asked := volumesCheck(t, e, c); sum != 25*gib || len(asked) != 3 {
		t.Fatalf("on a new connection: %d bytes, asked %v; want 25 GiB, every volume asked", sum, asked)
	}
	// So does the pool defined again (a new UUID): its volumes may not be
	// the old one's.
	e.fake.set(func(f *fakeLibvirt) { f.poolGen++ })
	if _, sum, asked := volumesCheck(t, e, c); sum != 25*gib || len(asked) != 3 {
		t.Fatalf("after the pool was defined again: %d bytes, asked %v; want 25 GiB, every volume asked", sum, asked)
	}
}

// TestVolumeDeletedBetweenListAndInfo: a volume listed but gone when its
// size is asked (VIR_ERR_NO_STORAGE_VOL) counts as nothing, and the check
// goes on: whether it is new or kept and refreshed.
func TestVolumeDeletedBetweenListAndInfo(t *testing.T) {
	e, c := volumesEnv(t, map[string]uint64{"a": 10 * gib, "b": 10 * gib})
	e.fake.set(func(f *fakeLibvirt) { f.goneVols["new"] = true })
	v, sum, asked := volumesCheck(t, e, c)
	if v.Reason != provider.ReasonReady || sum != 20*gib || asked["new"] != 1 {
		t.Fatalf("%s (%s), %d bytes, asked %v; want Ready with 20 GiB, the deleted volume asked and counted as nothing", v.Reason, v.Message, sum, asked)
	}
	// "a", kept and read longest ago, is refreshed next: gone then too.
	e.fake.set(func(f *fakeLibvirt) { f.goneVols["a"] = true })
	v, sum, asked = volumesCheck(t, e, c)
	if v.Reason != provider.ReasonReady || sum != 10*gib || asked["a"] != 1 {
		t.Fatalf("%s (%s), %d bytes, asked %v; want Ready with 10 GiB, the kept volume refreshed and counted as nothing", v.Reason, v.Message, sum, asked)
	}
}

// TestVolumeSizesTimeout: a check whose time runs out before every size
// is read is a Timeout with no sum, keeps its connection, and the next
// check goes on from the sizes read.
func TestVolumeSizesTimeout(t *testing.T) {
	vols := map[string]uint64{}
	for i := range 5 {
		vols[fmt.Sprintf("v%d", i)] = 4 * gib
	}
	e, c := volumesEnv(t, vols)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reads := 0
	e.fake.set(func(f *fakeLibvirt) {
		f.volInfoHook = func(string) {
			if reads++; reads == 2 {
				cancel()
			}
		}
	})
	v := c.Check(ctx, testLogger(t), hostName)
	if v.Reason != provider.ReasonTimeout || !strings.Contains(v.Message, `3 of the 5 volumes' sizes of pool "default" not read yet`) {
		t.Fatalf("%s (%s), want Timeout saying how many sizes are left", v.Reason, v.Message)
	}
	if f, ok := v.Facts.(*Facts); ok && f.VolumesKnown {
		t.Errorf("a partial sum of %d bytes reported", f.VolumesCapacity)
	}
	e.fake.set(func(f *fakeLibvirt) { f.volInfoHook = nil })
	v, sum, asked := volumesCheck(t, e, c)
	if v.Reason != provider.ReasonReady || sum != 20*gib || len(asked) != 4 {
		t.Fatalf("next check: %s (%s), %d bytes, asked %v; want Ready with 20 GiB, the 3 sizes left and one refreshed", v.Reason, v.Message, sum, asked)
	}
	if n := e.fake.callCounts()["ConnectToURI"]; n != 1 {
		t.Errorf("%d connections, want the one kept", n)
	}
}

// TestVolumeSizesBound: what is kept is bounded by libvirt's longest list
// of volumes, whatever the checks find.
func TestVolumeSizesBound(t *testing.T) {
	var k volumeSizes
	pool := libvirt.StoragePool{Name: "default"}
	list := fakeList(benchVolumes(storageVolListMax))
	p := k.plan(pool, list)
	for _, v := range p.ask {
		k.keep(pool, p.check, v, 1)
	}
	// A second list of as many other volumes: none of the first is
	// listed, so none is kept, and the new ones fit.
	other := fakeList(benchVolumes(storageVolListMax))
	for i := range other {
		other[i].Key += "-other"
	}
	p = k.plan(pool, other)
	if len(k.sizes) != 0 || len(p.ask) != storageVolListMax {
		t.Fatalf("%d kept, %d asked after a list of other volumes", len(k.sizes), len(p.ask))
	}
	// A keep past the bound (a list read concurrently) is dropped.
	for _, v := range p.ask {
		k.keep(pool, p.check, v, 1)
	}
	k.keep(pool, p.check, list[0], 1)
	if len(k.sizes) != storageVolListMax {
		t.Errorf("%d sizes kept, at most %d", len(k.sizes), storageVolListMax)
	}
	if p := k.plan(pool, other); p.known != storageVolListMax-1 || len(p.ask) != 1 {
		t.Errorf("steady plan: known %d, asked %d; want all but one kept, one refreshed", p.known, len(p.ask))
	}
	if got := addSat(math.MaxUint64-1, 2); got != math.MaxUint64 {
		t.Errorf("addSat wrapped to %d", got)
	}
}

// fakeList is the list reply of vols, as the stand-in libvirtd sends it.
func fakeList(vols []FakeVolume) []libvirt.StorageVol {
	out := make([]libvirt.StorageVol, len(vols))
	for i, v := range vols {
		out[i] = libvirt.StorageVol{Pool: "default", Name: v.Name, Key: "/p/" + v.Name}
	}
	return out
}

// TestPoolVolumesOverTheWire: the volumes' calls through the exporter's
// libvirt client and the frame checker, to the stand-in libvirtd: a volume
// deleted between the list and its info (VIR_ERR_NO_STORAGE_VOL) counts as
// nothing, a steady check makes three calls, and sizes that add past 2^64
// saturate into PoolFull.
func TestPoolVolumesOverTheWire(t *testing.T) {
	e := newEnv(t)
	fake := NewFakeLibvirtd(t)
	srv := newSSHServer(t, e.key.PublicKey(), fake.Path())
	e.writeKnownHosts(knownHostsLine(srv.addr, srv.hostKey.PublicKey()))
	for _, tt := range []struct {
		name    string
		vols    []FakeVolume
		want    provider.Reason
		sum     uint64
		message string
	}{
		{"deleted between list and info", []FakeVolume{{Name: "a", Capacity: 30 * gib}, {Name: "b", Capacity: 30 * gib, Gone: true}, {Name: "c", Capacity: 10 * gib}},
			provider.ReasonReady, 40 * gib, ""},
		// The stand-in's pool: 100 GiB.
		{"sizes past 2^64", []FakeVolume{{Name: "a", Capacity: math.MaxInt64}, {Name: "b", Capacity: math.MaxInt64}, {Name: "c", Capacity: 2}},
			ReasonPoolFull, math.MaxUint64, "pool default promised: 16 EiB of 100 GiB; one proxy needs 20 GiB"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fake.SetVolumes(tt.vols)
			cfg := *e.cfg
			cfg.LibvirtSocket = fake.Path()
			cfg.Hosts = []*Host{{Address: srv.addr, Name: hostName, HostSettings: &HostSettings{User: "proxyops", Pool: "default", PrivateKeyFile: e.keyFile,
				MinPoolAvailable: "20GiB", MinPoolAvailableBytes: 20 * gib, Promised: &Promised{DiskRatio: 1}}}}
			c, err := New(&cfg, testLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			for i := range 2 {
				calls := fake.AllCalls()
				v := check(t, c, hostName, time.Minute)
				f, _ := v.Facts.(*Facts)
				if v.Reason != tt.want || f == nil || f.VolumesCapacity != tt.sum || tt.message != "" && v.Message != tt.message {
					t.Fatalf("check %d: %s (%s), facts %+v; want %s with %d bytes of volumes", i+1, v.Reason, v.Message, f, tt.want, tt.sum)
				}
				// The pool's info, the list, one volume's info, and the
				// info of each volume listed but gone, which is not kept.
				want := 3
				for _, v := range tt.vols {
					if v.Gone {
						want++
					}
				}
				if n := fake.AllCalls() - calls; i > 0 && n != want {
					t.Errorf("steady check: %d calls, want %d", n, want)
				}
			}
		})
	}
}
