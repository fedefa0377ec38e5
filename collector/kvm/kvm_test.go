package kvm

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/digitalocean/go-libvirt"
	"go.uber.org/goleak"
	"golang.org/x/crypto/ssh"

	"github.com/egress-proxies/provider_health_exporter/config"
	"github.com/egress-proxies/provider_health_exporter/internal/testnet"
	"github.com/egress-proxies/provider_health_exporter/provider"

	"github.com/egress-proxies/provider_health_exporter/internal/fakedns"
)

func TestMain(m *testing.M) {
	if os.Getenv(fleetEnv) != "" {
		// BenchmarkFleet's fake fleet, in a process of its own.
		os.Exit(serveFleet())
	}
	goleak.VerifyTestMain(m)
}

const hostName = "beelink"

// slowKDF is the budget of checks that decrypt a key: bcrypt's KDF takes
// seconds of CPU under the race detector on a busy machine.
const slowKDF = time.Minute

// env is one KVM host as the unit tests see it: an in-process SSH server,
// the socket stub behind it, the fake libvirt, and the material to reach it.
type env struct {
	t          testing.TB
	dir        string
	key        ssh.Signer
	keyFile    string
	knownHosts string
	stub       *socketStub
	srv        *sshServer
	fake       *fakeLibvirt
	cfg        *Entry
}

func newEnv(t testing.TB) *env {
	t.Helper()
	dir := t.TempDir()
	e := &env{t: t, dir: dir, keyFile: filepath.Join(dir, "id_ed25519"), knownHosts: filepath.Join(dir, "known_hosts")}
	e.key = writeKey(t, e.keyFile)
	e.stub = newSocketStub(t)
	e.srv = newSSHServer(t, e.key.PublicKey(), e.stub.path)
	e.writeKnownHosts(knownHostsLine(e.srv.addr, e.srv.hostKey.PublicKey()))
	e.fake = newFakeLibvirt()
	e.cfg = &Entry{
		Name:               "lab",
		User:               "proxyops",
		PrivateKeyFile:     e.keyFile,
		KnownHostsFile:     e.knownHosts,
		LibvirtSocket:      e.stub.path,
		LibvirtURI:         DefaultLibvirtURI,
		Pool:               DefaultPool,
		MaxConcurrentDials: DefaultMaxConcurrentDials,
		Hosts: []*Host{{
			Address:      e.srv.addr,
			Name:         hostName,
			HostSettings: &HostSettings{User: "proxyops", Pool: DefaultPool, PrivateKeyFile: e.keyFile},
		}},
	}
	return e
}

func (e *env) writeKnownHosts(content string) {
	e.t.Helper()
	if err := os.WriteFile(e.knownHosts, []byte(content), 0o600); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) checker(opts ...provider.Option) *Checker {
	e.t.Helper()
	c, err := New(e.cfg, testLogger(e.t), opts...)
	if err != nil {
		e.t.Fatal(err)
	}
	c.newClient = e.fake.client
	e.t.Cleanup(func() { c.Close() })
	return c
}

