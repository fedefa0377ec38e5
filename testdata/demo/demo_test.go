//go:build demo

// Package demo tests `make demo` (testdata/demo/demo.sh): run as root by
// `make integration-demo`, part of `make test`.
package demo

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// waitLimit bounds every wait of the test: for a verdict, for the demo to
// stop. Nothing is asserted about how fast anything comes.
const waitLimit = 5 * time.Minute

// wantReasons is what the demo sets up: per entry, the reason of its one
// target (docs/configuration.md: "Demo").
var wantReasons = map[string]string{
	"kvm-lab":              "Ready",
	"kvm-pool-full":        "PoolFull",
	"kvm-promised":         "Ready",
	"kvm-host-key":         "HostKeyMismatch",
	"gcp-standin":          "Ready",
	"gcp-standin-quota":    "QuotaExhausted",
	"gcp-standin-disabled": "APIDisabled",
	"kube-demo":            "Ready",
	"kube-demo-can-i":      "Forbidden",
	// Three synthetic Nodes: two too small, one cordoned.
	"kube-demo-unschedulable": "Unschedulable",
	// A host port, one per node: the two schedulable nodes take one each.
	"kube-demo-proxies": "Ready",
	// A zone spread in three zones: plenty of room, but not for losing
	// demo-zone-a (checkDomains).
	"kube-demo-zones": "Ready",
}

