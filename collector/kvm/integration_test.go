//go:build integration

package kvm_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/egress-proxies/provider_health_exporter/collector/kvm"
	"github.com/egress-proxies/provider_health_exporter/internal/engine"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

// These tests run against real sshd and libvirtd started by
// testdata/kvm/run-integration.sh (make integration-kvm), which describes
// them in KVM_IT_* variables. They share the daemons, so they run in order
// and each leaves the setup as it found it.

type itEnv struct {
	state, ctl, address, user, key, rejectedKey string
	knownHosts, knownHostsWrong, socket, uri    string
	virshURI, pool, poolDir                     string
}

func loadEnv(t testing.TB) itEnv {
	t.Helper()
	get := func(k string) string {
		v := os.Getenv(k)
		if v == "" {
			t.Fatalf("%s is not set: run these tests with testdata/kvm/run-integration.sh (make integration-kvm)", k)
		}
		return v
	}
	return itEnv{
		state: get("KVM_IT_STATE"), ctl: get("KVM_IT_CTL"), address: get("KVM_IT_ADDRESS"),
		user: get("KVM_IT_USER"), key: get("KVM_IT_KEY"), rejectedKey: get("KVM_IT_REJECTED_KEY"),
		knownHosts: get("KVM_IT_KNOWN_HOSTS"), knownHostsWrong: get("KVM_IT_KNOWN_HOSTS_WRONG"),
		socket: get("KVM_IT_SOCKET"), uri: get("KVM_IT_URI"), virshURI: get("KVM_IT_VIRSH_URI"),
		pool: get("KVM_IT_POOL"), poolDir: get("KVM_IT_POOL_DIR"),
	}
}

const target = "testhost"

func (e itEnv) config(mod func(*kvm.Entry)) *kvm.Entry {
	cfg := &kvm.Entry{
		Name:               "lab",
		User:               e.user,
		PrivateKeyFile:     e.key,
		KnownHostsFile:     e.knownHosts,
		LibvirtSocket:      e.socket,
		LibvirtURI:         e.uri,
		Pool:               e.pool,
		MaxConcurrentDials: kvm.DefaultMaxConcurrentDials,
		Hosts: []*kvm.Host{{
			Address:      e.address,
			Name:         target,
			HostSettings: &kvm.HostSettings{User: e.user, Pool: e.pool, PrivateKeyFile: e.key},
		}},
	}
	if mod != nil {
		mod(cfg)
	}
	return cfg
}