// check runs one check under budget and fails the test when it does not
// return within a generous bound past the budget.
func check(t testing.TB, c *Checker, target string, budget time.Duration) provider.Verdict {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	done := make(chan provider.Verdict, 1)
	go func() { done <- c.Check(ctx, testLogger(t), target) }()
	select {
	case v := <-done:
		if v.Capacity.Contradicts(v.Reason) {
			t.Errorf("%s: capacity %s contradicts the verdict %s (%s)", target, v.Capacity, v.Reason, v.Message)
		}
		return v
	case <-time.After(budget + 10*time.Second):
		t.Fatalf("check did not return within %s past its budget of %s", 10*time.Second, budget)
		return provider.Verdict{}
	}
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func randomKey(t testing.TB) ssh.PublicKey {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	k, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// waitDead waits until the kept session of the host knows its transport is
// gone, so the next check is guaranteed to see it.
func waitDead(t testing.TB, c *Checker) {
	t.Helper()
	h := c.lookup(hostName)
	h.mu.Lock()
	s := h.sess
	h.mu.Unlock()
	if s == nil {
		t.Fatal("no kept session")
	}
	select {
	case <-s.dead:
	case <-time.After(10 * time.Second):
		t.Fatal("kept session did not notice its connection was dropped")
	}
}

type step struct {
	before func(e *env, c *Checker)
	budget time.Duration // default 5s
	want   provider.Reason
}

// TestReasons produces every kvm reason of docs/metrics.md's "Reasons" and counts the dials: one
// for a kept connection, a redial only after a transport failure, a dial per
// check while no connection can be made.
func TestReasons(t *testing.T) {
	libvirtErr := func(code libvirt.ErrorNumber, msg string) error {
		return libvirt.Error{Code: uint32(code), Message: msg}
	}
	tests := []struct {
		name         string
		setup        func(e *env)
		steps        []step
		wantDials    int64 // TCP connections the SSH server accepted
		wantConnects uint64
		budget       time.Duration // per check unless the step sets one; default 5s
	}{
		{
			name:      "Ready",
			steps:     []step{{want: provider.ReasonReady}, {want: provider.ReasonReady}},
			wantDials: 1, wantConnects: 1,
		},
		{
			name:      "PoolMissing keeps the connection",
			setup:     func(e *env) { e.fake.lookupErr = libvirtErr(libvirt.ErrNoStoragePool, "Storage pool not found") },
			steps:     []step{{want: ReasonPoolMissing}, {want: ReasonPoolMissing}},
			wantDials: 1, wantConnects: 1,
		},
		{
			name:      "PoolInactive",
			setup:     func(e *env) { e.fake.state = uint8(libvirt.StoragePoolInactive) },
			steps:     []step{{want: ReasonPoolInactive}, {want: ReasonPoolInactive}},
			wantDials: 1, wantConnects: 1,
		},
		{
			name:      "PoolFull keeps the connection",
			setup:     func(e *env) { e.cfg.Hosts[0].MinPoolAvailableBytes = e.fake.available + 1 },
			steps:     []step{{want: ReasonPoolFull}, {want: ReasonPoolFull}},
			wantDials: 1, wantConnects: 1,
		},
		{
			name:      "HostMemoryLow keeps the connection",
			setup:     func(e *env) { e.fake.freeMemory = 1 << 30; e.cfg.Hosts[0].MinFreeMemoryBytes = 2 << 30 },
			steps:     []step{{want: ReasonHostMemoryLow}, {want: ReasonHostMemoryLow}},
			wantDials: 1, wantConnects: 1,
		},
		{
			// 8 CPUs at ratio 1, four domains of 2 vCPUs: none left.
			name: "HostCPULow keeps the connection",
			setup: func(e *env) {
				e.fake.domains = []domainStat{{"a", 2, 1 << 20, true, true}, {"b", 2, 1 << 20, true, true}, {"c", 2, 1 << 20, true, true}, {"d", 2, 1 << 20, true, true}}
				e.cfg.Hosts[0].Promised = &Promised{VCPUs: 1, CPURatio: 1}
			},
			steps:     []step{{want: ReasonHostCPULow}, {want: ReasonHostCPULow}},
			wantDials: 1, wantConnects: 1,
		},
		{
			name: "VolumeMissing keeps the connection",
			setup: func(e *env) {
				e.cfg.Hosts[0].Volume = "proxy-base.qcow2"
			},
			steps:     []step{{want: ReasonVolumeMissing}, {want: ReasonVolumeMissing}},
			wantDials: 1, wantConnects: 1,
		},
		{
			name: "NetworkMissing keeps the connection",
			setup: func(e *env) {
				e.fake.volumes["proxy-base.qcow2"] = true
				e.cfg.Hosts[0].Volume, e.cfg.Hosts[0].Network = "proxy-base.qcow2", "proxies"
			},
			steps:     []step{{want: ReasonNetworkMissing}, {want: ReasonNetworkMissing}},
			wantDials: 1, wantConnects: 1,
		},
		{
			name: "NetworkInactive keeps the connection, and Ready once the network is started",
			setup: func(e *env) {
				e.fake.networks["proxies"] = &fakeNetwork{}
				e.cfg.Hosts[0].Network = "proxies"
			},
			steps: []step{
				{want: ReasonNetworkInactive},
				{want: ReasonNetworkInactive},
				{before: func(e *env, _ *Checker) {
					e.fake.set(func(f *fakeLibvirt) { f.networks["proxies"].active = true })
				}, want: provider.ReasonReady},
			},
			wantDials: 1, wantConnects: 1,
		},
		{
			name:      "PoolBuilding",
			setup:     func(e *env) { e.fake.state = uint8(libvirt.StoragePoolBuilding) },
			steps:     []step{{want: ReasonPoolBuilding}, {want: ReasonPoolBuilding}},
			wantDials: 1, wantConnects: 1,
		},
		{
			name:      "PoolDegraded",
			setup:     func(e *env) { e.fake.state = uint8(libvirt.StoragePoolDegraded) },
			steps:     []step{{want: ReasonPoolDegraded}, {want: ReasonPoolDegraded}},
			wantDials: 1, wantConnects: 1,
		},
		{
			name:      "PoolInaccessible",
			setup:     func(e *env) { e.fake.state = uint8(libvirt.StoragePoolInaccessible) },
			steps:     []step{{want: ReasonPoolInaccessible}, {want: ReasonPoolInaccessible}},
			wantDials: 1, wantConnects: 1,
		},
		{
			name: "pool recovers on the kept connection",
			setup: func(e *env) {
				e.fake.state = uint8(libvirt.StoragePoolInactive)
			},
			steps: []step{
				{want: ReasonPoolInactive},
				{before: func(e *env, _ *Checker) {
					e.fake.set(func(f *fakeLibvirt) { f.state = uint8(libvirt.StoragePoolRunning) })
				}, want: provider.ReasonReady},
			},
			wantDials: 1, wantConnects: 1,
		},
		{
			name:      "Unknown: libvirt error other than a missing pool keeps the connection",
			setup:     func(e *env) { e.fake.infoErr = libvirtErr(libvirt.ErrInternalError, "internal error") },
			steps:     []step{{want: provider.ReasonUnknown}, {want: provider.ReasonUnknown}},
			wantDials: 1, wantConnects: 1,
		},
		{
			name:      "Unknown: pool state libvirt may add later",
			setup:     func(e *env) { e.fake.state = 7 },
			steps:     []step{{want: provider.ReasonUnknown}, {want: provider.ReasonUnknown}},
			wantDials: 1, wantConnects: 1,
		},
		{
			name:      "LibvirtConnectFailed",
			setup:     func(e *env) { e.fake.connectErr = libvirtErr(libvirt.ErrAuthFailed, "authentication failed") },
			steps:     []step{{want: ReasonLibvirtConnectFailed}, {want: ReasonLibvirtConnectFailed}},
			wantDials: 2, wantConnects: 0,
		},
		{
			name:      "LibvirtSocketUnavailable",
			setup:     func(e *env) { e.cfg.LibvirtSocket = e.stub.path + ".missing" },
			steps:     []step{{want: ReasonLibvirtSocketUnavailable}, {want: ReasonLibvirtSocketUnavailable}},
			wantDials: 2, wantConnects: 0,
		},
		{
			name:      "SSHAuthFailed",
			setup:     func(e *env) { e.srv.authorize(randomKey(e.t)) },
			steps:     []step{{want: ReasonSSHAuthFailed}, {want: ReasonSSHAuthFailed}},
			wantDials: 2, wantConnects: 0,
		},
		{
			name:      "HostKeyUnknown",
			setup:     func(e *env) { e.writeKnownHosts(knownHostsLine("192.0.2.10:22", e.srv.hostKey.PublicKey())) },
			steps:     []step{{want: ReasonHostKeyUnknown}, {want: ReasonHostKeyUnknown}},
			wantDials: 2, wantConnects: 0,
		},
		{
			name:      "HostKeyMismatch",
			setup:     func(e *env) { e.writeKnownHosts(knownHostsLine(e.srv.addr, randomKey(e.t))) },
			steps:     []step{{want: ReasonHostKeyMismatch}, {want: ReasonHostKeyMismatch}},
			wantDials: 2, wantConnects: 0,
		},
		{
			name: "HostKeyMismatch: revoked key",
			setup: func(e *env) {
				k := e.srv.hostKey.PublicKey()
				e.writeKnownHosts("@revoked * " + string(ssh.MarshalAuthorizedKey(k)) + knownHostsLine(e.srv.addr, k))
			},
			steps:     []step{{want: ReasonHostKeyMismatch}, {want: ReasonHostKeyMismatch}},
			wantDials: 2, wantConnects: 0,
		},
		{
			name: "SSHMaterialInvalid: key does not parse",
			setup: func(e *env) {
				if err := os.WriteFile(e.keyFile, []byte("not a key\n"), 0o600); err != nil {
					e.t.Fatal(err)
				}
			},
			steps:     []step{{want: ReasonSSHMaterialInvalid}, {want: ReasonSSHMaterialInvalid}},
			wantDials: 0, wantConnects: 0,
		},
		{
			name:      "SSHMaterialInvalid: encrypted key without passphrase",
			setup:     func(e *env) { e.srv.authorize(writeEncryptedKey(e.t, e.keyFile).PublicKey()) },
			steps:     []step{{want: ReasonSSHMaterialInvalid}, {want: ReasonSSHMaterialInvalid}},
			wantDials: 0, wantConnects: 0,
			budget: slowKDF,
		},
		{
			name: "SSHMaterialInvalid: wrong passphrase",
			setup: func(e *env) {
				e.srv.authorize(writeEncryptedKey(e.t, e.keyFile).PublicKey())
				e.cfg.PassphraseFile = filepath.Join(e.dir, "passphrase")
				if err := os.WriteFile(e.cfg.PassphraseFile, []byte("wrong\n"), 0o600); err != nil {
					e.t.Fatal(err)
				}
			},
			steps:     []step{{want: ReasonSSHMaterialInvalid}, {want: ReasonSSHMaterialInvalid}},
			wantDials: 0, wantConnects: 0,
			budget: slowKDF,
		},
		{
			name: "SSHMaterialInvalid: key file is a named pipe",
			setup: func(e *env) {
				os.Remove(e.keyFile)
				if err := syscall.Mkfifo(e.keyFile, 0o600); err != nil {
					e.t.Fatal(err)
				}
			},
			steps:     []step{{want: ReasonSSHMaterialInvalid}, {want: ReasonSSHMaterialInvalid}},
			wantDials: 0, wantConnects: 0,
		},
		{
			name: "SSHMaterialInvalid: passphrase file of 1 GiB",
			setup: func(e *env) {
				e.cfg.PassphraseFile = filepath.Join(e.dir, "passphrase")
				f, err := os.Create(e.cfg.PassphraseFile)
				if err != nil {
					e.t.Fatal(err)
				}
				defer f.Close()
				if err := f.Truncate(1 << 30); err != nil {
					e.t.Fatal(err)
				}
			},
			steps:     []step{{want: ReasonSSHMaterialInvalid}, {want: ReasonSSHMaterialInvalid}},
			wantDials: 0, wantConnects: 0,
		},
		{
			name: "SSHMaterialInvalid: known_hosts is /dev/zero",
			setup: func(e *env) {
				os.Remove(e.knownHosts)
				if err := os.Symlink("/dev/zero", e.knownHosts); err != nil {
					e.t.Fatal(err)
				}
			},
			steps:     []step{{want: ReasonSSHMaterialInvalid}, {want: ReasonSSHMaterialInvalid}},
			wantDials: 0, wantConnects: 0,
		},
		{
			name:      "SSHMaterialInvalid: known_hosts missing",
			setup:     func(e *env) { os.Remove(e.knownHosts) },
			steps:     []step{{want: ReasonSSHMaterialInvalid}, {want: ReasonSSHMaterialInvalid}},
			wantDials: 0, wantConnects: 0,
		},
		{
			name: "Ready with an encrypted key and its passphrase",
			setup: func(e *env) {
				e.srv.authorize(writeEncryptedKey(e.t, e.keyFile).PublicKey())
				e.cfg.PassphraseFile = filepath.Join(e.dir, "passphrase")
				if err := os.WriteFile(e.cfg.PassphraseFile, []byte(testPassphrase+"\n"), 0o600); err != nil {
					e.t.Fatal(err)
				}
			},
			steps:     []step{{want: provider.ReasonReady}, {want: provider.ReasonReady}},
			wantDials: 1, wantConnects: 1,
			budget: slowKDF,
		},
		{
			name: "a repaired key file is picked up without a new checker",
			setup: func(e *env) {
				good, err := os.ReadFile(e.keyFile)
				if err != nil {
					e.t.Fatal(err)
				}
				if err := os.WriteFile(e.keyFile+".good", good, 0o600); err != nil {
					e.t.Fatal(err)
				}
				if err := os.WriteFile(e.keyFile, []byte("truncated"), 0o600); err != nil {
					e.t.Fatal(err)
				}
			},
			steps: []step{
				{want: ReasonSSHMaterialInvalid},
				{before: func(e *env, _ *Checker) {
					if err := os.Rename(e.keyFile+".good", e.keyFile); err != nil {
						e.t.Fatal(err)
					}
				}, want: provider.ReasonReady},
			},
			wantDials: 1, wantConnects: 1,
		},
		{
			name:      "Ready with insecure_ignore_host_key and no known_hosts",
			setup:     func(e *env) { os.Remove(e.knownHosts); e.cfg.KnownHostsFile = ""; e.cfg.InsecureIgnoreHostKey = true },
			steps:     []step{{want: provider.ReasonReady}, {want: provider.ReasonReady}},
			wantDials: 1, wantConnects: 1,
		},
		{
			name:      "SSHHandshakeFailed",
			setup:     func(e *env) { e.srv.setMode(modeEOF) },
			steps:     []step{{want: ReasonSSHHandshakeFailed}, {want: ReasonSSHHandshakeFailed}},
			wantDials: 2, wantConnects: 0,
		},
		{
			name:      "Unreachable",
			setup:     func(e *env) { e.cfg.Hosts[0].Address = testnet.RefusedAddr(e.t) },
			steps:     []step{{want: provider.ReasonUnreachable}, {want: provider.ReasonUnreachable}},
			wantDials: 0, wantConnects: 0,
		},
		{
			name:      "DNSFailed",
			setup:     func(e *env) { e.cfg.Hosts[0].Address = "kvm-host.invalid:22" },
			steps:     []step{{want: provider.ReasonDNSFailed}, {want: provider.ReasonDNSFailed}},
			wantDials: 0, wantConnects: 0,
		},
		{
			// The dial the first check started goes on after its
			// budget; the second check joins it instead of dialing
			// again. The dial must still be running when the second
			// check starts, however slow the machine: with the default
			// dial_timeout it gives up on the silent server after a
			// quarter of 3s, so dial_timeout is made long (Close ends
			// the dial).
			name: "Timeout: server accepts TCP and never speaks",
			setup: func(e *env) {
				e.srv.setMode(modeSilent)
				e.cfg.DialTimeout = config.Duration(10 * time.Minute)
			},
			steps: []step{
				{budget: 300 * time.Millisecond, want: provider.ReasonTimeout},
				{budget: 300 * time.Millisecond, want: provider.ReasonTimeout},
			},
			wantDials: 1, wantConnects: 0,
		},
		{
			name: "Timeout: libvirtd hangs on a kept connection, which is then dropped",
			steps: []step{
				{want: provider.ReasonReady},
				{before: func(e *env, _ *Checker) { e.stub.setMode(stubHang) }, budget: 300 * time.Millisecond, want: provider.ReasonTimeout},
				{before: func(e *env, _ *Checker) { e.stub.setMode(stubEcho) }, want: provider.ReasonReady},
			},
			wantDials: 2, wantConnects: 2,
		},
		{
			name: "LibvirtConnectionLost mid-check, then a redial",
			steps: []step{
				{want: provider.ReasonReady},
				{before: func(e *env, _ *Checker) { e.stub.setMode(stubDrop) }, want: ReasonLibvirtConnectionLost},
				{before: func(e *env, _ *Checker) { e.stub.setMode(stubEcho) }, want: provider.ReasonReady},
			},
			wantDials: 2, wantConnects: 2,
		},
		{
			name: "a kept connection known to be gone is redialed at once",
			steps: []step{
				{want: provider.ReasonReady},
				{before: func(e *env, c *Checker) { e.srv.killConns(); waitDead(e.t, c) }, want: provider.ReasonReady},
			},
			wantDials: 2, wantConnects: 2,
		},
	}
	covered := map[provider.Reason]bool{}
	for _, tt := range tests {
		for _, s := range tt.steps {
			covered[s.want] = true
		}
	}
	for _, r := range Reasons().Reasons() {
		if !covered[r] {
			t.Errorf("no case produces %s", r)
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			if tt.setup != nil {
				tt.setup(e)
			}
			var opts []provider.Option
			if tt.name == "DNSFailed" {
				opts = append(opts, provider.WithDialer(fakedns.Dialer(t)))
			}
			c := e.checker(opts...)
			var v provider.Verdict
			for i, s := range tt.steps {
				if s.before != nil {
					s.before(e, c)
				}
				budget := s.budget
				if budget == 0 {
					budget = tt.budget
				}
				if budget == 0 {
					budget = 5 * time.Second
				}
				v = check(t, c, hostName, budget)
				if v.Reason != s.want {
					t.Fatalf("check %d: reason %s (%s), want %s", i+1, v.Reason, v.Message, s.want)
				}
				if !Reasons().Contains(v.Reason) {
					t.Fatalf("check %d: reason %s is not in the kvm set", i+1, v.Reason)
				}
			}
			if got := e.srv.accepted.Load(); got != tt.wantDials {
				t.Errorf("dials (TCP connections accepted) = %d, want %d", got, tt.wantDials)
			}
			if v.Facts == nil {
				t.Fatal("verdict has no KVM facts")
			}
			if factsOf(t, v).Connects != tt.wantConnects {
				t.Errorf("Connects = %d, want %d", factsOf(t, v).Connects, tt.wantConnects)
			}
			if factsOf(t, v).User != "proxyops" || v.Facts.Details()["user"] != "proxyops" || factsOf(t, v).Pool != "default" {
				t.Errorf("facts %+v: want user proxyops and pool default", factsOf(t, v))
			}
		})
	}
}

// TestReadyFacts checks what a Ready verdict carries and that a check on a
// kept connection makes one call, the pool's info on its kept handle, and
// nothing else.
func TestReadyFacts(t *testing.T) {
	e := newEnv(t)
	e.fake.version = 10002003
	c := e.checker()
	for range 3 {
		if v := check(t, c, hostName, 5*time.Second); v.Reason != provider.ReasonReady {
			t.Fatalf("reason %s (%s), want Ready", v.Reason, v.Message)
		}
	}
	v := check(t, c, hostName, 5*time.Second)
	want := Facts{
		User: "proxyops", LibvirtVersion: "10.2.3", Pool: "default", PoolState: "running",
		CapacityBytes: 100 << 30, AllocationBytes: 30 << 30, AvailableBytes: 70 << 30, Connects: 1,
	}
	if *factsOf(t, v) != want {
		t.Errorf("facts %+v, want %+v", *factsOf(t, v), want)
	}
	wantDetails := map[string]string{"user": "proxyops", "pool": "default", "poolState": "running", "libvirtVersion": "10.2.3"}
	for k, w := range wantDetails {
		if v.Facts.Details()[k] != w {
			t.Errorf("details[%s] = %q, want %q", k, v.Facts.Details()[k], w)
		}
	}
	wantCalls := map[string]int{"ConnectToURI": 1, "ConnectGetLibVersion": 1, "StoragePoolLookupByName": 1, "StoragePoolGetInfo": 4}
	got := e.fake.callCounts()
	if len(got) != len(wantCalls) {
		t.Errorf("calls %v, want %v", got, wantCalls)
	}
	for k, w := range wantCalls {
		if got[k] != w {
			t.Errorf("%s called %d times, want %d (all calls: %v)", k, got[k], w, got)
		}
	}
}

// TestUnchangedFactsAreHandedOutAgain: a check that finds what the check
// before found returns the same Facts, so the framework does not collect
// their metrics again; one that finds a change returns new Facts.
func TestUnchangedFactsAreHandedOutAgain(t *testing.T) {
	e := newEnv(t)
	c := e.checker()
	first := check(t, c, hostName, 5*time.Second)
	second := check(t, c, hostName, 5*time.Second)
	if first.Reason != provider.ReasonReady || second.Reason != provider.ReasonReady {
		t.Fatalf("reasons %s, %s (%s), want Ready", first.Reason, second.Reason, second.Message)
	}
	if factsOf(t, first) != factsOf(t, second) {
		t.Errorf("unchanged facts %+v handed out as new Facts", *factsOf(t, second))
	}
	e.fake.set(func(f *fakeLibvirt) { f.allocation, f.available = 31<<30, 69<<30 })
	third := check(t, c, hostName, 5*time.Second)
	if factsOf(t, third) == factsOf(t, second) {
		t.Fatalf("changed pool sizes handed out in the Facts of the check before")
	}
	if got := factsOf(t, third).AllocationBytes; got != 31<<30 {
		t.Errorf("allocation %d, want %d", got, uint64(31<<30))
	}
	if got := factsOf(t, second).AllocationBytes; got != 30<<30 {
		t.Errorf("the Facts of the check before changed: allocation %d, want %d", got, uint64(30<<30))
	}
}

// TestFailureKeepsLastKnownVersion: after the connection is lost, the host
// info still shows the version libvirtd had, and no pool state.
func TestFailureKeepsLastKnownVersion(t *testing.T) {
	e := newEnv(t)
	c := e.checker()
	if v := check(t, c, hostName, 5*time.Second); v.Reason != provider.ReasonReady {
		t.Fatalf("reason %s (%s), want Ready", v.Reason, v.Message)
	}
	e.stub.setMode(stubDrop)
	v := check(t, c, hostName, 5*time.Second)
	if v.Reason != ReasonLibvirtConnectionLost {
		t.Fatalf("reason %s (%s), want LibvirtConnectionLost", v.Reason, v.Message)
	}
	if factsOf(t, v).LibvirtVersion != "9.0.0" || factsOf(t, v).PoolState != "" || factsOf(t, v).CapacityBytes != 0 {
		t.Errorf("facts %+v: want version 9.0.0 kept, no pool state or sizes", *factsOf(t, v))
	}
}

// TestConcurrentChecksDialOnce: concurrent checks of a host that has no
// connection yet make one connection between them.
func TestConcurrentChecksDialOnce(t *testing.T) {
	e := newEnv(t)
	c := e.checker()
	var wg sync.WaitGroup
	reasons := make(chan provider.Reason, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The budget only guards against a hang: on a loaded
			// machine under -race a round trip over the in-process
			// SSH server can take seconds.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			reasons <- c.Check(ctx, testLogger(t), hostName).Reason
		}()
	}
	wg.Wait()
	close(reasons)
	for r := range reasons {
		if r != provider.ReasonReady {
			t.Errorf("reason %s, want Ready", r)
		}
	}
	if got := e.srv.accepted.Load(); got != 1 {
		t.Errorf("dials = %d, want 1", got)
	}
}

