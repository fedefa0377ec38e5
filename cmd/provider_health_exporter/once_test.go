package main

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	encbin "encoding/binary"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/egress-proxies/provider_health_exporter/config"
	"github.com/egress-proxies/provider_health_exporter/internal/engine"
	"github.com/egress-proxies/provider_health_exporter/internal/exposition"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

// runOnceBinary runs the real binary with --check.once and args, HOME in
// dir and Google's metadata server on loopback, and returns its exit code
// and output.
func runOnceBinary(t *testing.T, dir string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := exec.Command(binary(t), append([]string{"--check.once"}, args...)...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	cmd.Env = append(os.Environ(), "HOME="+dir, "GCE_METADATA_HOST=127.0.0.1:1")
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit) && exit.ExitCode() >= 0:
		code = exit.ExitCode()
	default:
		t.Fatalf("running the binary: %v\nstderr:\n%s", err, errOut.String())
	}
	return code, out.String(), errOut.String()
}

// onceAPIServer is a loopback Kubernetes API stand-in: every cluster (the
// kubeconfig's server path) has a namespace whose ResourceQuota allows 10
// Pods and counts 2, so an entry that needs one Pod per proxy has room for 8.
func onceAPIServer(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, rest, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		w.Header().Set("Content-Type", "application/json")
		switch rest {
		case "api/v1/pods":
			_, _ = io.WriteString(w, `{"kind":"PodList","apiVersion":"v1","metadata":{},"items":[]}`)
		case "api/v1/namespaces/" + testNamespace + "/resourcequotas":
			_, _ = io.WriteString(w, `{"kind":"ResourceQuotaList","apiVersion":"v1","metadata":{},"items":[`+
				`{"metadata":{"name":"compute","namespace":"`+testNamespace+`"},"spec":{"hard":{"pods":"10"}},"status":{"hard":{"pods":"10"},"used":{"pods":"2"}}}]}`)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// onceKubernetesConfig writes a configuration of two entries on
// onceAPIServer: roomy needs 1 Pod per proxy (Ready, capacity 8), full 9
// (QuotaExhausted, capacity 0).
func onceKubernetesConfig(t *testing.T, dir string) string {
	t.Helper()
	srv := onceAPIServer(t)
	entry := func(name, pods string) string {
		return fmt.Sprintf("  - name: %s\n    kubeconfig: %s\n    namespace: %s\n    min_quota_headroom: {pods: %s}\n",
			name, plainKubeconfig(t, dir, name, srv.URL+"/"+name), testNamespace, pods)
	}
	p := filepath.Join(dir, "provider_health.yml")
	writeFile(t, p, "kubernetes:\n"+entry("roomy", "1")+entry("full", "9"))
	return p
}

// failLines are the lines of stderr that name a failing target.
func failLines(stderr string) []string {
	var out []string
	for line := range strings.Lines(stderr) {
		if strings.HasPrefix(line, "FAIL ") {
			out = append(out, strings.TrimSuffix(line, "\n"))
		}
	}
	return out
}

// TestCheckOnceKubernetes runs the real binary's --check.once on the
// Kubernetes stand-in: the exit status and the lines on stderr for each
// way a target passes or fails, the table, the JSON, and the usage errors.
func TestCheckOnceKubernetes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := onceKubernetesConfig(t, dir)

	t.Run("ready entry passes", func(t *testing.T) {
		t.Parallel()
		code, out, errOut := runOnceBinary(t, dir, "--config.file="+cfg, "--check.entry=roomy")
		if code != 0 {
			t.Fatalf("exit %d, want 0\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
		}
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if len(lines) != 2 || strings.Fields(lines[0])[0] != "ENTRY" {
			t.Fatalf("stdout: want a header and one row:\n%s", out)
		}
		f := strings.Fields(lines[1])
		if len(f) < 5 || f[0] != "kubernetes/roomy" || f[2] != "Ready" || f[3] != "8" || f[len(f)-1] != "ok" {
			t.Errorf("row %q: want kubernetes/roomy, Ready, capacity 8, ok", lines[1])
		}
		if !strings.Contains(lines[1], "pods") {
			t.Errorf("row %q: want the binding quota named", lines[1])
		}
		if fl := failLines(errOut); len(fl) != 0 {
			t.Errorf("stderr names failures: %q", fl)
		}
	})
	t.Run("need equal to capacity passes", func(t *testing.T) {
		t.Parallel()
		if code, out, errOut := runOnceBinary(t, dir, "--config.file="+cfg, "--check.entry=kubernetes/roomy", "--check.need=8"); code != 0 {
			t.Fatalf("exit %d, want 0\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
		}
	})
	t.Run("need above capacity fails", func(t *testing.T) {
		t.Parallel()
		code, _, errOut := runOnceBinary(t, dir, "--config.file="+cfg, "--check.entry=roomy", "--check.need=9")
		if code != 1 {
			t.Fatalf("exit %d, want 1\nstderr:\n%s", code, errOut)
		}
		fl := failLines(errOut)
		if len(fl) != 1 || !strings.HasPrefix(fl[0], "FAIL kubernetes/roomy target ") || !strings.Contains(fl[0], "capacity 8 below --check.need=9") {
			t.Errorf("stderr: want one line naming roomy and its capacity:\n%s", errOut)
		}
	})
	t.Run("quota exhausted fails naming it", func(t *testing.T) {
		t.Parallel()
		code, out, errOut := runOnceBinary(t, dir, "--config.file="+cfg)
		if code != 1 {
			t.Fatalf("exit %d, want 1\nstderr:\n%s", code, errOut)
		}
		fl := failLines(errOut)
		if len(fl) != 1 || !strings.HasPrefix(fl[0], "FAIL kubernetes/full target ") || !strings.Contains(fl[0], "not ready: QuotaExhausted") {
			t.Errorf("stderr: want one line naming full, not ready, QuotaExhausted:\n%s", errOut)
		}
		if !strings.Contains(out, "kubernetes/roomy") || !strings.Contains(out, "kubernetes/full") {
			t.Errorf("stdout: want both entries:\n%s", out)
		}
	})
	t.Run("json", func(t *testing.T) {
		t.Parallel()
		code, out, errOut := runOnceBinary(t, dir, "--config.file="+cfg, "--check.format=json")
		if code != 1 {
			t.Fatalf("exit %d, want 1\nstderr:\n%s", code, errOut)
		}
		var rep struct {
			Pass        *bool `json:"pass"`
			Need        int64 `json:"need"`
			SurviveLoss *bool `json:"surviveLoss"`
			Targets     []struct {
				Provider, Name, Target, Address, Reason, Message, CapacityBinding string
				Up, Ready, Pass                                                   bool
				Capacity                                                          *int64
				Failures                                                          []string
			} `json:"targets"`
		}
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("JSON: %v\n%s", err, out)
		}
		if rep.Pass == nil || *rep.Pass || rep.Need != 1 || rep.SurviveLoss == nil || *rep.SurviveLoss || len(rep.Targets) != 2 {
			t.Fatalf("JSON: want pass false, need 1, surviveLoss false, 2 targets:\n%s", out)
		}
		roomy, full := rep.Targets[0], rep.Targets[1]
		if roomy.Provider != "kubernetes" || roomy.Name != "roomy" || roomy.Target == "" || !roomy.Up || !roomy.Ready || roomy.Reason != "Ready" ||
			roomy.Capacity == nil || *roomy.Capacity != 8 || roomy.CapacityBinding == "" || !roomy.Pass || len(roomy.Failures) != 0 {
			t.Errorf("roomy: %+v", roomy)
		}
		if full.Name != "full" || full.Ready || full.Reason != "QuotaExhausted" || full.Capacity == nil || *full.Capacity != 0 ||
			full.Pass || len(full.Failures) == 0 || full.Message == "" {
			t.Errorf("full: %+v", full)
		}
		for _, key := range []string{`"durationSeconds"`, `"address"`, `"message"`} {
			if !strings.Contains(out, key) {
				t.Errorf("JSON lacks %s", key)
			}
		}
	})
	t.Run("unknown entry is a usage error", func(t *testing.T) {
		t.Parallel()
		code, out, errOut := runOnceBinary(t, dir, "--config.file="+cfg, "--check.entry=roomy", "--check.entry=nosuch")
		if code != 2 || !strings.Contains(errOut, `--check.entry="nosuch"`) || out != "" {
			t.Errorf("exit %d, want 2 naming nosuch and nothing on stdout\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
		}
	})
	t.Run("negative need is a usage error", func(t *testing.T) {
		t.Parallel()
		if code, _, errOut := runOnceBinary(t, dir, "--config.file="+cfg, "--check.need=-1"); code != 2 || !strings.Contains(errOut, "--check.need=-1") {
			t.Errorf("exit %d, want 2 naming --check.need\nstderr:\n%s", code, errOut)
		}
	})
	t.Run("unknown format is a usage error", func(t *testing.T) {
		t.Parallel()
		if code, _, errOut := runOnceBinary(t, dir, "--config.file="+cfg, "--check.format=yaml"); code != 2 || !strings.Contains(errOut, "yaml") {
			t.Errorf("exit %d, want 2\nstderr:\n%s", code, errOut)
		}
	})
	t.Run("with config.check is a usage error", func(t *testing.T) {
		t.Parallel()
		if code, _, errOut := runOnceBinary(t, dir, "--config.file="+cfg, "--config.check"); code != 2 || !strings.Contains(errOut, "exclude each other") {
			t.Errorf("exit %d, want 2\nstderr:\n%s", code, errOut)
		}
	})
	t.Run("invalid configuration", func(t *testing.T) {
		t.Parallel()
		f := filepath.Join("..", "..", "testdata", "invalid-missing-project.yml")
		_, loadErr := config.Load(f, provider.Sections(builtinKinds()))
		if loadErr == nil {
			t.Fatal("config.Load accepts it")
		}
		code, out, errOut := runOnceBinary(t, dir, "--config.file="+f)
		if code != 2 || errOut != "FAILED: "+loadErr.Error()+"\n" || out != "" {
			t.Errorf("exit %d, want 2 with --config.check's error\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
		}
	})
}

// TestCheckFlagsNeedCheckOnce: a --check.* flag without --check.once is a
// usage error, not a server started where a script waits for an answer.
func TestCheckFlagsNeedCheckOnce(t *testing.T) {
	t.Parallel()
	for _, flag := range []string{"--check.need=3", "--check.entry=x", "--check.format=json", "--check.survive-loss"} {
		var out bytes.Buffer
		cmd := exec.Command(binary(t), flag, "--config.file=nonexistent.yml", "--web.listen-address=127.0.0.1:0")
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(out.String(), "only with --check.once") {
			t.Errorf("%s: %v, want exit 2 naming --check.once\n%s", flag, err, out.String())
		}
	}
}

// recordingChannel keeps what the exporter sent on a libvirt channel.
type recordingChannel struct {
	ssh.Channel
	mu  sync.Mutex
	got bytes.Buffer
}

func (c *recordingChannel) Read(p []byte) (int, error) {
	n, err := c.Channel.Read(p)
	c.mu.Lock()
	c.got.Write(p[:n])
	c.mu.Unlock()
	return n, err
}

// procs are the libvirt procedures of the calls in what was sent, in order.
func (c *recordingChannel) procs() []uint32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []uint32
	b := c.got.Bytes()
	for len(b) >= 28 {
		n := encbin.BigEndian.Uint32(b)
		out = append(out, encbin.BigEndian.Uint32(b[12:]))
		if n < 28 || int(n) > len(b) {
			break
		}
		b = b[n:]
	}
	return out
}

// recordingHost is sshHost with its one libvirt channel recorded: done is
// closed once the peer has read everything the client sent, up to its
// end of the channel.
func recordingHost(t *testing.T, hostKey ssh.Signer) (addr string, ch *recordingChannel, done chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	cfg := &ssh.ServerConfig{PublicKeyCallback: func(ssh.ConnMetadata, ssh.PublicKey) (*ssh.Permissions, error) { return nil, nil }}
	cfg.AddHostKey(hostKey)
	ch, done = &recordingChannel{}, make(chan struct{})
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		sc, chans, reqs, err := ssh.NewServerConn(c, cfg)
		if err != nil {
			return
		}
		defer sc.Close()
		go ssh.DiscardRequests(reqs)
		for nc := range chans {
			if nc.ChannelType() != "direct-streamlocal@openssh.com" {
				_ = nc.Reject(ssh.UnknownChannelType, "not supported")
				continue
			}
			accepted, creqs, err := nc.Accept()
			if err != nil {
				continue
			}
			go ssh.DiscardRequests(creqs)
			ch.Channel = accepted
			libvirtPeer(ch, false)
			close(done)
			return
		}
	}()
	return ln.Addr().String(), ch, done
}

// TestCheckOnceKVM: a KVM host behind an in-process SSH server whose pool
// has 70 GiB available, 10 GiB per proxy: Ready with capacity 7 through
// --check.once, and the connection the check kept is closed before the
// process exits: the host got libvirt's goodbye (ConnectClose, procedure
// 2) after the check's calls, which a process that just exited never sends.
func TestCheckOnceKVM(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	hostKey, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	_, clientKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(clientKey, "")
	if err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(dir, "id_ed25519")
	writeFile(t, key, string(pem.EncodeToMemory(block)))
	addr, ch, done := recordingHost(t, hostKey)
	cfg := filepath.Join(dir, "provider_health.yml")
	writeFile(t, cfg, fmt.Sprintf("kvm:\n  - name: lab\n    user: proxyops\n    private_key_file: %s\n    insecure_ignore_host_key: true\n"+
		"    min_pool_available: 10GiB\n    hosts:\n      - {name: h1, address: %q}\n", key, addr))
	code, out, errOut := runOnceBinary(t, dir, "--config.file="+cfg, "--check.need=7")
	if code != 0 {
		t.Fatalf("exit %d, want 0\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if f := strings.Fields(strings.Split(out, "\n")[1]); len(f) < 5 || f[0] != "kvm/lab" || f[1] != "h1" || f[2] != "Ready" || f[3] != "7" {
		t.Errorf("stdout: want kvm/lab h1 Ready 7:\n%s", out)
	}
	select {
	case <-done:
	case <-time.After(time.Minute):
		// A guard against a hang: the process has exited, so its
		// end of the channel is gone.
		t.Fatal("the SSH peer never saw the channel end")
	}
	procs := ch.procs()
	if len(procs) < 2 || procs[len(procs)-1] != 2 {
		t.Errorf("libvirt calls %v: want the goodbye (2) last, sent by the exporter's Close before it exited", procs)
	}
}

// onceResults is one entry's results with the verdicts given, for the
// formatting tests.
func onceResults(verdicts ...provider.Verdict) []engine.ProviderResult {
	p := engine.ProviderResult{Provider: exposition.Provider{Kind: "toy", Name: "e", Reasons: provider.EngineReasons()}}
	for i, v := range verdicts {
		p.Targets = append(p.Targets, engine.TargetResult{Series: exposition.Series{Result: exposition.Result{
			Verdict: v, Target: provider.Target{Name: fmt.Sprintf("t%d", i)}, Duration: time.Second,
		}}})
	}
	return []engine.ProviderResult{p}
}

// TestOnceReportJudges: each condition of --check.once on its own, at its
// boundary.
func TestOnceReportJudges(t *testing.T) {
	t.Parallel()
	ready := func(c int64, domains ...provider.Domain) provider.Verdict {
		return provider.Verdict{Reason: provider.ReasonReady, Capacity: provider.Capacity{Known: true, Proxies: c, Binding: "b"}, Domains: domains}
	}
	loss := func(a int64) provider.Domain {
		return provider.Domain{Name: "z", Capacity: 1, Proxies: 1, AfterLoss: a, HasAfterLoss: true}
	}
	for _, c := range []struct {
		name    string
		v       provider.Verdict
		need    int64
		survive bool
		pass    bool
		why     string
	}{
		{"ready", ready(3), 1, false, true, ""},
		{"need equal", ready(3), 3, false, true, ""},
		{"need above", ready(3), 4, false, false, "capacity 3 below --check.need=4"},
		{"need zero", ready(3), 0, false, true, ""},
		{"no capacity", provider.Verdict{Reason: provider.ReasonReady}, 5, false, true, ""},
		{"not ready", provider.Verdict{Reason: provider.ReasonTimeout}, 0, false, false, "not ready: Timeout"},
		{"loss ignored", ready(3, loss(-1)), 1, false, true, ""},
		{"loss negative", ready(3, loss(-1)), 1, true, false, "losing domain z leaves 1 proxies without a place"},
		{"loss zero", ready(3, loss(0)), 1, true, true, ""},
		{"loss unknown", ready(3, provider.Domain{Name: "z", AfterLoss: -5}), 1, true, true, ""},
	} {
		rep := newOnceReport(onceResults(c.v), c.need, c.survive)
		if rep.Pass != c.pass || rep.Targets[0].Pass != c.pass {
			t.Errorf("%s: pass %v, want %v (%q)", c.name, rep.Pass, c.pass, rep.Targets[0].Failures)
		}
		if got := strings.Join(rep.Targets[0].Failures, "; "); got != c.why {
			t.Errorf("%s: failures %q, want %q", c.name, got, c.why)
		}
	}
	// One failing target fails the run, wherever it comes.
	timeout := provider.Verdict{Reason: provider.ReasonTimeout}
	for _, vs := range [][]provider.Verdict{{ready(3), timeout}, {timeout, ready(3)}} {
		rep := newOnceReport(onceResults(vs...), 1, false)
		if rep.Pass || rep.Targets[0].Pass == (vs[0].Reason == provider.ReasonTimeout) {
			t.Errorf("one failing target of two: %+v", rep)
		}
	}
}

// TestOnceTableBounded: whatever the names, bindings, domains and messages
// hold (4 KiB, newlines, escape sequences, invalid UTF-8), every line of
// the table and of stderr is one line of bounded width, and the domains
// are listed with their three numbers ("-" where after-loss is unknown).
func TestOnceTableBounded(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 4<<10)
	hostile := "evil\n\x1b[2Jname\r\t\xff" + long
	v := provider.Verdict{
		Reason: provider.ReasonReady, Message: hostile,
		Capacity: provider.Capacity{Known: true, Proxies: provider.MaxCapacity, Binding: hostile},
		Domains: []provider.Domain{
			{Name: hostile, Capacity: 3, Proxies: 2, AfterLoss: -2, HasAfterLoss: true},
			{Name: "zone-b", Capacity: 4, Proxies: 1},
		},
	}
	results := onceResults(v, provider.Verdict{Reason: provider.ReasonTimeout, Message: hostile})
	results[0].Name = hostile
	results[0].Targets[0].Target.Name = hostile
	rep := newOnceReport(results, 1, true)
	var b strings.Builder
	if err := writeOnceTable(&b, rep); err != nil {
		t.Fatal(err)
	}
	table := b.String()
	// 6 columns of at most maxCell runes and 2 spaces between them.
	const maxLine = 6*maxCell + 5*2
	lines := strings.Split(strings.TrimSuffix(table, "\n"), "\n")
	if len(lines) != 6 { // header, target, domain header, 2 domains, target
		t.Fatalf("table: %d lines, want 6:\n%s", len(lines), table)
	}
	for _, l := range lines {
		if n := len([]rune(l)); n > maxLine {
			t.Errorf("line of %d runes, over %d: %.100q", n, maxLine, l)
		}
		if strings.ContainsAny(l, "\x1b\r\t") {
			t.Errorf("line holds a control character: %.100q", l)
		}
	}
	if f := strings.Fields(lines[3]); len(f) < 4 || strings.Join(f[len(f)-3:], " ") != "3 2 -2" {
		t.Errorf("first domain %q: want capacity 3, proxies 2, after-loss -2", lines[3])
	}
	if f := strings.Fields(lines[4]); len(f) != 4 || f[0] != "zone-b" || f[1] != "4" || f[2] != "1" || f[3] != "-" {
		t.Errorf("second domain %q: want zone-b 4 1 -", lines[4])
	}
	if !strings.HasPrefix(lines[2], "  DOMAIN") {
		t.Errorf("domains' header %q: want it indented under its target", lines[2])
	}
	for _, tgt := range rep.Targets {
		if tgt.Pass {
			continue
		}
		l := failureLine(tgt)
		if strings.ContainsAny(l, "\n\r\x1b") || len([]rune(l)) > 4*maxCell+maxFailureMessage+200 {
			t.Errorf("failure line of %d runes or with a control character: %.200q", len([]rune(l)), l)
		}
	}
}

// TestOnceJSONNames pins the JSON field names docs/configuration.md
// documents.
func TestOnceJSONNames(t *testing.T) {
	t.Parallel()
	v := provider.Verdict{Reason: provider.ReasonReady, Message: "m",
		Capacity: provider.Capacity{Known: true, Proxies: 4, Binding: "b"},
		Domains:  []provider.Domain{{Name: "a", Capacity: 1, Proxies: 2, AfterLoss: -1, HasAfterLoss: true}, {Name: "b", Capacity: 3}},
	}
	var b bytes.Buffer
	if err := writeOnceJSON(&b, newOnceReport(onceResults(v), 2, true)); err != nil {
		t.Fatal(err)
	}
	want := `{"pass":false,"need":2,"surviveLoss":true,"targets":[{"provider":"toy","name":"e","target":"t0","address":"","up":true,"ready":true,` +
		`"reason":"Ready","message":"m","capacity":4,"capacityBinding":"b","domains":[{"name":"a","capacity":1,"proxies":2,"afterLoss":-1},` +
		`{"name":"b","capacity":3,"proxies":0}],"durationSeconds":1,"pass":false,"failures":["losing domain a leaves 1 proxies without a place"]}]}`
	var compact bytes.Buffer
	if err := json.Compact(&compact, b.Bytes()); err != nil {
		t.Fatal(err)
	}
	if compact.String() != want {
		t.Errorf("JSON\n%s\nwant\n%s", compact.String(), want)
	}
}
