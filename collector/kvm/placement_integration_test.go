//go:build integration

package kvm_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egress-proxies/provider_health_exporter/collector/kvm"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

// callLog records the libvirt calls a checker makes (its debug lines
// "libvirt call"), so a test can see what went over the wire to the real
// libvirtd, and passes every line on to the test's log.
type callLog struct {
	next slog.Handler
	rec  *calls
}

// calls are "Name", or "Name!" for a call libvirtd answered with an error.
type calls struct {
	mu   sync.Mutex
	list []string
}

func (h *callLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *callLog) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "libvirt call" {
		var call string
		failed := false
		r.Attrs(func(a slog.Attr) bool {
			switch a.Key {
			case "call":
				call = a.Value.String()
			case "err":
				failed = true
			}
			return true
		})
		if failed {
			call += "!"
		}
		h.rec.mu.Lock()
		h.rec.list = append(h.rec.list, call)
		h.rec.mu.Unlock()
	}
	return h.next.Handle(ctx, r)
}
func (h *callLog) WithAttrs(as []slog.Attr) slog.Handler {
	return &callLog{next: h.next.WithAttrs(as), rec: h.rec}
}
func (h *callLog) WithGroup(g string) slog.Handler {
	return &callLog{next: h.next.WithGroup(g), rec: h.rec}
}

// take returns the calls recorded since the last take.
func (h *callLog) take() string {
	h.rec.mu.Lock()
	defer h.rec.mu.Unlock()
	out := strings.Join(h.rec.list, " ")
	h.rec.list = nil
	return out
}

// checkCalls runs one check of c with a logger that records its calls.
func checkCalls(t *testing.T, c *kvm.Checker) (provider.Verdict, string) {
	t.Helper()
	rec := &callLog{next: slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}), rec: &calls{}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v := c.Check(ctx, slog.New(rec), target)
	if v.Capacity.Contradicts(v.Reason) {
		t.Errorf("capacity %s contradicts the verdict %s (%s)", v.Capacity, v.Reason, v.Message)
	}
	return v, rec.take()
}

func wantCheck(t *testing.T, c *kvm.Checker, reason provider.Reason, calls string) provider.Verdict {
	t.Helper()
	v, got := checkCalls(t, c)
	if v.Reason != reason {
		t.Fatalf("reason %s (%s), want %s", v.Reason, v.Message, reason)
	}
	if calls != "" && got != calls {
		t.Errorf("%s check made the calls %q, want %q", reason, got, calls)
	}
	return v
}

// TestIntegrationKeptPoolHandle: against the real libvirtd, a steady check
// is StoragePoolGetInfo on the pool handle the connection keeps; a pool
// undefined and defined again under the same name (a new UUID) makes libvirtd
// refuse the old handle, and the check looks the pool up again once and is
// Ready, without a false PoolMissing; a pool that is gone is PoolMissing.
func TestIntegrationKeptPoolHandle(t *testing.T) {
	e := loadEnv(t)
	t.Cleanup(func() { e.restorePool(t) })
	c := e.checker(t, nil)
	wantCheck(t, c, provider.ReasonReady, "ConnectToURI ConnectGetLibVersion StoragePoolLookupByName StoragePoolGetInfo")
	for range 3 {
		wantCheck(t, c, provider.ReasonReady, "StoragePoolGetInfo")
	}

	uuid := strings.TrimSpace(e.virsh(t, "pool-uuid", e.pool))
	e.virsh(t, "pool-destroy", e.pool)
	e.virsh(t, "pool-undefine", e.pool)
	e.restorePool(t)
	if again := strings.TrimSpace(e.virsh(t, "pool-uuid", e.pool)); again == uuid {
		t.Fatalf("the pool defined again kept its UUID %s; the test needs a new one", uuid)
	}
	wantCheck(t, c, provider.ReasonReady, "StoragePoolGetInfo! StoragePoolLookupByName StoragePoolGetInfo")
	wantCheck(t, c, provider.ReasonReady, "StoragePoolGetInfo")

	e.virsh(t, "pool-destroy", e.pool)
	e.virsh(t, "pool-undefine", e.pool)
	v := wantCheck(t, c, kvm.ReasonPoolMissing, "StoragePoolGetInfo! StoragePoolLookupByName!")
	if !strings.Contains(v.Message, "no storage pool with matching name") {
		t.Errorf("PoolMissing message %q, want libvirt's words", v.Message)
	}
	wantCheck(t, c, kvm.ReasonPoolMissing, "StoragePoolLookupByName!")
	e.restorePool(t)
	v = wantCheck(t, c, provider.ReasonReady, "StoragePoolLookupByName StoragePoolGetInfo")
	if f := factsOf(t, v); f.Connects != 1 {
		t.Errorf("connects %d, want 1: every verdict above keeps the connection", f.Connects)
	}
}