// TestMaxConcurrentDials: with one dial slot and two hosts that never
// answer, only one dial is made while that dial hangs; the other check waits
// for the slot. Both checks share one context, as the checks of a scrape
// do, and it is cancelled only after the first dial is seen: once it ends,
// the waiting check finds its context over and makes no dial. Nothing here
// depends on how fast the machine is.
func TestMaxConcurrentDials(t *testing.T) {
	e := newEnv(t)
	e.srv.setMode(modeSilent)
	other := newSSHServer(t, e.key.PublicKey(), e.stub.path)
	other.setMode(modeSilent)
	e.cfg.MaxConcurrentDials = 1
	// The first dial outlives the checks; it must hold the slot until the
	// test has counted, however slow the machine (Close ends it).
	e.cfg.DialTimeout = config.Duration(10 * time.Minute)
	e.cfg.Hosts = append(e.cfg.Hosts, &Host{
		Address:      other.addr,
		Name:         "other",
		HostSettings: &HostSettings{User: "proxyops", Pool: "default", PrivateKeyFile: e.keyFile},
	})
	c := e.checker()
	dials := func() int64 { return e.srv.accepted.Load() + other.accepted.Load() }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for _, target := range []string{hostName, "other"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if v := c.Check(ctx, testLogger(t), target); v.Reason != provider.ReasonTimeout {
				t.Errorf("%s: reason %s (%s), want Timeout", target, v.Reason, v.Message)
			}
		}()
	}
	// Both checks have queued their dial and the first is at the server.
	// The queue starts a dial in push, under its lock, so from here on a
	// broken limit would already show as a second running dial: the
	// assertion holds however slow the machine.
	waitFor(t, "both dials queued, the first at the server", func() bool {
		return c.dials.queuedTotal.Load() == 2 && dials() >= 1
	})
	c.dials.mu.Lock()
	running, maxRunning, waiting := c.dials.running, c.dials.maxRunning, len(c.dials.fresh)+len(c.dials.failing)
	c.dials.mu.Unlock()
	if running != 1 || maxRunning != 1 || waiting != 1 {
		t.Errorf("dial queue: %d running (at most %d), %d waiting; want 1 running, 1 waiting (max_concurrent_dials: 1)", running, maxRunning, waiting)
	}
	cancel()
	wg.Wait()
	if got := dials(); got != 1 {
		t.Errorf("dials = %d, want 1 (max_concurrent_dials: 1)", got)
	}
}

