package kvm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// age sets the modification time of path to ago in the past, out of the
// window in which a stamp is not trusted.
func age(t testing.TB, path string, ago time.Duration) {
	t.Helper()
	when := time.Now().Add(-ago)
	if err := os.Chtimes(path, when, when); err != nil {
		t.Fatal(err)
	}
}

// TestMaterialSharedByHosts: the hosts of an entry dialing at once (a cold
// start) parse known_hosts and read the key once between them.
func TestMaterialSharedByHosts(t *testing.T) {
	e := newEnv(t)
	age(t, e.knownHosts, time.Hour)
	age(t, e.keyFile, time.Hour)
	const n = 8
	e.cfg.Hosts = nil
	for i := range n {
		e.cfg.Hosts = append(e.cfg.Hosts, &Host{
			Address:      e.srv.addr,
			Name:         fmt.Sprintf("h%d", i),
			HostSettings: &HostSettings{User: "proxyops", Pool: DefaultPool, PrivateKeyFile: e.keyFile},
		})
	}
	c := e.checker()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for _, h := range e.cfg.Hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if v := c.Check(ctx, testLogger(t), h.Name); v.Reason != provider.ReasonReady {
				t.Errorf("%s: reason %s (%s), want Ready", h.Name, v.Reason, v.Message)
			}
		}()
	}
	wg.Wait()
	if got := e.srv.accepted.Load(); got != n {
		t.Errorf("dials = %d, want %d", got, n)
	}
	if got := c.material.knownHostsParses.Load(); got != 1 {
		t.Errorf("known_hosts parsed %d times for %d hosts, want 1", got, n)
	}
	if got := c.material.keyLoads.Load(); got != 1 {
		t.Errorf("key file read %d times for %d hosts, want 1", got, n)
	}
}

// TestKnownHostsRotation: a known_hosts changed in place or replaced by a
// rename is parsed again on the next dial, without a reload, even when its
// size and modification time stay the same; a file just modified is not
// trusted to be unchanged.
func TestKnownHostsRotation(t *testing.T) {
	e := newEnv(t)
	good := knownHostsLine(e.srv.addr, e.srv.hostKey.PublicKey())
	wrongA := knownHostsLine(e.srv.addr, randomKey(t))
	wrongB := knownHostsLine(e.srv.addr, randomKey(t))
	if len(good) != len(wrongA) || len(good) != len(wrongB) {
		t.Fatal("the known_hosts lines differ in size; the test needs them equal")
	}
	c := e.checker()
	parses := func() int64 { return c.material.knownHostsParses.Load() }
	expect := func(step string, want provider.Reason, wantParses int64) {
		t.Helper()
		if v := check(t, c, hostName, time.Minute); v.Reason != want {
			t.Fatalf("%s: reason %s (%s), want %s", step, v.Reason, v.Message, want)
		}
		if got := parses(); got != wantParses {
			t.Fatalf("%s: known_hosts parsed %d times in all, want %d", step, got, wantParses)
		}
	}

	e.writeKnownHosts(wrongA)
	age(t, e.knownHosts, time.Hour)
	expect("first dial", ReasonHostKeyMismatch, 1)
	expect("unchanged file", ReasonHostKeyMismatch, 1)

	// Edited in place: same inode and size, another modification time.
	e.writeKnownHosts(wrongB)
	age(t, e.knownHosts, 30*time.Minute)
	expect("edited in place", ReasonHostKeyMismatch, 2)
	expect("unchanged after the edit", ReasonHostKeyMismatch, 2)

	// Replaced by a rename: same size and modification time, another inode.
	fi, err := os.Stat(e.knownHosts)
	if err != nil {
		t.Fatal(err)
	}
	tmp := e.knownHosts + ".new"
	if err := os.WriteFile(tmp, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(tmp, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, e.knownHosts); err != nil {
		t.Fatal(err)
	}
	expect("replaced by a rename", provider.ReasonReady, 3)
}

// TestKnownHostsJustModified: a file modified within the racy window is
// read again on dials racyRecheck apart, so an edit in the same clock tick
// as the last read (same size, same modification time) is not missed; it
// is parsed again
// only when what it holds changed, so the hosts dialing meanwhile share
// one parse.
func TestKnownHostsJustModified(t *testing.T) {
	e := newEnv(t)
	// Modified "now" for as long as the test runs, however slow it is.
	future := time.Now().Add(time.Hour)
	write := func(line string) {
		t.Helper()
		e.writeKnownHosts(line)
		if err := os.Chtimes(e.knownHosts, future, future); err != nil {
			t.Fatal(err)
		}
	}
	write(knownHostsLine(e.srv.addr, randomKey(t)))
	c := e.checker()
	for i := range 3 {
		if v := check(t, c, hostName, time.Minute); v.Reason != ReasonHostKeyMismatch {
			t.Fatalf("check %d: reason %s (%s), want HostKeyMismatch", i, v.Reason, v.Message)
		}
	}
	if got := c.material.knownHostsParses.Load(); got != 1 {
		t.Errorf("known_hosts parsed %d times in 3 dials of an unchanged file, want 1", got)
	}
	right := knownHostsLine(e.srv.addr, e.srv.hostKey.PublicKey())
	fi, err := os.Stat(e.knownHosts)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(right)) != fi.Size() {
		t.Fatalf("the fixed line has %d bytes, the broken one %d: the edit must keep the size", len(right), fi.Size())
	}
	write(right)
	// However slow the machine, the next dial is later than this.
	time.Sleep(racyRecheck)
	if v := check(t, c, hostName, time.Minute); v.Reason != provider.ReasonReady {
		t.Fatalf("after an edit of the same size and time: reason %s (%s), want Ready", v.Reason, v.Message)
	}
	if got := c.material.knownHostsParses.Load(); got != 2 {
		t.Errorf("known_hosts parsed %d times, want 2: once more after the edit", got)
	}
}

// TestStampedRacyRecheck: while a file is within the racy window it is
// read again at most every racyRecheck when its stat is unchanged (a cold
// start does not read it once per dial), and always when its stat changed.
func TestStampedRacyRecheck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "f")
		// The bubble's clock starts in 2000: a file modified now is in
		// the future for it, inside the racy window throughout.
		write := func(s string) {
			t.Helper()
			if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
				t.Fatal(err)
			}
			mtime := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
			if err := os.Chtimes(path, mtime, mtime); err != nil {
				t.Fatal(err)
			}
		}
		var st stamped[string]
		loads := 0
		get := func() string {
			t.Helper()
			v, err := st.get([]string{path}, func() (string, error) {
				loads++
				b, err := os.ReadFile(path)
				return string(b), err
			})
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		write("aaaa")
		if v := get(); v != "aaaa" || loads != 1 {
			t.Fatalf("first get: %q after %d loads", v, loads)
		}
		write("bbbb") // same size, same modification time
		if v := get(); v != "aaaa" {
			t.Fatalf("an edit that changed no stat within racyRecheck: %q, want the kept value", v)
		}
		time.Sleep(racyRecheck)
		if v := get(); v != "bbbb" || loads != 2 {
			t.Fatalf("racyRecheck later: %q after %d loads, want the edit, loaded once more", v, loads)
		}
		write("cccccc") // another size: read at once
		if v := get(); v != "cccccc" || loads != 3 {
			t.Fatalf("an edit that changed the size: %q after %d loads", v, loads)
		}
		time.Sleep(racyRecheck)
		if v := get(); v != "cccccc" || loads != 3 {
			t.Fatalf("read again, unchanged: %q after %d loads, want no new load", v, loads)
		}
	})
}