// TestDemo runs `make demo`'s script twice, each time to the first Ready
// of each kind and the not-ready reasons it shows, then stops it as Ctrl-C
// does and checks that every process it started is gone: once with
// kube-apiserver built (as make test leaves it), once with a stand-in of
// its build that does not finish until the test lets it, to show that the
// kvm and gcp entries do not wait for the build and that the kubernetes
// entries join by a reload when it is done.
func TestDemo(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("the demo starts sshd and runs libvirtd as nobody: run as root (make integration-demo)")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	// Every process the demo starts stays a descendant of this one, even
	// once the script that started it has exited (a daemon of ctl.sh), so
	// that the test can see whether any is left.
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); errno != 0 {
		t.Fatalf("prctl(PR_SET_CHILD_SUBREAPER): %v", errno)
	}

	t.Run("built", func(t *testing.T) {
		d := startDemo(t, root, nil)
		d.expectLine("demo: kubernetes: starting kube-apiserver and etcd in the background")
		d.awaitReasons(wantReasons)
		d.checkCapacities()
		d.checkDomains()
		d.checkVersion(root)
		d.ctrlC(true)
	})

	t.Run("building", func(t *testing.T) {
		dir := t.TempDir()
		builder := filepath.Join(dir, "build-apiserver")
		started, release := filepath.Join(dir, "started"), filepath.Join(dir, "release")
		// A build that runs until the test lets it end, then answers as
		// the real script does with the binary it has cached.
		script := fmt.Sprintf(`#!/bin/sh
[ "$1" = --cached ] && exit 1
: >%q
while [ ! -e %q ]; do sleep 0.1; done
exec %q
`, started, release, filepath.Join(root, "testdata", "kubernetes", "build-apiserver.sh"))
		if err := os.WriteFile(builder, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		d := startDemo(t, root, []string{"DEMO_BUILD_APISERVER=" + builder})
		d.expectLine("demo: kubernetes: kube-apiserver is not built on this machine yet: building it in the background")
		first := map[string]string{}
		for name, reason := range wantReasons {
			if !strings.HasPrefix(name, "kube-") {
				first[name] = reason
			}
		}
		// The first Ready of kvm and gcp, and their other reasons, while
		// the build has started and not ended.
		d.awaitReasons(first)
		if _, err := os.Stat(started); err != nil {
			t.Errorf("the build was not started: %v", err)
		}
		for name := range d.status() {
			if strings.HasPrefix(name, "kube-") {
				t.Errorf("%s is configured before kube-apiserver is built", name)
			}
		}
		if err := os.WriteFile(release, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		d.awaitReasons(wantReasons)
		d.expectLine("demo: kubernetes: kube-apiserver and etcd on https://127.0.0.1:")
		// Ctrl-C as kill would send it: to the script alone.
		d.ctrlC(false)
	})
}

// prSetChildSubreaper is PR_SET_CHILD_SUBREAPER of prctl(2).
const prSetChildSubreaper = 36

// demo is one run of demo.sh.
type demo struct {
	t       *testing.T
	cmd     *exec.Cmd
	exited  chan error
	scanned chan struct{} // closed once the whole output is read
	started time.Time
	base    string // the status page's URL, without the final /
	state   string // the demo's state directory

	mu    sync.Mutex
	lines []string
}

func startDemo(t *testing.T, root string, env []string) *demo {
	t.Helper()
	// env --default-signal: the script may have been started from a
	// shell that ignores SIGINT (a background job), which a script cannot
	// trap; a terminal's Ctrl-C reaches it with SIGINT's default action.
	cmd := exec.Command("env", "--default-signal=INT", filepath.Join(root, "testdata", "demo", "demo.sh"))
	cmd.Dir = root
	cmd.Env = append(os.Environ(), append([]string{
		"LISTEN=127.0.0.1:0",
		"DEMO_SCRAPE_INTERVAL=1",
		"GCE_METADATA_HOST=127.0.0.1:1",
	}, env...)...)
	// Its own process group, as a terminal's foreground job has.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	r, w := io.Pipe()
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &demo{t: t, cmd: cmd, exited: make(chan error, 1), scanned: make(chan struct{}), started: time.Now()}
	go func() {
		d.exited <- cmd.Wait()
		w.Close()
	}()
	go func() {
		defer close(d.scanned)
		s := bufio.NewScanner(r)
		for s.Scan() {
			d.mu.Lock()
			d.lines = append(d.lines, s.Text())
			d.mu.Unlock()
		}
	}()
	stop := reapOrphans(cmd.Process.Pid)
	t.Cleanup(func() {
		select {
		case <-d.exited:
		default:
			// A failed test: stop what the demo started, as Ctrl-C does.
			_ = syscall.Kill(cmd.Process.Pid, syscall.SIGINT)
			select {
			case <-d.exited:
			case <-time.After(waitLimit):
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			}
		}
		stop()
		if t.Failed() {
			t.Logf("the demo's output:\n%s", d.output())
		}
	})

	page := regexp.MustCompile(`^demo: status page: (http://127\.0\.0\.1:\d+)/$`)
	config := regexp.MustCompile(`^demo: config (\S+)/provider_health\.yml, exporter log `)
	d.await("the status page's URL", func() (bool, string) {
		for _, l := range d.snapshot() {
			if m := page.FindStringSubmatch(l); m != nil {
				d.base = m[1]
			}
			if m := config.FindStringSubmatch(l); m != nil {
				d.state = m[1]
			}
		}
		return d.base != "" && d.state != "", "no line with the URL"
	})
	host := strings.TrimPrefix(d.base, "http://")
	for _, want := range []string{
		"demo: gcp is compute-standin, a stand-in of the Compute API on http://127.0.0.1:",
		"        curl -s " + host + "/metrics | grep -E '^provider_health_(ready|reason.*} 1)'",
		"        curl -s " + host + "/api/v1/status",
		"        curl -s '" + host + "/probe?name=kvm-pool-full&debug=true'",
		"        curl -s " + host + "/metrics | grep '^provider_health_capacity'",
	} {
		d.expectLine(want)
	}
	cfg, err := os.ReadFile(filepath.Join(d.state, "provider_health.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(cfg), "a STAND-IN of Google's Compute API") {
		t.Errorf("the demo's configuration does not name the gcp stand-in as one:\n%s", cfg)
	}
	return d
}

func (d *demo) snapshot() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.lines...)
}

func (d *demo) output() string { return strings.Join(d.snapshot(), "\n") }