// TestAdopt: a reload keeps the connection of an unchanged host (also when
// only its pool changed) and redials a host whose settings changed; the
// connects counter carries over either way.
func TestAdopt(t *testing.T) {
	for _, tt := range []struct {
		name         string
		change       func(cfg *Entry)
		wantDials    int64
		wantConnects uint64
	}{
		{name: "unchanged", change: func(*Entry) {}, wantDials: 1, wantConnects: 1},
		{name: "pool changed", change: func(cfg *Entry) { cfg.Hosts[0].Pool = "images" }, wantDials: 1, wantConnects: 1},
		{name: "user changed", change: func(cfg *Entry) { cfg.Hosts[0].User = "root" }, wantDials: 2, wantConnects: 2},
		{name: "socket changed", change: func(cfg *Entry) { cfg.LibvirtURI = "qemu:///session" }, wantDials: 2, wantConnects: 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			old := e.checker()
			if v := check(t, old, hostName, 5*time.Second); v.Reason != provider.ReasonReady {
				t.Fatalf("reason %s (%s), want Ready", v.Reason, v.Message)
			}
			host := *e.cfg.Hosts[0]
			cfg := *e.cfg
			cfg.Hosts = []*Host{&host}
			tt.change(&cfg)
			e.cfg = &cfg
			next := e.checker()
			next.Adopt(old)
			if err := old.Close(); err != nil {
				t.Fatal(err)
			}
			v := check(t, next, hostName, 5*time.Second)
			if v.Reason != provider.ReasonReady {
				t.Fatalf("after reload: reason %s (%s), want Ready", v.Reason, v.Message)
			}
			if got := e.srv.accepted.Load(); got != tt.wantDials {
				t.Errorf("dials = %d, want %d", got, tt.wantDials)
			}
			if factsOf(t, v).Connects != tt.wantConnects {
				t.Errorf("Connects = %d, want %d", factsOf(t, v).Connects, tt.wantConnects)
			}
		})
	}
}

