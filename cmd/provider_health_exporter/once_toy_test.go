//go:build toykind

package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCheckOnceSurviveLoss runs the real binary's --check.once on toy
// entries whose answers give a capacity and domains (internal/toykind:
// X-Toy-Capacity, X-Toy-Domain): zone-a's loss leaves 2 proxies without a
// place, zone-b's leaves room for 1, zone-c's after-loss is unknown (a
// KVM host's case). Without --check.survive-loss the entry passes; with
// it, it fails naming zone-a alone; an entry whose domains all survive
// passes either way.
func TestCheckOnceSurviveLoss(t *testing.T) {
	t.Parallel()
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Toy-Capacity", "5")
		switch r.URL.Path {
		case "/trap":
			w.Header().Add("X-Toy-Domain", "zone-a 3 2 -2")
			w.Header().Add("X-Toy-Domain", "zone-b 4 1 1")
			w.Header().Add("X-Toy-Domain", "zone-c 2 0 -")
		case "/spread":
			w.Header().Add("X-Toy-Domain", "zone-a 3 1 0")
			w.Header().Add("X-Toy-Domain", "zone-b 2 1 3")
		}
	}))
	t.Cleanup(backend.Close)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "provider_health.yml")
	writeFile(t, cfg, "toy:\n  - name: trap\n    url: "+backend.URL+"/trap\n  - name: spread\n    url: "+backend.URL+"/spread\n")

	t.Run("domains listed, loss not asked", func(t *testing.T) {
		t.Parallel()
		code, out, errOut := runOnceBinary(t, dir, "--config.file="+cfg, "--check.entry=trap")
		if code != 0 {
			t.Fatalf("exit %d, want 0\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
		}
		want := [][]string{
			{"ENTRY", "TARGET", "REASON", "CAPACITY", "BINDING", "RESULT"},
			{"toy/trap", "url", "Ready", "5", "toy", "ok"},
			{"DOMAIN", "CAPACITY", "PROXIES", "AFTER-LOSS"},
			{"zone-a", "3", "2", "-2"},
			{"zone-b", "4", "1", "1"},
			{"zone-c", "2", "0", "-"},
		}
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if len(lines) != len(want) {
			t.Fatalf("stdout: %d lines, want %d:\n%s", len(lines), len(want), out)
		}
		for i, l := range lines {
			if got := strings.Join(strings.Fields(l), " "); got != strings.Join(want[i], " ") {
				t.Errorf("line %d %q, want %q", i, got, strings.Join(want[i], " "))
			}
		}
	})
	t.Run("survive-loss fails naming the domain", func(t *testing.T) {
		t.Parallel()
		code, _, errOut := runOnceBinary(t, dir, "--config.file="+cfg, "--check.survive-loss")
		if code != 1 {
			t.Fatalf("exit %d, want 1\nstderr:\n%s", code, errOut)
		}
		fl := failLines(errOut)
		if len(fl) != 1 || !strings.HasPrefix(fl[0], "FAIL toy/trap target url: losing domain zone-a leaves 2 proxies without a place") {
			t.Errorf("stderr: want one line naming trap and zone-a:\n%s", errOut)
		}
	})
	t.Run("survive-loss passes when every domain survives", func(t *testing.T) {
		t.Parallel()
		if code, out, errOut := runOnceBinary(t, dir, "--config.file="+cfg, "--check.survive-loss", "--check.entry=spread"); code != 0 {
			t.Fatalf("exit %d, want 0\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
		}
	})
	t.Run("json", func(t *testing.T) {
		t.Parallel()
		code, out, errOut := runOnceBinary(t, dir, "--config.file="+cfg, "--check.entry=trap", "--check.survive-loss", "--check.format=json")
		if code != 1 {
			t.Fatalf("exit %d, want 1\nstderr:\n%s", code, errOut)
		}
		var rep onceReport
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("JSON: %v\n%s", err, out)
		}
		if len(rep.Targets) != 1 || len(rep.Targets[0].Domains) != 3 {
			t.Fatalf("JSON: want one target with 3 domains:\n%s", out)
		}
		d := rep.Targets[0].Domains
		if d[0].Name != "zone-a" || d[0].Capacity != 3 || d[0].Proxies != 2 || d[0].AfterLoss == nil || *d[0].AfterLoss != -2 || d[2].AfterLoss != nil {
			t.Errorf("domains %+v: want zone-a 3 2 -2 and zone-c without afterLoss", d)
		}
		if strings.Count(out, `"afterLoss"`) != 2 {
			t.Errorf("JSON: want afterLoss on the two domains that have one:\n%s", out)
		}
	})
}

// TestCheckOnceInterrupted: SIGINT while a check waits on a server that
// never answers (its entry's timeout is 5 minutes) ends the run at once:
// the target reads Timeout, stderr says the run was interrupted, and the
// exit status is 130. The signal is sent once the check has connected,
// so it can only reach the run's handler.
func TestCheckOnceInterrupted(t *testing.T) {
	t.Parallel()
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { silent.Close() })
	connected := make(chan net.Conn, 1)
	go func() {
		c, err := silent.Accept()
		if err != nil {
			return
		}
		connected <- c
	}()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "provider_health.yml")
	writeFile(t, cfg, "toy:\n  - name: stuck\n    timeout: 5m\n    url: http://"+silent.Addr().String()+"/\n")

	cmd := exec.Command(binary(t), "--check.once", "--config.file="+cfg)
	cmd.Env = append(os.Environ(), "HOME="+dir, "GCE_METADATA_HOST=127.0.0.1:1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errOut syncBuffer
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	select {
	case c := <-connected:
		defer c.Close()
	case <-time.After(2 * time.Minute):
		// A guard against a hang, not a measure of speed.
		t.Fatalf("the check never connected; stderr:\n%s", errOut.String())
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	var lines []string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		lines = append(lines, strings.Join(strings.Fields(sc.Text()), " "))
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 130 {
		t.Fatalf("exit %v, want status 130; stderr:\n%s", err, errOut.String())
	}
	if len(lines) != 2 || lines[1] != "toy/stuck url Timeout - - FAIL" {
		t.Errorf("stdout %q: want the target as Timeout", lines)
	}
	if !strings.Contains(errOut.String(), "interrupted") || len(failLines(errOut.String())) != 1 {
		t.Errorf("stderr: want the failure and the interruption:\n%s", errOut.String())
	}
}