func (e itEnv) checker(t *testing.T, mod func(*kvm.Entry)) *kvm.Checker {
	t.Helper()
	c, err := kvm.New(e.config(mod), logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// ctlCmd runs a subcommand of ctl.sh (stop-sshd, start-libvirtd, ...).
func (e itEnv) ctlCmd(t *testing.T, sub string) {
	t.Helper()
	out, err := exec.Command(e.ctl, sub, e.state).CombinedOutput()
	if err != nil {
		t.Fatalf("ctl.sh %s: %v\n%s", sub, err, out)
	}
}

func (e itEnv) virsh(t *testing.T, args ...string) string {
	t.Helper()
	out, err := e.tryVirsh(args...)
	if err != nil {
		t.Fatalf("virsh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func (e itEnv) tryVirsh(args ...string) (string, error) {
	out, err := exec.Command("virsh", append([]string{"-q", "-c", e.virshURI}, args...)...).CombinedOutput()
	return string(out), err
}

// restorePool defines, marks for autostart and starts the pool as ctl.sh
// does, whatever a test left of it.
func (e itEnv) restorePool(t *testing.T) {
	t.Helper()
	info, err := e.tryVirsh("pool-info", e.pool)
	if err != nil {
		e.virsh(t, "pool-define-as", e.pool, "dir", "--target", e.poolDir)
		e.virsh(t, "pool-autostart", e.pool)
	}
	if !regexp.MustCompile(`(?m)^State:\s+running`).MatchString(info) {
		e.virsh(t, "pool-start", e.pool)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func logger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func check(t *testing.T, c *kvm.Checker) provider.Verdict {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v := c.Check(ctx, logger(t), target)
	if v.Capacity.Contradicts(v.Reason) {
		t.Errorf("capacity %s contradicts the verdict %s (%s)", v.Capacity, v.Reason, v.Message)
	}
	return v
}

func want(t *testing.T, v provider.Verdict, reasons ...provider.Reason) {
	t.Helper()
	for _, r := range reasons {
		if v.Reason == r {
			return
		}
	}
	t.Fatalf("reason %s (%s), want one of %v", v.Reason, v.Message, reasons)
}

func TestIntegration(t *testing.T) {
	e := loadEnv(t)

	t.Run("Ready with the pool's real capacity and libvirt's version", func(t *testing.T) {
		c := e.checker(t, nil)
		v := check(t, c)
		want(t, v, provider.ReasonReady)
		var st syscall.Statfs_t
		if err := syscall.Statfs(e.poolDir, &st); err != nil {
			t.Fatal(err)
		}
		// libvirt's dir backend reports the filesystem's size.
		if capacity := st.Blocks * uint64(st.Frsize); factsOf(t, v).CapacityBytes != capacity {
			t.Errorf("capacity %d, want %d (statfs of %s)", factsOf(t, v).CapacityBytes, capacity, e.poolDir)
		}
		if factsOf(t, v).AvailableBytes == 0 || factsOf(t, v).AllocationBytes == 0 || factsOf(t, v).AvailableBytes > factsOf(t, v).CapacityBytes {
			t.Errorf("allocation %d, available %d of capacity %d", factsOf(t, v).AllocationBytes, factsOf(t, v).AvailableBytes, factsOf(t, v).CapacityBytes)
		}
		// The daemon's own idea of its version (virsh version --daemon
		// fails on a host without an emulator before printing it).
		out, err := exec.Command("/usr/sbin/libvirtd", "--version").Output()
		if err != nil {
			t.Fatalf("libvirtd --version: %v", err)
		}
		m := regexp.MustCompile(`(\d+\.\d+\.\d+)\s*$`).FindStringSubmatch(string(out))
		if m == nil {
			t.Fatalf("libvirtd --version: no version in %q", out)
		}
		if factsOf(t, v).LibvirtVersion != m[1] || v.Facts.Details()["libvirtVersion"] != m[1] {
			t.Errorf("libvirt version %q (details %q), want %q", factsOf(t, v).LibvirtVersion, v.Facts.Details()["libvirtVersion"], m[1])
		}
		if factsOf(t, v).PoolState != "running" || factsOf(t, v).User != e.user || factsOf(t, v).Connects != 1 {
			t.Errorf("facts %+v", *factsOf(t, v))
		}
	})

	t.Run("ten checks in a row make one connection", func(t *testing.T) {
		before := acceptedLogins(t, e, e.user)
		c := e.checker(t, nil)
		var v provider.Verdict
		for i := range 10 {
			v = check(t, c)
			if v.Reason != provider.ReasonReady {
				t.Fatalf("check %d: reason %s (%s), want Ready", i+1, v.Reason, v.Message)
			}
		}
		if factsOf(t, v).Connects != 1 {
			t.Errorf("Connects = %d after ten checks, want 1", factsOf(t, v).Connects)
		}
		if got := acceptedLogins(t, e, e.user) - before; got != 1 {
			t.Errorf("sshd logged %d accepted logins for ten checks, want 1", got)
		}
		// Closing says goodbye to libvirtd, which then has no vanished
		// client to complain about.
		eofs := libvirtdEOFs(t, e)
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		e.virsh(t, "pool-list") // one more round trip through libvirtd's event loop
		time.Sleep(500 * time.Millisecond)
		if got := libvirtdEOFs(t, e) - eofs; got != 0 {
			t.Errorf("libvirtd logged %d unexpected client EOFs after Close, want 0", got)
		}
	})

	t.Run("ten scrapes through the engine, then reloads, keep connects_total at 1", func(t *testing.T) {
		before := acceptedLogins(t, e, e.user)
		eng := engine.NewEngine(logger(t))
		defer eng.Close()
		loads := 0
		load := func(mod func(*kvm.Entry)) {
			loads++ // every load is a changed entry, so the new checker adopts
			err := eng.Load([]engine.Entry{{Kind: kvm.Name, Name: "lab", Reasons: kvm.Reasons(),
				Timeout: 10 * time.Second, Fingerprint: strconv.Itoa(loads),
				Build: func() (provider.Checker, error) { return kvm.New(e.config(mod), logger(t)) }}})
			if err != nil {
				t.Fatal(err)
			}
		}
		scrape := func() (provider.Reason, float64) {
			t.Helper()
			res, err := eng.Run(context.Background(), engine.Request{ScrapeTimeout: 10 * time.Second, Offset: 500 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			got := res[0].Targets[0]
			if got.Facts != nil {
				ch := make(chan prometheus.Metric, 64)
				got.Facts.Collect(ch, res[0].Name, got.Target.Name)
				close(ch)
				for m := range ch {
					var pb dto.Metric
					if strings.Contains(m.Desc().String(), `"provider_health_kvm_connects_total"`) && m.Write(&pb) == nil {
						return got.Reason, pb.GetCounter().GetValue()
					}
				}
			}
			t.Fatalf("no provider_health_kvm_connects_total (reason %s)", res[0].Targets[0].Reason)
			return "", 0
		}
		load(nil)
		for i := range 10 {
			if r, n := scrape(); r != provider.ReasonReady || n != 1 {
				t.Fatalf("scrape %d: reason %s, connects_total %v; want Ready and 1", i+1, r, n)
			}
		}
		// A reload with the same settings, then one that changes only the
		// pool, adopt the kept connection (docs/configuration.md: "Configuration", "KVM").
		load(nil)
		if r, n := scrape(); r != provider.ReasonReady || n != 1 {
			t.Errorf("after a reload: reason %s, connects_total %v; want Ready and 1", r, n)
		}
		load(func(c *kvm.Entry) { c.Hosts[0].Pool = "no-such-pool" })
		if r, n := scrape(); r != kvm.ReasonPoolMissing || n != 1 {
			t.Errorf("after a reload changing the pool: reason %s, connects_total %v; want PoolMissing and 1", r, n)
		}
		if got := acceptedLogins(t, e, e.user) - before; got != 1 {
			t.Errorf("sshd logged %d accepted logins, want 1", got)
		}
		// A changed connection setting (here the key file path) redials.
		load(func(c *kvm.Entry) { c.Hosts[0].PrivateKeyFile = e.key + "-copy" })
		if err := copyFile(e.key, e.key+"-copy"); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(e.key + "-copy")
		if r, n := scrape(); r != provider.ReasonReady || n != 2 {
			t.Errorf("after a reload changing the key file: reason %s, connects_total %v; want Ready and 2", r, n)
		}
	})

	t.Run("pool-destroy gives PoolInactive on the kept connection", func(t *testing.T) {
		c := e.checker(t, nil)
		want(t, check(t, c), provider.ReasonReady)
		e.virsh(t, "pool-destroy", e.pool)
		t.Cleanup(func() { e.restorePool(t) })
		v := check(t, c)
		want(t, v, kvm.ReasonPoolInactive)
		if factsOf(t, v).PoolState != "inactive" || factsOf(t, v).Connects != 1 {
			t.Errorf("facts %+v: want state inactive on the kept connection", *factsOf(t, v))
		}
		e.restorePool(t)
		want(t, check(t, c), provider.ReasonReady)
	})

	t.Run("pool-undefine gives PoolMissing on the kept connection", func(t *testing.T) {
		c := e.checker(t, nil)
		want(t, check(t, c), provider.ReasonReady)
		e.virsh(t, "pool-destroy", e.pool)
		e.virsh(t, "pool-undefine", e.pool)
		t.Cleanup(func() { e.restorePool(t) })
		v := check(t, c)
		want(t, v, kvm.ReasonPoolMissing)
		if factsOf(t, v).PoolState != "" || factsOf(t, v).Connects != 1 {
			t.Errorf("facts %+v: want no pool state on the kept connection", *factsOf(t, v))
		}
		e.restorePool(t)
		want(t, check(t, c), provider.ReasonReady)
	})

	t.Run("libvirtd stopped, then Ready again after its restart", func(t *testing.T) {
		c := e.checker(t, nil)
		want(t, check(t, c), provider.ReasonReady)
		e.ctlCmd(t, "stop-libvirtd")
		t.Cleanup(func() { e.ctlCmd(t, "start-libvirtd") })
		// The kept connection is lost, during the check or noticed
		// before it (then the redial finds no socket).
		want(t, check(t, c), kvm.ReasonLibvirtConnectionLost, kvm.ReasonLibvirtSocketUnavailable)
		want(t, check(t, c), kvm.ReasonLibvirtSocketUnavailable)
		e.ctlCmd(t, "start-libvirtd")
		v := check(t, c)
		want(t, v, provider.ReasonReady)
		if factsOf(t, v).Connects != 2 {
			t.Errorf("Connects = %d, want 2 (one redial after the restart)", factsOf(t, v).Connects)
		}
	})

	t.Run("a wedged libvirtd gives Timeout at the budget, then a redial", func(t *testing.T) {
		c := e.checker(t, nil)
		want(t, check(t, c), provider.ReasonReady)
		e.ctlCmd(t, "pause-libvirtd")
		t.Cleanup(func() { e.ctlCmd(t, "resume-libvirtd") })
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		done := make(chan provider.Verdict, 1)
		go func() { done <- c.Check(ctx, logger(t), target) }()
		select {
		case v := <-done:
			want(t, v, provider.ReasonTimeout)
		case <-time.After(30 * time.Second):
			t.Fatal("check on a wedged libvirtd did not return long after its budget")
		}
		e.ctlCmd(t, "resume-libvirtd")
		// The timed-out check closed the kept connection: one redial.
		v := check(t, c)
		want(t, v, provider.ReasonReady)
		if factsOf(t, v).Connects != 2 {
			t.Errorf("Connects = %d, want 2", factsOf(t, v).Connects)
		}
	})

	t.Run("sshd stopped gives Unreachable", func(t *testing.T) {
		kept := e.checker(t, nil)
		want(t, check(t, kept), provider.ReasonReady)
		e.ctlCmd(t, "stop-sshd")
		t.Cleanup(func() { e.ctlCmd(t, "start-sshd") })
		want(t, check(t, e.checker(t, nil)), provider.ReasonUnreachable)
		// Stopping the listener leaves established sessions alone, as
		// sshd does on a real host: the kept connection still works.
		want(t, check(t, kept), provider.ReasonReady)
		e.ctlCmd(t, "start-sshd")
		want(t, check(t, e.checker(t, nil)), provider.ReasonReady)
	})

	t.Run("a key the server does not accept gives SSHAuthFailed", func(t *testing.T) {
		c := e.checker(t, func(cfg *kvm.Entry) {
			cfg.PrivateKeyFile = e.rejectedKey
			cfg.Hosts[0].PrivateKeyFile = e.rejectedKey
		})
		want(t, check(t, c), kvm.ReasonSSHAuthFailed)
	})

	t.Run("known_hosts with another key gives HostKeyMismatch", func(t *testing.T) {
		c := e.checker(t, func(cfg *kvm.Entry) { cfg.KnownHostsFile = e.knownHostsWrong })
		want(t, check(t, c), kvm.ReasonHostKeyMismatch)
	})

	t.Run("known_hosts without the host gives HostKeyUnknown", func(t *testing.T) {
		empty := t.TempDir() + "/known_hosts"
		if err := os.WriteFile(empty, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		c := e.checker(t, func(cfg *kvm.Entry) { cfg.KnownHostsFile = empty })
		want(t, check(t, c), kvm.ReasonHostKeyUnknown)
	})

	t.Run("a wrong socket path gives LibvirtSocketUnavailable", func(t *testing.T) {
		c := e.checker(t, func(cfg *kvm.Entry) { cfg.LibvirtSocket = e.socket + ".missing" })
		want(t, check(t, c), kvm.ReasonLibvirtSocketUnavailable)
	})

	t.Run("an unknown libvirt URI gives LibvirtConnectFailed", func(t *testing.T) {
		c := e.checker(t, func(cfg *kvm.Entry) { cfg.LibvirtURI = "nosuchdriver:///system" })
		want(t, check(t, c), kvm.ReasonLibvirtConnectFailed)
	})
}

// libvirtdEOFs counts the clients libvirtd saw vanish without a goodbye.
func libvirtdEOFs(t *testing.T, e itEnv) int {
	t.Helper()
	b, err := os.ReadFile(e.state + "/libvirtd.log")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "End of file while reading data")
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o600)
}

// acceptedLogins counts the logins of user sshd has accepted so far.
func acceptedLogins(t testing.TB, e itEnv, user string) int {
	t.Helper()
	b, err := os.ReadFile(e.state + "/sshd.log")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "Accepted publickey for "+user+" ")
}

func factsOf(t testing.TB, v provider.Verdict) *kvm.Facts {
	t.Helper()
	f, ok := v.Facts.(*kvm.Facts)
	if !ok {
		t.Fatalf("verdict %s has facts %T, want *kvm.Facts", v.Reason, v.Facts)
	}
	return f
}

// TestIntegrationMisbehavingLibvirtPeer: a host whose libvirt socket, reached
// through the real sshd, answers with a broken frame gets a verdict naming
// the problem and loses its connection; the test process (the exporter's
// checks run in it) stays up and allocates nothing like what the frames
// claim; the real libvirtd host checked alongside keeps its verdict and its
// one connection.
func TestIntegrationMisbehavingLibvirtPeer(t *testing.T) {
	e := loadEnv(t)
	fake := kvm.NewFakeLibvirtd(t)
	healthy := e.checker(t, nil)
	want(t, check(t, healthy), provider.ReasonReady)

	faults := []kvm.Fault{kvm.FaultZeroLength, kvm.FaultHugeLength, kvm.FaultTruncated,
		kvm.FaultWrongProgram, kvm.FaultWrongProcedure, kvm.FaultGarbageXDR}
	for _, fault := range faults {
		for _, proc := range []uint32{kvm.ProcAuthList, kvm.ProcStoragePoolLookupByName, kvm.ProcStoragePoolGetInfo} {
			t.Run(fmt.Sprintf("%s/proc%d", kvm.FaultNames[fault], proc), func(t *testing.T) {
				bad := e.checker(t, func(cfg *kvm.Entry) { cfg.LibvirtSocket = fake.Path() })
				wantReason, wantMsg := kvm.ReasonLibvirtConnectionLost, "malformed libvirt frame"
				switch proc {
				case kvm.ProcAuthList:
					wantReason = provider.ReasonUnknown
				case kvm.ProcStoragePoolGetInfo:
					// The pool's info goes over a kept connection; its
					// lookup is the first call on a new one.
					want(t, check(t, bad), provider.ReasonReady)
				}
				if fault == kvm.FaultTruncated {
					wantMsg = "cut off"
					if proc == kvm.ProcAuthList {
						wantReason = provider.ReasonUnreachable
					}
				}
				sent := fake.Faults()
				fake.SetFault(fault, proc)
				defer fake.SetFault(kvm.FaultNone, 0)

				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				v := check(t, bad)
				runtime.ReadMemStats(&after)
				if v.Reason != wantReason || !strings.Contains(v.Message, wantMsg) {
					t.Errorf("reason %s (%s), want %s with %q", v.Reason, v.Message, wantReason, wantMsg)
				}
				if fake.Faults() != sent+1 {
					t.Fatalf("the fake libvirt peer sent %d broken replies, want 1", fake.Faults()-sent)
				}
				if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
					t.Errorf("the check allocated %d MiB", grew>>20)
				}
				deadline := time.Now().Add(30 * time.Second)
				for fake.Conns() != 0 {
					if time.Now().After(deadline) {
						t.Fatal("the broken connection was not closed")
					}
					time.Sleep(10 * time.Millisecond)
				}
				if v := check(t, healthy); v.Reason != provider.ReasonReady || factsOf(t, v).Connects != 1 {
					t.Errorf("real libvirtd host: %s (%s), connects %d; want Ready on its first connection", v.Reason, v.Message, factsOf(t, v).Connects)
				}
				fake.SetFault(kvm.FaultNone, 0)
				want(t, check(t, bad), provider.ReasonReady)
			})
		}
	}
}

// TestIntegrationIdlePastKeepalive: a kept connection left idle past the
// real libvirtd's keepalive timeout (keepalive_interval × (keepalive_count
// + 1), set to a few seconds in the test daemon's libvirtd.conf) is still
// the one connection, and provider_health_kvm_connects_total stays flat.
// libvirtd pings only clients that ask for keepalive, and the exporter
// never asks for keepalives, events or streams (frame.go refuses any frame
// but a reply): a client that asked would meet a ping it refuses, or be
// dropped for leaving the pings unanswered, and redial.
func TestIntegrationIdlePastKeepalive(t *testing.T) {
	e := loadEnv(t)
	num := func(k string) int {
		n, err := strconv.Atoi(os.Getenv(k))
		if err != nil || n <= 0 {
			t.Fatalf("%s=%q: want the test daemon's keepalive setting (testdata/kvm/ctl.sh)", k, os.Getenv(k))
		}
		return n
	}
	interval, count := num("KVM_IT_KEEPALIVE_INTERVAL"), num("KVM_IT_KEEPALIVE_COUNT")
	// Past the timeout with room to spare: libvirtd's timer is coarse.
	idle := time.Duration(interval*(count+1)+2*interval) * time.Second
	before := acceptedLogins(t, e, e.user)
	c := e.checker(t, nil)
	connects := func(v provider.Verdict) float64 {
		t.Helper()
		ch := make(chan prometheus.Metric, 64)
		v.Facts.Collect(ch, "lab", target)
		close(ch)
		for m := range ch {
			var pb dto.Metric
			if strings.Contains(m.Desc().String(), `"provider_health_kvm_connects_total"`) && m.Write(&pb) == nil {
				return pb.GetCounter().GetValue()
			}
		}
		t.Fatalf("no provider_health_kvm_connects_total (reason %s)", v.Reason)
		return 0
	}
	v := check(t, c)
	want(t, v, provider.ReasonReady)
	if n := connects(v); n != 1 {
		t.Fatalf("connects_total %v after the first check, want 1", n)
	}
	for i := range 2 {
		time.Sleep(idle)
		v = check(t, c)
		if v.Reason != provider.ReasonReady || connects(v) != 1 {
			t.Fatalf("after %d idle spells of %s: reason %s (%s), connects_total %v; want Ready on the first connection",
				i+1, idle, v.Reason, v.Message, connects(v))
		}
	}
	if got := acceptedLogins(t, e, e.user) - before; got != 1 {
		t.Errorf("sshd logged %d accepted logins, want 1", got)
	}
}