// TestCloseClosesKeptConnections: after Close the server sees the
// connection go, and a check made afterwards does not leave one behind.
func TestCloseClosesKeptConnections(t *testing.T) {
	e := newEnv(t)
	c := e.checker()
	if v := check(t, c, hostName, 5*time.Second); v.Reason != provider.ReasonReady {
		t.Fatalf("reason %s (%s), want Ready", v.Reason, v.Message)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if n := e.fake.callCounts()["ConnectClose"]; n != 1 {
		t.Errorf("ConnectClose called %d times on Close, want 1 (a goodbye to libvirtd)", n)
	}
	waitNoConns(t, e.srv)
	if v := check(t, c, hostName, 5*time.Second); v.Reason != provider.ReasonReady {
		t.Fatalf("check after Close: reason %s (%s), want Ready", v.Reason, v.Message)
	}
	waitNoConns(t, e.srv)
}

func waitNoConns(t testing.TB, s *sshServer) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.mu.Lock()
		n := len(s.conns)
		s.mu.Unlock()
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d connections still open on the server", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestEndedContextKeepsConnection: a check whose budget is already spent
// reports Timeout without closing the kept connection.
func TestEndedContextKeepsConnection(t *testing.T) {
	e := newEnv(t)
	c := e.checker()
	if v := check(t, c, hostName, 5*time.Second); v.Reason != provider.ReasonReady {
		t.Fatalf("reason %s (%s), want Ready", v.Reason, v.Message)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if v := c.Check(ctx, testLogger(t), hostName); v.Reason != provider.ReasonTimeout {
		t.Fatalf("reason %s (%s), want Timeout", v.Reason, v.Message)
	}
	v := check(t, c, hostName, 5*time.Second)
	if v.Reason != provider.ReasonReady || factsOf(t, v).Connects != 1 || e.srv.accepted.Load() != 1 {
		t.Errorf("after an ended check: reason %s, connects %d, dials %d; want Ready on the kept connection", v.Reason, factsOf(t, v).Connects, e.srv.accepted.Load())
	}
}

func TestUnknownTarget(t *testing.T) {
	e := newEnv(t)
	c := e.checker()
	if v := check(t, c, "nope", time.Second); v.Reason != provider.ReasonUnknown {
		t.Errorf("reason %s, want Unknown", v.Reason)
	}
	if got := e.srv.accepted.Load(); got != 0 {
		t.Errorf("dials = %d, want 0", got)
	}
}

func TestNewDoesNoIO(t *testing.T) {
	e := newEnv(t)
	e.checker()
	if got := e.srv.accepted.Load(); got != 0 {
		t.Errorf("dials = %d after New, want 0", got)
	}
	targets := e.checker().Targets()
	if len(targets) != 1 || targets[0].Name != hostName || targets[0].Address != e.srv.addr {
		t.Errorf("targets %+v", targets)
	}
}

// TestAuthFailureString pins the text x/crypto/ssh uses for a rejected key,
// the one failure it exposes no type for.
func TestAuthFailureString(t *testing.T) {
	e := newEnv(t)
	e.srv.authorize(randomKey(t))
	cfg, _, err := clientConfig(settings{keyFile: e.keyFile, knownHostsFile: e.knownHosts, user: "proxyops"}, newMaterial())
	if err != nil {
		t.Fatal(err)
	}
	_, err = ssh.Dial("tcp", e.srv.addr, cfg)
	if err == nil || !strings.Contains(err.Error(), authFailure) {
		t.Fatalf("ssh.Dial with a rejected key: %v, want an error containing %q", err, authFailure)
	}
}

func TestInsecureWarns(t *testing.T) {
	e := newEnv(t)
	e.cfg.InsecureIgnoreHostKey = true
	var buf strings.Builder
	if _, err := New(e.cfg, slog.New(slog.NewTextHandler(&buf, nil))); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "level=WARN") || !strings.Contains(buf.String(), "insecure_ignore_host_key") {
		t.Errorf("log %q: want a warning about insecure_ignore_host_key", buf.String())
	}
}

// CheckFiles reads the material as a dial does: good files pass, an
// encrypted key without passphrase and an unparsable known_hosts are named.
func TestCheckFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good, enc, kh := filepath.Join(dir, "id"), filepath.Join(dir, "id_enc"), filepath.Join(dir, "known_hosts")
	signer := writeKey(t, good)
	writeEncryptedKey(t, enc)
	if err := os.WriteFile(kh, []byte(knownHostsLine("127.0.0.1:22", signer.PublicKey())), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := func(key, knownHosts string) *Entry {
		return &Entry{Name: "lab", KnownHostsFile: knownHosts, Hosts: []*Host{{Address: "127.0.0.1:22", Name: "h", HostSettings: &HostSettings{User: "u", PrivateKeyFile: key}}}}
	}
	if errs := CheckFiles(cfg(good, kh)); len(errs) != 0 {
		t.Errorf("good files: %v", errs)
	}
	errs := CheckFiles(cfg(enc, good)) // a key file is no known_hosts
	if len(errs) != 2 || !strings.HasPrefix(errs[0].Error(), "private_key_file: ") || !strings.Contains(errs[0].Error(), "no passphrase_file") ||
		!strings.HasPrefix(errs[1].Error(), "known_hosts_file: ") {
		t.Errorf("bad files: %v", errs)
	}
}

// TestDialTimeoutFreesTheSlot: with one dial slot, a host that accepts TCP
// and never speaks holds the slot only for dial_timeout, not for the whole
// budget, so a healthy host of the same scrape still gets its dial. The
// scrape's context never ends here: without dial_timeout both checks would
// hang until the test's guard fails them.
func TestDialTimeoutFreesTheSlot(t *testing.T) {
	e := newEnv(t)
	silent := newSSHServer(t, e.key.PublicKey(), e.stub.path)
	silent.setMode(modeSilent)
	e.cfg.MaxConcurrentDials = 1
	// Long enough for a healthy dial under -race on a loaded machine.
	e.cfg.DialTimeout = config.Duration(5 * time.Second)
	e.cfg.Hosts = append(e.cfg.Hosts, &Host{
		Address:      silent.addr,
		Name:         "silent",
		HostSettings: &HostSettings{User: "proxyops", Pool: "default", PrivateKeyFile: e.keyFile},
	})
	c := e.checker()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	verdicts := map[string]*provider.Verdict{hostName: {}, "silent": {}}
	for target, v := range verdicts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			*v = c.Check(ctx, testLogger(t), target)
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatal("the scrape's context ended: the checks were not bounded by dial_timeout")
	}
	if v := verdicts["silent"]; v.Reason != provider.ReasonTimeout || !strings.Contains(v.Message, "sent no SSH identification within 1.25s (a quarter of dial_timeout, 5s)") {
		t.Errorf("silent host: reason %s (%s), want Timeout naming a quarter of dial_timeout", v.Reason, v.Message)
	}
	if v := verdicts[hostName]; v.Reason != provider.ReasonReady {
		t.Errorf("healthy host: reason %s (%s), want Ready", v.Reason, v.Message)
	}
	if got := silent.accepted.Load(); got != 1 {
		t.Errorf("dials of the silent host = %d, want 1", got)
	}
}