// await polls cond until it holds, for at most waitLimit; it fails the
// test if the demo exits first.
func (d *demo) await(what string, cond func() (bool, string)) {
	d.t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		ok, state := cond()
		if ok {
			return
		}
		select {
		case err := <-d.exited:
			d.exited <- err
			d.t.Fatalf("waiting for %s: the demo exited: %v\n%s", what, err, d.output())
		default:
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("waiting for %s: not within %s; last: %s\n%s", what, waitLimit, state, d.output())
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// expectLine waits for a line of the demo's output that starts with
// prefix.
func (d *demo) expectLine(prefix string) {
	d.t.Helper()
	d.await(fmt.Sprintf("a line %q", prefix), func() (bool, string) {
		for _, l := range d.snapshot() {
			if strings.HasPrefix(l, prefix) {
				return true, ""
			}
		}
		return false, "not printed"
	})
}

// status reads /api/v1/status, which checks nothing: the reason of each
// entry's one target, "" when not checked yet.
func (d *demo) status() map[string]string {
	d.t.Helper()
	resp, err := http.Get(d.base + "/api/v1/status")
	if err != nil {
		d.t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Providers []struct {
			Name    string `json:"name"`
			Targets []struct {
				Reason string `json:"reason"`
			} `json:"targets"`
		} `json:"providers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		d.t.Fatalf("/api/v1/status: %v", err)
	}
	out := map[string]string{}
	for _, p := range st.Providers {
		for _, tg := range p.Targets {
			out[p.Name] = tg.Reason
		}
	}
	return out
}

// checkCapacities checks the capacity /api/v1/status shows for each kind
// (docs/metrics.md: "Capacity"): kvm-lab's from the real pool and free
// memory (at least 1: the demo host has a GiB of pool and 256 MiB free),
// gcp-standin's from regions-ok.json, kube-demo's from the ResourceQuota
// kubernetes.sh wrote, and 0 where the verdict says nothing fits (the
// Unschedulable entry's bound by the nodes: one synthetic Node full, the
// other cordoned).
func (d *demo) checkCapacities() {
	d.t.Helper()
	resp, err := http.Get(d.base + "/api/v1/status")
	if err != nil {
		d.t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Providers []struct {
			Name    string `json:"name"`
			Targets []struct {
				Capacity *int64 `json:"capacity"`
				Binding  string `json:"capacityBinding"`
			} `json:"targets"`
		} `json:"providers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		d.t.Fatalf("/api/v1/status: %v", err)
	}
	got := map[string]string{}
	for _, p := range st.Providers {
		for _, tg := range p.Targets {
			if tg.Capacity != nil {
				got[p.Name] = fmt.Sprintf("%d %s", *tg.Capacity, tg.Binding)
			}
		}
	}
	want := map[string]*regexp.Regexp{
		"kvm-lab":       regexp.MustCompile(`^[1-9][0-9]* (pool \S+|memory)$`),
		"kvm-pool-full": regexp.MustCompile(`^0 pool \S+$`),
		// A shut-off domain holds all but 1 GiB of the host's memory, 512
		// MiB of which is reserved: two proxies of 256 MiB.
		"kvm-promised":            regexp.MustCompile(`^2 memory promised: .+ of .+iB$`),
		"gcp-standin":             regexp.MustCompile(`^2 region us-central1 CPUS$`),
		"gcp-standin-quota":       regexp.MustCompile(`^0 region europe-west4 IN_USE_ADDRESSES$`),
		"kube-demo":               regexp.MustCompile(`^17 quota proxies pods$`),
		"kube-demo-unschedulable": regexp.MustCompile(`^0 nodes$`),
		"kube-demo-proxies":       regexp.MustCompile(`^2 nodes$`),
		// 4 CPUs on each of three Nodes, 8 proxies of 100m running:
		// 120 - 8, the spread's maxSkew of 3 reached only at the end.
		"kube-demo-zones": regexp.MustCompile(`^112 nodes$`),
	}
	for name, re := range want {
		if !re.MatchString(got[name]) {
			d.t.Errorf("%s: capacity %q, want %s", name, got[name], re)
		}
	}
	if len(got) != len(want) {
		d.t.Errorf("capacities %v, want those of %d entries (the others set no headroom key)", got, len(want))
	}
	d.t.Logf("capacities: %v", got)
}

// checkDomains checks kube-demo-zones' figures per zone in /metrics
// (docs/metrics.md: "Capacity per failure domain"), as kubernetes.sh
// sets them up: each zone a Node of 40 proxies of 100m, holding 6, 1 and
// 1 of them; losing demo-zone-a leaves it a domain at zero for the spread
// (maxSkew 3), so the other two take 2 more each, 4 of its 6 proxies;
// losing demo-zone-b or -c leaves room for 2 in the other small zone, 1
// more than its proxy.
func (d *demo) checkDomains() {
	d.t.Helper()
	resp, err := http.Get(d.base + "/metrics")
	if err != nil {
		d.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		d.t.Fatal(err)
	}
	want := map[string]string{}
	for zone, v := range map[string][3]string{"demo-zone-a": {"34", "6", "-2"}, "demo-zone-b": {"39", "1", "1"}, "demo-zone-c": {"39", "1", "1"}} {
		want["provider_health_domain_capacity "+zone] = v[0]
		want["provider_health_domain_proxies "+zone] = v[1]
		want["provider_health_capacity_after_loss "+zone] = v[2]
	}
	// The labels come in the exposition's order (sorted by name): read
	// the metric's name and the domain label, whatever the order.
	domainLabel := regexp.MustCompile(`[{,]domain="([^"]*)"`)
	got := map[string]string{}
	for line := range strings.Lines(string(body)) {
		series, value, ok := strings.Cut(strings.TrimSpace(line), " ")
		metric, _, _ := strings.Cut(series, "{")
		m := domainLabel.FindStringSubmatch(series)
		if ok && m != nil && strings.Contains(series, `name="kube-demo-zones"`) && strings.Contains(series, `provider="kubernetes"`) {
			got[metric+" "+m[1]] = value
		}
	}
	for series, v := range want {
		if got[series] != v {
			d.t.Errorf("%s = %q, want %s", series, got[series], v)
		}
	}
	if len(got) != len(want) {
		d.t.Errorf("kube-demo-zones has %d domain series, want %d: %v", len(got), len(want), got)
	}
}

// awaitReasons waits until every entry of want has its reason, from the
// scrapes the demo runs itself, in /api/v1/status and in the demo's
// output.
func (d *demo) awaitReasons(want map[string]string) {
	d.t.Helper()
	d.await(fmt.Sprintf("the reasons %v", want), func() (bool, string) {
		got := d.status()
		lines := d.output()
		for name, reason := range want {
			if got[name] != reason {
				return false, fmt.Sprintf("/api/v1/status: %v", got)
			}
			if !regexp.MustCompile(`(?m)^demo: \w+ ` + regexp.QuoteMeta(name) + `/\S+: ` + reason + `$`).MatchString(lines) {
				return false, fmt.Sprintf("the demo has not printed %s's reason %s", name, reason)
			}
		}
		return true, ""
	})
	// A report: nothing is asserted about how soon the verdicts come.
	d.t.Logf("%d entries with their reasons %s after the demo started", len(want), time.Since(d.started).Round(time.Second))
}

// process is a live process, told apart from a later one of the same PID
// by its start time.
type process struct {
	pid     int
	start   string
	cmdline string
}

// descendants are the live processes below this one: with the subreaper
// set, every process the demo has started and that still runs.
func descendants() map[int]process {
	parent := map[int]int{}
	procs := map[int]process{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// After the command name in parentheses: state, ppid, ... starttime (the 20th).
		_, rest, ok := strings.Cut(string(stat), ") ")
		f := strings.Fields(rest)
		if !ok || len(f) < 20 || f[0] == "Z" {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		cmdline, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		parent[pid] = ppid
		procs[pid] = process{pid: pid, start: f[19], cmdline: strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " "))}
	}
	self := os.Getpid()
	out := map[int]process{}
	for pid, p := range procs {
		for a, seen := parent[pid], 0; a != 0 && seen < 64; a, seen = parent[a], seen+1 {
			if a == self {
				out[pid] = p
				break
			}
		}
	}
	return out
}

// reapOrphans reaps, until stop is called, the processes the demo started
// that were handed to this process when their parent exited: their exit
// is what the demo's stop waits for. The demo itself is left to its
// exec.Cmd.
func reapOrphans(demoPID int) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			entries, _ := os.ReadDir("/proc")
			for _, e := range entries {
				pid, err := strconv.Atoi(e.Name())
				if err != nil || pid == demoPID {
					continue
				}
				stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
				if err != nil {
					continue
				}
				_, rest, _ := strings.Cut(string(stat), ") ")
				if f := strings.Fields(rest); len(f) > 1 && f[0] == "Z" && f[1] == strconv.Itoa(os.Getpid()) {
					var ws syscall.WaitStatus
					_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
				}
			}
		}
	}()
	return func() { close(done); <-finished }
}