// TestIntegrationVolume: a volume created in the test pool is found (one
// StorageVolLookupByName per check); once deleted the check reads
// VolumeMissing, with libvirt's words, on the kept connection.
func TestIntegrationVolume(t *testing.T) {
	e := loadEnv(t)
	const vol = "phe-it-base.qcow2"
	e.virsh(t, "vol-create-as", e.pool, vol, "1M", "--format", "raw")
	t.Cleanup(func() { _, _ = e.tryVirsh("vol-delete", "--pool", e.pool, vol) })
	c := e.checker(t, func(cfg *kvm.Entry) { cfg.Hosts[0].Volume = vol })
	wantCheck(t, c, provider.ReasonReady, "")
	v := wantCheck(t, c, provider.ReasonReady, "StoragePoolGetInfo StorageVolLookupByName")
	if d := v.Facts.Details(); d["volume"] != vol {
		t.Errorf("details %v, want the volume", d)
	}

	e.virsh(t, "vol-delete", "--pool", e.pool, vol)
	if _, err := os.Stat(filepath.Join(e.poolDir, vol)); !os.IsNotExist(err) {
		t.Fatalf("the volume's file is still there after vol-delete: %v", err)
	}
	v = wantCheck(t, c, kvm.ReasonVolumeMissing, "StoragePoolGetInfo StorageVolLookupByName!")
	if !strings.HasPrefix(v.Message, `volume "`+vol+`" not found in pool "`+e.pool+`": `) || !strings.Contains(v.Message, "no storage vol with matching name") {
		t.Errorf("VolumeMissing message %q", v.Message)
	}
	if factsOf(t, v).PoolState != "running" {
		t.Errorf("facts %+v: want the pool's state read as before", *factsOf(t, v))
	}
	v = wantCheck(t, c, kvm.ReasonVolumeMissing, "StoragePoolGetInfo StorageVolLookupByName!")
	if f := factsOf(t, v); f.Connects != 1 {
		t.Errorf("connects %d, want 1", f.Connects)
	}
}

// TestIntegrationNetwork: a network defined and not started is
// NetworkInactive; started, Ready (one NetworkIsActive per check on the
// kept handle); undefined, NetworkMissing; defined again under the same
// name (a new UUID), found again without a false NetworkMissing. The
// network forwards to a host bridge (forward mode "bridge"), the one kind an
// unprivileged libvirtd can start: a NAT or isolated network needs
// CAP_NET_ADMIN to create its bridge, and iptables and dnsmasq besides.
func TestIntegrationNetwork(t *testing.T) {
	e := loadEnv(t)
	const network = "phe-it-net"
	xml := filepath.Join(t.TempDir(), "net.xml")
	if err := os.WriteFile(xml, []byte("<network><name>"+network+"</name><forward mode='bridge'/><bridge name='phe-it-br0'/></network>\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	undefine := func() {
		_, _ = e.tryVirsh("net-destroy", network)
		_, _ = e.tryVirsh("net-undefine", network)
	}
	undefine()
	t.Cleanup(undefine)
	e.virsh(t, "net-define", xml)

	c := e.checker(t, func(cfg *kvm.Entry) { cfg.Hosts[0].Network = network })
	v := wantCheck(t, c, kvm.ReasonNetworkInactive, "ConnectToURI ConnectGetLibVersion StoragePoolLookupByName StoragePoolGetInfo NetworkLookupByName NetworkIsActive")
	if !strings.Contains(v.Message, "virsh net-start "+network) {
		t.Errorf("NetworkInactive message %q", v.Message)
	}
	wantCheck(t, c, kvm.ReasonNetworkInactive, "StoragePoolGetInfo NetworkIsActive")

	e.virsh(t, "net-start", network)
	wantCheck(t, c, provider.ReasonReady, "StoragePoolGetInfo NetworkIsActive")

	uuid := strings.TrimSpace(e.virsh(t, "net-uuid", network))
	undefine()
	wantCheck(t, c, kvm.ReasonNetworkMissing, "StoragePoolGetInfo NetworkIsActive! NetworkLookupByName!")
	e.virsh(t, "net-define", xml)
	e.virsh(t, "net-start", network)
	if again := strings.TrimSpace(e.virsh(t, "net-uuid", network)); again == uuid {
		t.Fatalf("the network defined again kept its UUID %s; the test needs a new one", uuid)
	}
	// The handle was dropped with the network: looked up afresh.
	wantCheck(t, c, provider.ReasonReady, "StoragePoolGetInfo NetworkLookupByName NetworkIsActive")

	uuid = strings.TrimSpace(e.virsh(t, "net-uuid", network))
	undefine()
	e.virsh(t, "net-define", xml)
	if again := strings.TrimSpace(e.virsh(t, "net-uuid", network)); again == uuid {
		t.Fatalf("the network defined again kept its UUID %s; the test needs a new one", uuid)
	}
	// The kept handle names the old network: refused, looked up again once.
	v = wantCheck(t, c, kvm.ReasonNetworkInactive, "StoragePoolGetInfo NetworkIsActive! NetworkLookupByName NetworkIsActive")
	if f := factsOf(t, v); f.Connects != 1 {
		t.Errorf("connects %d, want 1", f.Connects)
	}
}