// TestDialTimeoutEveryStage: dial_timeout cuts a dial wherever it hangs, and
// the verdict is Timeout naming it although the scrape still had time. A
// server that never sends its SSH identification is cut after a quarter of
// dial_timeout.
func TestDialTimeoutEveryStage(t *testing.T) {
	for _, tt := range []struct {
		name  string
		setup func(e *env)
		want  string
	}{
		{"ssh identification", func(e *env) { e.srv.setMode(modeSilent) }, "sent no SSH identification within 50ms (a quarter of dial_timeout, 200ms)"},
		{"libvirt connect", func(e *env) { e.stub.setMode(stubHang) }, "dial_timeout (200ms) reached"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			tt.setup(e)
			e.cfg.DialTimeout = config.Duration(200 * time.Millisecond)
			c := e.checker()
			v := check(t, c, hostName, 2*time.Minute)
			// On a loaded machine dial_timeout may strike in an earlier
			// stage; the verdict is the same.
			if v.Reason != provider.ReasonTimeout || !strings.Contains(v.Message, tt.want) && !strings.Contains(v.Message, "dial_timeout (200ms) reached") {
				t.Errorf("reason %s (%s), want Timeout saying %q", v.Reason, v.Message, tt.want)
			}
		})
	}
}

func TestBackoffDelay(t *testing.T) {
	for failed, want := range []time.Duration{0, 0, 10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second, 2 * time.Minute, 2 * time.Minute} {
		if got := backoffDelay(failed); got != want {
			t.Errorf("backoffDelay(%d) = %s, want %s", failed, got, want)
		}
	}
	if got := backoffDelay(1000); got != backoffMax {
		t.Errorf("backoffDelay(1000) = %s, want %s", got, backoffMax)
	}
}

