package kvm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/digitalocean/go-libvirt"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// TestMisbehavingLibvirtPeer: a host whose libvirt peer sends a broken frame
// gets a verdict naming the problem and has its connection closed, the
// process stays up and allocates nothing like what the frame claims, and a
// healthy host checked by the same checker keeps its verdict and its
// connection. Both hosts sit behind in-process SSH servers; the libvirt
// client is the exporter's own.
func TestMisbehavingLibvirtPeer(t *testing.T) {
	e := newEnv(t)
	bad := NewFakeLibvirtd(t)
	good := NewFakeLibvirtd(t)
	badSrv := newSSHServer(t, e.key.PublicKey(), bad.Path())
	goodSrv := newSSHServer(t, e.key.PublicKey(), good.Path())
	e.writeKnownHosts(knownHostsLine(badSrv.addr, badSrv.hostKey.PublicKey()) +
		knownHostsLine(goodSrv.addr, goodSrv.hostKey.PublicKey()))
	// Each host is its own entry here only because the socket path is
	// per entry; one checker per entry, as the engine makes them.
	newChecker := func(addr, socket string, promised ...Promised) *Checker {
		cfg := *e.cfg
		cfg.LibvirtSocket = socket
		cfg.Hosts = []*Host{{Address: addr, Name: hostName, HostSettings: &HostSettings{User: "proxyops", Pool: "default", PrivateKeyFile: e.keyFile}}}
		if len(promised) > 0 && !promised[0].counts() {
			// The proxies' count: a glob, and a capacity for the
			// domain to have.
			cfg.Hosts[0].ProxyVMName, cfg.Hosts[0].MinPoolAvailableBytes = "proxy-*", 1<<30
		} else if len(promised) > 0 {
			// The fake's host and pool leave room for one proxy of 1
			// vCPU, 1 GiB and 1 GiB at these ratios.
			cfg.Hosts[0].Promised = &promised[0]
			cfg.Hosts[0].MinFreeMemoryBytes, cfg.Hosts[0].MinPoolAvailableBytes = 1<<30, 1<<30
		}
		c, err := New(&cfg, testLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	goodC := newChecker(goodSrv.addr, good.Path())

	if v := check(t, goodC, hostName, 10*time.Second); v.Reason != provider.ReasonReady {
		t.Fatalf("healthy host: %s (%s), want Ready", v.Reason, v.Message)
	}

	type tc struct {
		fault Fault
		proc  uint32
		want  provider.Reason
		msg   string
	}
	var cases []tc
	for _, f := range []Fault{FaultZeroLength, FaultHugeLength, FaultTruncated, FaultWrongProgram, FaultWrongProcedure, FaultGarbageXDR} {
		// The first call of a dial, the first of a check on a new
		// connection, and the one of a check on a kept connection.
		dialWant, poolWant, msg := provider.ReasonUnknown, ReasonLibvirtConnectionLost, "malformed libvirt frame"
		if f == FaultTruncated {
			dialWant, msg = provider.ReasonUnreachable, "cut off"
		}
		cases = append(cases,
			tc{f, procAuthList, dialWant, msg},
			tc{f, procStoragePoolLookupByName, poolWant, msg},
			tc{f, procStoragePoolGetInfo, poolWant, msg},
			// The promised-resource calls: NodeGetInfo on a new
			// connection, the others on a kept one.
			tc{f, procNodeGetInfo, poolWant, msg},
			tc{f, procConnectGetAllDomainStats, poolWant, msg},
			tc{f, procStoragePoolListAllVolumes, poolWant, msg},
			tc{f, procStorageVolGetInfo, poolWant, msg},
			// The proxies' count, on a kept connection.
			tc{f, procConnectListAllDomains, poolWant, msg})
	}
	promised := map[uint32]bool{procNodeGetInfo: true, procConnectGetAllDomainStats: true, procStoragePoolListAllVolumes: true, procStorageVolGetInfo: true}
	for _, tt := range cases {
		t.Run(fmt.Sprintf("%s/proc%d", FaultNames[tt.fault], tt.proc), func(t *testing.T) {
			badC := newChecker(badSrv.addr, bad.Path())
			if promised[tt.proc] {
				badC = newChecker(badSrv.addr, bad.Path(), Promised{VCPUs: 1, CPURatio: 4, MemoryRatio: 1, DiskRatio: 2})
			}
			if tt.proc == procConnectListAllDomains {
				badC = newChecker(badSrv.addr, bad.Path(), Promised{})
			}
			if tt.proc == procStoragePoolGetInfo || tt.proc == procConnectListAllDomains || promised[tt.proc] && tt.proc != procNodeGetInfo {
				// The pool's info goes over a kept connection; its
				// lookup is the first call on a new one.
				if v := check(t, badC, hostName, 10*time.Second); v.Reason != provider.ReasonReady {
					t.Fatalf("before the fault: %s (%s), want Ready", v.Reason, v.Message)
				}
			}
			faults := bad.Faults()
			bad.SetFault(tt.fault, tt.proc)
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			v := check(t, badC, hostName, 10*time.Second)
			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			if v.Reason != tt.want || !strings.Contains(v.Message, tt.msg) {
				t.Errorf("bad host: %s (%s), want %s with %q", v.Reason, v.Message, tt.want, tt.msg)
			}
			if bad.Faults() != faults+1 {
				t.Fatal("the fake libvirtd sent no broken reply")
			}
			// A client that trusted the frame would allocate what it or a
			// length inside it claims: 4 GiB or 2 GiB.
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
				t.Errorf("the check allocated %d MiB", grew>>20)
			}
			waitFor(t, "the broken connection to be closed", func() bool { return bad.Conns() == 0 })

			if v := check(t, goodC, hostName, 10*time.Second); v.Reason != provider.ReasonReady || factsOf(t, v).Connects != 1 {
				t.Errorf("healthy host: %s (%s), connects %d, want Ready on its first connection", v.Reason, v.Message, factsOf(t, v).Connects)
			}
			bad.SetFault(FaultNone, 0)
			if v := check(t, badC, hostName, 10*time.Second); v.Reason != provider.ReasonReady {
				t.Errorf("repaired host: %s (%s), want Ready", v.Reason, v.Message)
			}
			badC.Close()
			waitFor(t, "the repaired host's connection to be closed", func() bool { return bad.Conns() == 0 })
		})
	}
}

// waitFor polls cond; the bound is generous because it only catches a
// condition that never comes.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFrameConn checks single frames against the calls in flight.
func TestFrameConn(t *testing.T) {
	ok := func(proc uint32) []byte {
		status, payload := answer(proc)
		return replyFrame(remoteProgram, proc, 7, status, payload)
	}
	frame := func(mod func(w *xdrWriter)) []byte {
		w := xdrWriter{}
		mod(&w)
		return w.b
	}
	for _, tt := range []struct {
		name  string
		reply []byte
		want  string // "" = passes unchanged
	}{
		{"pool info", ok(procStoragePoolGetInfo), ""},
		{"error reply", replyFrame(remoteProgram, procStoragePoolGetInfo, 7, statusError, errorPayload(49, "no pool")), ""},
		{"zero length", BrokenReply(FaultZeroLength, procStoragePoolGetInfo, 7), "length 0 is below"},
		{"length 27", frame(func(w *xdrWriter) { w.u32(27) }), "length 27 is below"},
		{"huge length", BrokenReply(FaultHugeLength, procStoragePoolGetInfo, 7), "above libvirt's maximum"},
		{"above any reply", frame(func(w *xdrWriter) { w.u32(maxListReplyLen + 1) }), "above the 1048580 bytes"},
		{"above a pool info reply", replyFrame2(func(h []uint32) { h[0] = maxReplyLen + 1 }), "above the 65540 bytes of any reply to StoragePoolGetInfo"},
		{"wrong program", BrokenReply(FaultWrongProgram, procStoragePoolGetInfo, 7), "program 0x20008087"},
		{"wrong version", replyFrame2(func(h []uint32) { h[2] = 2 }), "protocol version 2"},
		{"a call", replyFrame2(func(h []uint32) { h[4] = frameCall }), "message type 0"},
		{"bad status", replyFrame2(func(h []uint32) { h[6] = 2 }), "reply status 2"},
		{"unknown serial", replyFrame(remoteProgram, procStoragePoolGetInfo, 8, statusOK, nil), "serial 8 answers no call"},
		{"wrong procedure", BrokenReply(FaultWrongProcedure, procStoragePoolGetInfo, 7), "names procedure 318"},
		{"garbage pool info", BrokenReply(FaultGarbageXDR, procStoragePoolGetInfo, 7), "3735928559 where an unsigned char is due"},
		{"short pool info", replyFrame(remoteProgram, procStoragePoolGetInfo, 7, statusOK, make([]byte, 20)), "4-byte word is due"},
		{"long pool info", replyFrame(remoteProgram, procStoragePoolGetInfo, 7, statusOK, make([]byte, 32)), "4 bytes after its value"},
		{"error with a huge message", replyFrame(remoteProgram, procStoragePoolGetInfo, 7, statusError, frame(func(w *xdrWriter) { w.u32(1, 0, 1, 0x7ffffff0) })), "error message of 2147483632 bytes"},
		{"truncated", BrokenReply(FaultTruncated, procStoragePoolGetInfo, 7), "cut off after 36"},
		{"cut in the header", ok(procStoragePoolGetInfo)[:10], "cut off in its header"},
		{"cut in the length", ok(procStoragePoolGetInfo)[:2], "cut off in its length"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fc := newFrameConn(&scriptConn{r: bytes.NewReader(tt.reply)})
			if _, err := fc.Write(callFrame(procStoragePoolGetInfo, 7, make([]byte, 24))); err != nil {
				t.Fatal(err)
			}
			r, err := fc.next()
			if tt.want == "" {
				if err != nil || r.proc != procStoragePoolGetInfo {
					t.Fatalf("got %+v, %v; want the reply let through", r, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err %v, want %q", err, tt.want)
			}
			if !errors.Is(fc.violation(), err) {
				t.Errorf("violation %v, want %v", fc.violation(), err)
			}
			if _, again := fc.next(); !errors.Is(again, err) {
				t.Errorf("a later read: %v, want the violation again", again)
			}
		})
	}
}

// replyFrame2 is a pool info reply to serial 7 with its header words
// (length, program, version, procedure, type, serial, status) changed.
func replyFrame2(mod func(h []uint32)) []byte {
	_, payload := answer(procStoragePoolGetInfo)
	h := []uint32{uint32(minFrameLen + len(payload)), remoteProgram, remoteProtocolVersion, procStoragePoolGetInfo, frameReply, 7, statusOK}
	mod(h)
	w := xdrWriter{}
	w.u32(h...)
	return append(w.b, payload...)
}

// scriptConn is a net.Conn whose peer sends r and then hangs up, and which
// swallows writes.
type scriptConn struct {
	net.Conn
	r      io.Reader
	closed bool
}

func (c *scriptConn) Read(p []byte) (int, error)  { return c.r.Read(p) }
func (c *scriptConn) Write(p []byte) (int, error) { return len(p), nil }
func (c *scriptConn) Close() error                { c.closed = true; return nil }

// TestFrameConnWritesSplit: calls written in pieces of any size are matched.
func TestFrameConnWritesSplit(t *testing.T) {
	var stream []byte
	for serial := int32(1); serial <= 3; serial++ {
		stream = append(stream, callFrame(procConnectGetLibVersion, serial, make([]byte, serial*5))...)
	}
	for _, size := range []int{1, 3, 27, 28, 29, len(stream)} {
		fc := newFrameConn(&scriptConn{r: bytes.NewReader(nil)})
		for b := stream; len(b) > 0; {
			n := min(size, len(b))
			if _, err := fc.Write(b[:n]); err != nil {
				t.Fatal(err)
			}
			b = b[n:]
		}
		if len(fc.calls) != 3 || fc.calls[2] != procConnectGetLibVersion {
			t.Errorf("writes of %d bytes: calls %v, want serials 1-3 of procedure %d", size, fc.calls, procConnectGetLibVersion)
		}
	}
}

// FuzzFrameConn: whatever the peer sends, the frame checker never panics and
// hands the client only frames within libvirt's bounds that answer a call in
// flight.
func FuzzFrameConn(f *testing.F) {
	for _, proc := range []uint32{procAuthList, procConnectOpen, procConnectGetLibVersion, procStoragePoolLookupByName, procStoragePoolGetInfo,
		procNodeGetInfo, procConnectGetAllDomainStats, procStoragePoolListAllVolumes, procStorageVolGetInfo, procConnectListAllDomains} {
		status, payload := answer(proc)
		f.Add(proc, replyFrame(remoteProgram, proc, 1, status, payload))
		for fault := range FaultNames {
			f.Add(proc, BrokenReply(fault, proc, 1))
		}
	}
	f.Add(uint32(procStoragePoolGetInfo), replyFrame(remoteProgram, procStoragePoolGetInfo, 1, statusError, errorPayload(49, "no pool")))
	f.Fuzz(func(t *testing.T, proc uint32, stream []byte) {
		fc := newFrameConn(&scriptConn{r: bytes.NewReader(stream)})
		if _, err := fc.Write(callFrame(proc, 1, nil)); err != nil {
			t.Fatal(err)
		}
		r, err := fc.next()
		if err != nil {
			return
		}
		// One call in flight: the reply let through answers it, and
		// decodes by its shape.
		if r.proc != proc {
			t.Fatalf("passed a reply to procedure %d for a call of %d", r.proc, proc)
		}
		if _, err := fc.next(); err == nil {
			t.Fatal("a second frame passed with no call in flight")
		}
	})
}

// FuzzLibvirtReply: the libvirt client, behind the frame checker, decodes
// any reply to the calls a check makes without panicking, and returns.
func FuzzLibvirtReply(f *testing.F) {
	for _, proc := range []uint32{procAuthList, procAuthPolkit, procConnectGetLibVersion, procStoragePoolLookupByName, procStoragePoolGetInfo,
		procNodeGetFreeMemory, procStorageVolLookupByName, procNetworkLookupByName, procNetworkIsActive,
		procNodeGetInfo, procConnectGetAllDomainStats, procStoragePoolListAllVolumes, procStorageVolGetInfo, procConnectListAllDomains} {
		_, payload := answerTo(proc, "default", nil)
		f.Add(proc, uint32(statusOK), payload)
		f.Add(proc, uint32(statusError), errorPayload(49, "no pool"))
		b := BrokenReply(FaultGarbageXDR, proc, 1)
		f.Add(proc, uint32(statusOK), b[minFrameLen:])
	}
	f.Fuzz(func(t *testing.T, proc, status uint32, payload []byte) {
		if len(payload) > maxListReplyLen {
			return
		}
		client, server := net.Pipe()
		defer client.Close()
		go func() {
			defer server.Close()
			for {
				var hb [minFrameLen]byte
				if _, err := io.ReadFull(server, hb[:]); err != nil {
					return
				}
				h := parseHeader(hb[:])
				if _, err := io.CopyN(io.Discard, server, int64(h.length)-minFrameLen); err != nil {
					return
				}
				st, p := answerTo(h.procedure, "default", nil)
				if h.procedure == proc {
					st, p = status, payload
				}
				if _, err := server.Write(replyFrame(remoteProgram, h.procedure, h.serial, st, p)); err != nil {
					return
				}
			}
		}()
		lv := newLibvirtClient(client)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		stop := context.AfterFunc(ctx, func() { client.Close() })
		defer stop()
		if err := lv.ConnectToURI(libvirt.QEMUSystem); err != nil {
			return
		}
		if _, err := lv.ConnectGetLibVersion(); err != nil {
			return
		}
		p, err := lv.StoragePoolLookupByName("default")
		if err != nil {
			return
		}
		_, _, _, _, _ = lv.StoragePoolGetInfo(p)
		_, _ = lv.NodeGetFreeMemory()
		_, _ = lv.StorageVolLookupByName(p, "base.qcow2")
		if n, err := lv.NetworkLookupByName("default"); err == nil {
			_, _ = lv.NetworkIsActive(n)
		}
		_, _ = lv.NodeGetInfo()
		_, _ = lv.ConnectGetAllDomainStats()
		_, _ = lv.ConnectListAllDomains()
		if vols, err := lv.StoragePoolListAllVolumes(p); err == nil && len(vols) > 0 {
			_, _ = lv.StorageVolGetInfo(vols[0])
		}
		if ctx.Err() != nil {
			t.Fatal("the client did not return")
		}
	})
}

// TestFrameErrorsLeakNoSecret: the verdicts and debug logs of checks that
// meet a broken libvirt peer name the fault, never the key material or the
// passphrase the connection was made with.
func TestFrameErrorsLeakNoSecret(t *testing.T) {
	e := newEnv(t)
	fake := NewFakeLibvirtd(t)
	srv := newSSHServer(t, nil, fake.Path())
	signer := writeEncryptedKey(t, e.keyFile)
	srv.authorize(signer.PublicKey())
	passFile := filepath.Join(e.dir, "passphrase")
	if err := os.WriteFile(passFile, []byte(testPassphrase+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.writeKnownHosts(knownHostsLine(srv.addr, srv.hostKey.PublicKey()))
	cfg := *e.cfg
	cfg.LibvirtSocket = fake.Path()
	cfg.PassphraseFile = passFile
	cfg.Hosts = []*Host{{Address: srv.addr, Name: hostName, HostSettings: &HostSettings{User: "proxyops", Pool: "default", PrivateKeyFile: e.keyFile}}}
	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, err := New(&cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })

	var messages []string
	run := func() {
		ctx, cancel := context.WithTimeout(context.Background(), slowKDF)
		defer cancel()
		messages = append(messages, c.Check(ctx, logger, hostName).Message)
	}
	fake.SetFault(FaultZeroLength, procAuthList)
	run()
	fake.SetFault(FaultNone, 0)
	run()
	fake.SetFault(FaultGarbageXDR, procStoragePoolGetInfo)
	run()
	if !strings.Contains(messages[0], "malformed libvirt frame") || !strings.Contains(messages[2], "malformed libvirt frame") {
		t.Fatalf("messages %q: the faults were not met", messages)
	}
	pem, err := os.ReadFile(e.keyFile)
	if err != nil {
		t.Fatal(err)
	}
	secrets := []string{testPassphrase}
	for _, line := range strings.Split(string(pem), "\n") {
		if len(line) > 16 && !strings.HasPrefix(line, "-----") {
			secrets = append(secrets, line)
		}
	}
	out := logs.String() + strings.Join(messages, "\n")
	for _, s := range secrets {
		if strings.Contains(out, s) {
			t.Errorf("%q appears in the logs or verdicts", s)
		}
	}
}

// syncBuffer collects log output written from several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
