//go:build browser

package main

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
	"testing"
	"time"
)

// demoReasons is what `make demo` sets up (docs/configuration.md: "Demo"):
// per entry, the reason of its one target.
var demoReasons = map[string]string{
	"kvm-lab": "Ready", "kvm-pool-full": "PoolFull", "kvm-host-key": "HostKeyMismatch", "kvm-promised": "Ready",
	"gcp-standin": "Ready", "gcp-standin-quota": "QuotaExhausted", "gcp-standin-disabled": "APIDisabled",
	"kube-demo": "Ready", "kube-demo-can-i": "Forbidden", "kube-demo-unschedulable": "Unschedulable",
	"kube-demo-proxies": "Ready", "kube-demo-zones": "Ready",
}

// TestStatusPageDemoInBrowser opens the status page of `make demo`'s twelve
// entries (testdata/demo/demo.sh: real sshd, libvirtd, kube-apiserver and
// etcd, the Compute stand-in; as root, with kube-apiserver built) in
// headless Chromium at 1366x768, as a new user first sees it: the page
// fits the window, no reason or capacity cell overflows, every Ready row
// shows its capacity, and the page filtered to the targets not ready
// (HostKeyMismatch's down target among them, as provider_health_ready
// says) opens on its rows. The demo is stopped as Ctrl-C stops it.
func TestStatusPageDemoInBrowser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("the demo starts sshd and runs libvirtd as nobody: run as root (make integration-browser)")
	}
	artifacts := t.ArtifactDir()
	t.Logf("screenshots and logs go to %s", artifacts)
	base := startDemoScript(t, artifacts)

	// Every entry has its verdict: the kubernetes ones join by a reload
	// once kube-apiserver answers.
	page := &statusPage{t: t, base: base}
	awaitCondition(t, "the demo's verdicts, one per entry", func() (bool, string) {
		got := map[string]string{}
		for _, sp := range page.status() {
			for _, tg := range sp.Targets {
				if tg.Checked {
					got[sp.Name] = string(tg.Reason)
				}
			}
		}
		for name, reason := range demoReasons {
			if got[name] != reason {
				return false, name + ": " + got[name]
			}
		}
		for name, reason := range got {
			if _, ok := demoReasons[name]; !ok {
				return false, fmt.Sprintf("%s: %s, an entry this test does not know", name, reason)
			}
		}
		return true, ""
	})

	page.ctx = startChromium(t, artifacts)
	console := watchConsole(page.ctx)
	// The page and the status it is checked against are of the same
	// verdicts: the demo checks every entry every 2 s, and kvm-lab's
	// capacity is the host's free memory, which moves between checks.
	status := page.openAtStatus(base + "/")
	page.screenshot(filepath.Join(artifacts, "status-page-demo.png"))
	page.viewportScreenshot(filepath.Join(artifacts, "status-page-demo-first-screen.png"))
	rows := page.rows()
	if len(rows) != len(demoReasons) {
		t.Fatalf("%d rows, want %d", len(rows), len(demoReasons))
	}
	page.checkSummary(status)
	page.checkLayout(status)
	page.scrollTo("#targets tbody.ready")
	page.viewportScreenshot(filepath.Join(artifacts, "status-page-demo-ready.png"))

	status = page.openAtStatus(base + "/?state=notready")
	page.checkFiltered(status, "?state=notready", func(_ statusProvider, tg statusTarget) bool { return tg.Checked && !tg.Ready })
	page.checkCells(status)
	page.viewportScreenshot(filepath.Join(artifacts, "status-page-demo-notready.png"))
	console.assertNoErrors(t, "the demo's status page", false)
}

// startDemoScript runs testdata/demo/demo.sh on a free port, its output
// in artifacts/demo.log, and returns its status page's URL without the
// final "/". The demo is stopped at the end of the test by SIGINT, as
// Ctrl-C stops it.
func startDemoScript(t *testing.T, artifacts string) string {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(filepath.Join(artifacts, "demo.log"))
	if err != nil {
		t.Fatal(err)
	}
	// env --default-signal: a script cannot trap SIGINT when started
	// with it ignored (a background job of a shell).
	cmd := exec.Command("env", "--default-signal=INT", filepath.Join(root, "testdata", "demo", "demo.sh"))
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "LISTEN=127.0.0.1:0", "DEMO_SCRAPE_INTERVAL=2", "GCE_METADATA_HOST=127.0.0.1:1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	r, w := io.Pipe()
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() {
		exited <- cmd.Wait()
		w.Close()
	}()
	var mu sync.Mutex
	url := ""
	pageLine := regexp.MustCompile(`^demo: status page: (http://127\.0\.0\.1:\d+)/$`)
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		s := bufio.NewScanner(r)
		for s.Scan() {
			logFile.WriteString(s.Text() + "\n")
			if m := pageLine.FindStringSubmatch(s.Text()); m != nil {
				mu.Lock()
				url = m[1]
				mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		// Ctrl-C: the script stops everything it started, each by its PID.
		_ = syscall.Kill(cmd.Process.Pid, syscall.SIGINT)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("the demo did not exit 0 after Ctrl-C: %v", err)
			}
		case <-time.After(browserWait):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			t.Errorf("the demo did not stop within %s of Ctrl-C", browserWait)
		}
		<-scanned
		logFile.Close()
	})
	awaitCondition(t, "the demo's status page URL", func() (bool, string) {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("the demo exited: %v; its output in %s", err, logFile.Name())
		default:
		}
		mu.Lock()
		defer mu.Unlock()
		return url != "", "no line with the URL yet"
	})
	// The exporter answers once it listens; a readiness check of the page.
	resp, err := http.Get(url + "/-/healthy")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return url
}