// TestFailedDialsBackOff: the second failed dial in a row holds the host
// back for backoffBase (the engine serves its last verdict meanwhile), a
// broken key file does not (it takes no dial slot), and a dial that works
// clears the backoff.
func TestFailedDialsBackOff(t *testing.T) {
	e := newEnv(t)
	e.srv.setMode(modeEOF)
	c := e.checker()
	notBefore := func() time.Time { return c.NotBefore(hostName) }
	if v := check(t, c, hostName, time.Minute); v.Reason != ReasonSSHHandshakeFailed {
		t.Fatalf("reason %s (%s), want SSHHandshakeFailed", v.Reason, v.Message)
	}
	if !notBefore().IsZero() {
		t.Errorf("after one failed dial: not before %v, want no backoff", notBefore())
	}
	before := time.Now()
	if v := check(t, c, hostName, time.Minute); v.Reason != ReasonSSHHandshakeFailed {
		t.Fatalf("reason %s (%s), want SSHHandshakeFailed", v.Reason, v.Message)
	}
	after := time.Now()
	if nb := notBefore(); nb.Before(before.Add(backoffBase)) || nb.After(after.Add(backoffBase)) {
		t.Errorf("after two failed dials: not before %v, want %s after the dial (between %v and %v)", nb, backoffBase, before.Add(backoffBase), after.Add(backoffBase))
	}
	e.srv.setMode(modeSSH)
	if v := check(t, c, hostName, time.Minute); v.Reason != provider.ReasonReady {
		t.Fatalf("reason %s (%s), want Ready", v.Reason, v.Message)
	}
	if !notBefore().IsZero() {
		t.Errorf("after a dial that worked: not before %v, want no backoff", notBefore())
	}

	m := newEnv(t)
	os.Remove(m.knownHosts)
	cm := m.checker()
	for range 3 {
		if v := check(t, cm, hostName, time.Minute); v.Reason != ReasonSSHMaterialInvalid {
			t.Fatalf("reason %s (%s), want SSHMaterialInvalid", v.Reason, v.Message)
		}
	}
	if nb := cm.NotBefore(hostName); !nb.IsZero() {
		t.Errorf("after failures to read the material: not before %v, want no backoff", nb)
	}
	// A host whose checks end before its dial does (here budgets shorter
	// than dial_timeout) is not backed off: its one dial has not failed
	// yet, it goes on after the checks.
	s := newEnv(t)
	s.srv.setMode(modeSilent)
	s.cfg.DialTimeout = config.Duration(10 * time.Minute)
	cs := s.checker()
	for range 3 {
		if v := check(t, cs, hostName, 200*time.Millisecond); v.Reason != provider.ReasonTimeout {
			t.Fatalf("reason %s (%s), want Timeout", v.Reason, v.Message)
		}
	}
	if nb := cs.NotBefore(hostName); !nb.IsZero() {
		t.Errorf("after checks that ended before their dial: not before %v, want no backoff", nb)
	}
	if got := s.srv.accepted.Load(); got != 1 {
		t.Errorf("dials = %d, want 1: the later checks join the dial the first one started", got)
	}
	if nb := c.NotBefore("no such host"); !nb.IsZero() {
		t.Errorf("unknown host: not before %v", nb)
	}
}

