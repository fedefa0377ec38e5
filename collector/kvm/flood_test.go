package kvm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egress-proxies/provider_health_exporter/config"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

// floodMode is how a flooding libvirt peer pushes data nobody asked for,
// once it has answered a check's pool info: the fault of a hostile host,
// which a real libvirtd cannot be made to show.
type floodMode int

const (
	floodBulk   floodMode = iota // 32 KiB writes: full SSH packets
	floodBytes                   // 1-byte writes: one SSH packet per byte
	floodStderr                  // extended (stderr) data on the channel
)

func (m floodMode) String() string {
	return [...]string{"bulk", "bytes", "stderr"}[m]
}

// floodingLibvirtd answers a connection's calls as FakeLibvirtd does until
// it has answered StoragePoolGetInfo, then, once start is closed, pushes
// junk until the channel is closed. Its conn is the SSH channel itself
// (sshServer.answer).
func floodingLibvirtd(mode floodMode, start <-chan struct{}, pushed *int64, mu *sync.Mutex) func(net.Conn) {
	return func(c net.Conn) {
		for {
			var hb [minFrameLen]byte
			if _, err := io.ReadFull(c, hb[:]); err != nil {
				return
			}
			h := parseHeader(hb[:])
			body := make([]byte, int(h.length)-minFrameLen)
			if _, err := io.ReadFull(c, body); err != nil {
				return
			}
			status, payload := answerTo(h.procedure, firstString(body), body)
			if _, err := c.Write(replyFrame(remoteProgram, h.procedure, h.serial, status, payload)); err != nil {
				return
			}
			if h.procedure == procStoragePoolGetInfo {
				break
			}
		}
		<-start
		w := io.Writer(c)
		chunk := make([]byte, 32<<10)
		switch mode {
		case floodBytes:
			chunk = chunk[:1]
		case floodStderr:
			w = c.(channelConn).Stderr()
		}
		for i := range chunk {
			chunk[i] = 0xa5
		}
		for {
			n, err := w.Write(chunk)
			mu.Lock()
			*pushed += int64(n)
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}
}

// TestFloodingPeers: 40 hosts whose libvirt peer, after a Ready check,
// pushes data nobody asked for — in full packets, a byte per packet, or as
// stderr — lose their connection as soon as more than one reply's worth is
// unread (maxUnread), or at the first byte of stderr, instead of having
// x/crypto/ssh buffer a 2 MiB window each; their next check is
// LibvirtConnectionLost naming the flood, and a healthy host checked
// alongside keeps Ready on its one connection. The heap held once the
// floods are cut is a small part of what 40 windows would hold.
func TestFloodingPeers(t *testing.T) {
	const flooders = 40
	e := newEnv(t)
	fake := NewFakeLibvirtd(t)
	good := newSSHServer(t, e.key.PublicKey(), fake.Path())
	known := knownHostsLine(good.addr, good.hostKey.PublicKey())
	cfg := *e.cfg
	cfg.LibvirtSocket = fake.Path()
	cfg.MaxConcurrentDials = 64
	// 41 SSH handshakes at once under -race on a loaded machine can take
	// longer than the default 3 s: the first check must be Ready.
	cfg.DialTimeout = config.Duration(2 * time.Minute)
	cfg.Hosts = []*Host{{Address: good.addr, Name: "good", HostSettings: &HostSettings{User: "proxyops", Pool: "default", PrivateKeyFile: e.keyFile}}}
	var (
		mu     sync.Mutex
		pushed int64
		modes  = map[string]floodMode{}
		start  = make(chan struct{})
	)
	for i := range flooders {
		srv := newSSHServer(t, e.key.PublicKey(), fake.Path())
		mode := floodBulk
		switch {
		case i < 2: // each costs ~130,000 SSH packets
			mode = floodBytes
		case i%2 == 0:
			mode = floodStderr
		}
		srv.answer = floodingLibvirtd(mode, start, &pushed, &mu)
		name := fmt.Sprintf("flood-%02d", i)
		modes[name] = mode
		known += knownHostsLine(srv.addr, srv.hostKey.PublicKey())
		cfg.Hosts = append(cfg.Hosts, &Host{Address: srv.addr, Name: name, HostSettings: &HostSettings{User: "proxyops", Pool: "default", PrivateKeyFile: e.keyFile}})
	}
	// The flooders wait for start: a test that stops before it is closed
	// must still let them go, or the servers' cleanup waits for ever.
	release := sync.OnceFunc(func() { close(start) })
	t.Cleanup(release)
	e.writeKnownHosts(known)
	cfg.KnownHostsFile = filepath.Join(e.dir, "known_hosts")
	c, err := New(&cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })

	checkAll := func() map[string]provider.Verdict {
		var wg sync.WaitGroup
		var vmu sync.Mutex
		out := map[string]provider.Verdict{}
		for _, h := range cfg.Hosts {
			wg.Go(func() {
				v := check(t, c, h.Name, time.Minute)
				vmu.Lock()
				out[h.Name] = v
				vmu.Unlock()
			})
		}
		wg.Wait()
		return out
	}
	for name, v := range checkAll() {
		if v.Reason != provider.ReasonReady {
			t.Fatalf("%s: first check %s (%s), want Ready: the flood starts after it", name, v.Reason, v.Message)
		}
	}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	// Between checks: every flood is cut, and its connection let go,
	// without a check reading anything.
	release()
	waitFor(t, "every flooding host's connection to be let go", func() bool {
		for name := range modes {
			h := c.lookup(name)
			h.mu.Lock()
			s := h.sess
			h.mu.Unlock()
			if s != nil {
				return false
			}
		}
		return true
	})
	// What x/crypto/ssh had queued of a flood when its connection was
	// closed is let go as the connection winds down: 40 unread 2 MiB
	// windows would hold 80 MiB and more for good.
	var ms runtime.MemStats
	bound := before.HeapInuse + flooders*256<<10
	waitFor(t, "the floods' buffers to be let go", func() bool {
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapInuse < bound
	})
	mu.Lock()
	sent := pushed
	mu.Unlock()
	t.Logf("%d flooding hosts pushed %d KiB before being cut; heap in use %d KiB, %d KiB before the floods", flooders, sent>>10, ms.HeapInuse>>10, before.HeapInuse>>10)

	for name, v := range checkAll() {
		switch {
		case name == "good":
			if v.Reason != provider.ReasonReady || factsOf(t, v).Connects != 1 {
				t.Errorf("good: %s (%s), connects %d; want Ready on its first connection", v.Reason, v.Message, factsOf(t, v).Connects)
			}
		case v.Reason != ReasonLibvirtConnectionLost:
			t.Errorf("%s (%s): %s (%s), want LibvirtConnectionLost", name, modes[name], v.Reason, v.Message)
		case modes[name] == floodStderr && !strings.Contains(v.Message, "extended (stderr) data"),
			modes[name] != floodStderr && !strings.Contains(v.Message, "bytes that no call asked for, while no call awaited a reply"):
			t.Errorf("%s (%s): message %q does not name the flood", name, modes[name], v.Message)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if v := c.Check(ctx, testLogger(t), "flood-05"); v.Reason != ReasonLibvirtConnectionLost && v.Reason != provider.ReasonReady {
		t.Errorf("a flooding host's check after the lost one: %s (%s), want a new connection, Ready unless its flood comes first", v.Reason, v.Message)
	}
}

// pipeChannel is an SSH channel whose peer writes into data and stderr.
type pipeChannel struct {
	data, stderr *io.PipeReader
}

func (c pipeChannel) Read(p []byte) (int, error)  { return c.data.Read(p) }
func (c pipeChannel) Write(p []byte) (int, error) { return len(p), nil }
func (c pipeChannel) Close() error {
	c.data.Close()
	c.stderr.Close()
	return nil
}
func (c pipeChannel) CloseWrite() error                              { return nil }
func (c pipeChannel) SendRequest(string, bool, []byte) (bool, error) { return false, nil }
func (c pipeChannel) Stderr() io.ReadWriter {
	return struct {
		io.Reader
		io.Writer
	}{c.stderr, io.Discard}
}

// TestDrainedChannel: what a call awaits is handed out whole; data while
// no call awaits a reply, more than maxUnread unread while one does, or any
// stderr ends the channel with a floodError saying which.
func TestDrainedChannel(t *testing.T) {
	for _, tc := range []struct {
		name   string
		asked  bool
		limit  int // the unread bytes the call awaited allows
		data   int
		stderr bool
		want   string // "" = handed out
	}{
		{"a reply", true, maxUnread, 4096, false, ""},
		{"the largest reply", true, maxUnread, maxUnread, false, ""},
		{"more than any reply", true, maxUnread, maxUnread + 1, false, "sent 65541 bytes that no call asked for, more than the 65540 of any reply"},
		{"a list reply", true, maxListReplyLen, maxListReplyLen, false, ""},
		{"more than a list reply", true, maxListReplyLen, maxListReplyLen + 1, false, "sent 1048581 bytes that no call asked for, more than the 1048580 of any reply"},
		{"data while no call awaits", false, 0, 1, false, "sent 1 bytes that no call asked for, while no call awaited a reply"},
		{"stderr", true, maxUnread, 0, true, "extended (stderr) data"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dr, dw := io.Pipe()
			er, ew := io.Pipe()
			flooded := make(chan error, 2)
			d := newDrainedChannel(channelConn{Channel: pipeChannel{dr, er}}, func(err error) { flooded <- err })
			defer d.Close()
			d.askedBy(func() int {
				if tc.asked {
					return tc.limit
				}
				return 0
			})
			go func() {
				if tc.stderr {
					_, _ = ew.Write([]byte("x"))
					return
				}
				_, _ = dw.Write(make([]byte, tc.data))
			}()
			if tc.want == "" {
				got, err := io.ReadFull(d, make([]byte, tc.data))
				if err != nil || got != tc.data {
					t.Fatalf("read %d of %d bytes: %v", got, tc.data, err)
				}
				select {
				case err := <-flooded:
					t.Fatalf("flooded: %v", err)
				default:
				}
				return
			}
			// Bounded: a channel that never floods fails the test,
			// never hangs it.
			var err error
			select {
			case err = <-flooded:
			case <-time.After(time.Minute):
				t.Fatalf("no flood within a minute, want %q", tc.want)
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("flooded with %v, want %q", err, tc.want)
			}
			if _, rerr := d.Read(make([]byte, 16)); !errors.Is(rerr, err) {
				t.Errorf("a read after the flood: %v, want the flood's error", rerr)
			}
		})
	}
}