// ctrlC stops the demo with SIGINT, to its process group as a terminal's
// Ctrl-C sends it (group) or to the script alone, and checks that it exits
// as interrupted and that every process it started is gone, the
// exporter's port closed and the state directory removed.
func (d *demo) ctrlC(group bool) {
	t := d.t
	t.Helper()
	before := descendants()
	var names []string
	for _, p := range before {
		names = append(names, p.cmdline)
	}
	all := strings.Join(names, "\n")
	// What the demo runs by now; each must be seen here, or the check
	// below that they are gone would prove nothing.
	for _, want := range []string{"/usr/sbin/sshd -D", "/usr/sbin/libvirtd", "/bin/provider_health_exporter", "/bin/compute-standin", "etcd ", "kube-apiserver"} {
		if !strings.Contains(all, want) {
			t.Errorf("no process %q among the demo's:\n%s", want, all)
		}
	}
	pid := d.cmd.Process.Pid
	if group {
		pid = -pid
	}
	if err := syscall.Kill(pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	var err error
	stopping := time.Now()
	select {
	case err = <-d.exited:
		d.exited <- err
	case <-time.After(waitLimit):
		t.Fatalf("the demo did not stop within %s after SIGINT", waitLimit)
	}
	<-d.scanned
	t.Logf("the demo stopped %s after SIGINT", time.Since(stopping).Round(100*time.Millisecond))
	// Ctrl-C is how the demo ends: a clean stop exits 0.
	if err != nil {
		t.Errorf("the demo exited with %v after Ctrl-C, want status 0 (a clean stop)", err)
	}
	// The demo has waited for each process it stopped: none may be left,
	// now, not eventually.
	left := 0
	for _, p := range descendants() {
		t.Errorf("left running after the demo stopped: %d %s", p.pid, p.cmdline)
		left++
	}
	for pid, p := range before {
		if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
			_, rest, _ := strings.Cut(string(stat), ") ")
			if f := strings.Fields(rest); len(f) >= 20 && f[19] == p.start && f[0] != "Z" {
				t.Errorf("still running: %d %s", pid, p.cmdline)
				left++
			}
		}
	}
	if resp, err := http.Get(d.base + "/-/healthy"); err == nil {
		resp.Body.Close()
		t.Errorf("the exporter still answers at %s", d.base)
	}
	if _, err := os.Stat(d.state); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the state directory %s is still there: %v", d.state, err)
	}
	if !strings.HasSuffix(d.output(), "demo: stopped") {
		t.Errorf("the demo's last line is not \"demo: stopped\"")
	}
	if left == 0 {
		t.Logf("stopped: %d processes were running, none is left", len(before))
	}
}

// checkVersion checks that the demo's exporter carries its version, as a
// release's does: the status page's footer names VERSION, the branch and
// the commit, not "version=, branch=, revision=unknown".
func (d *demo) checkVersion(root string) {
	d.t.Helper()
	v, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil {
		d.t.Fatal(err)
	}
	resp, err := http.Get(d.base + "/")
	if err != nil {
		d.t.Fatal(err)
	}
	defer resp.Body.Close()
	page, err := io.ReadAll(resp.Body)
	if err != nil {
		d.t.Fatal(err)
	}
	footer := regexp.MustCompile(`provider_health_exporter \(version=` + regexp.QuoteMeta(strings.TrimSpace(string(v))) + `, branch=[^,]+, revision=[0-9a-f]{40}\)`)
	if !footer.Match(page) {
		d.t.Errorf("the status page's footer does not carry the version %s, a branch and a revision:\n%s", strings.TrimSpace(string(v)), page[max(0, len(page)-300):])
	}
}