// TestDialOutlivesItsCheck: a dial that takes longer than the check that
// started it goes on after that check gave up with Timeout, and the next
// check finds its connection kept: one dial, not one per scrape.
func TestDialOutlivesItsCheck(t *testing.T) {
	e := newEnv(t)
	gate := make(chan struct{})
	e.fake.set(func(f *fakeLibvirt) { f.gate = gate })
	e.cfg.DialTimeout = config.Duration(10 * time.Minute)
	c := e.checker()
	released := false
	release := func() {
		if !released {
			released = true
			close(gate)
		}
	}
	t.Cleanup(release) // before Close, which waits for the dial

	v := check(t, c, hostName, 200*time.Millisecond)
	if v.Reason != provider.ReasonTimeout || !strings.Contains(v.Message, "the dial goes on after this check") {
		t.Fatalf("check while the dial is held: reason %s (%s), want Timeout saying the dial goes on", v.Reason, v.Message)
	}
	release()
	v = check(t, c, hostName, 2*time.Minute)
	if v.Reason != provider.ReasonReady {
		t.Fatalf("next check: reason %s (%s), want Ready", v.Reason, v.Message)
	}
	if got, connects := e.srv.accepted.Load(), factsOf(t, v).Connects; got != 1 || connects != 1 {
		t.Errorf("dials = %d, connects = %d; want 1 and 1: the second check uses the first one's dial", got, connects)
	}
	if n := e.fake.callCounts()["ConnectToURI"]; n != 1 {
		t.Errorf("ConnectToURI called %d times, want 1", n)
	}
}
