package kvm

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/egress-proxies/provider_health_exporter/collector"
	"github.com/egress-proxies/provider_health_exporter/config"
)

// The fleet simulator of BenchmarkFleet (README: "Performance"). The fake
// hosts run in a child process (this test binary again, told so by
// fleetEnv), so the heap, goroutines and CPU the benchmark reports are the
// exporter's alone, not the fakes'.
const (
	fleetEnv        = "KVM_FLEET_HOSTS"   // number of hosts to serve
	fleetSilentEnv  = "KVM_FLEET_SILENT"  // every k-th host accepts TCP and never speaks (0: none)
	fleetKeyEnv     = "KVM_FLEET_KEY"     // authorized public key, authorized_keys format
	fleetLatencyEnv = "KVM_FLEET_LATENCY" // delay of every libvirt reply
)

// fleetAddr matches a host's address in a message, so the log counts
// messages that differ only in it as one.
var fleetAddr = regexp.MustCompile(`127\.0\.0\.1:[0-9]+`)

// fleetLatency is the reply latency of every simulated libvirtd: a host a
// few hops away.
const fleetLatency = 20 * time.Millisecond

// procTB lets the test fakes run outside a test, in the fleet's process.
type procTB struct {
	testing.TB
	cleanups []func()
}

func (p *procTB) Helper()          {}
func (p *procTB) Cleanup(f func()) { p.cleanups = append(p.cleanups, f) }
func (p *procTB) Fatal(args ...any) {
	fmt.Fprintln(os.Stderr, args...)
	os.Exit(1)
}

// serveFleet serves the fleet described by the environment: one fake
// libvirtd speaking the real RPC protocol, forwarded by one in-process SSH
// server per host, each on its own loopback port. It prints the socket and
// one known_hosts line per host, then serves until stdin closes.
func serveFleet() int {
	n, err := strconv.Atoi(os.Getenv(fleetEnv))
	if err != nil || n < 1 {
		fmt.Fprintf(os.Stderr, "%s: not a positive number: %q\n", fleetEnv, os.Getenv(fleetEnv))
		return 2
	}
	silent, _ := strconv.Atoi(os.Getenv(fleetSilentEnv))
	latency, err := time.ParseDuration(os.Getenv(fleetLatencyEnv))
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", fleetLatencyEnv, err)
		return 2
	}
	key, _, _, _, err := ssh.ParseAuthorizedKey([]byte(os.Getenv(fleetKeyEnv)))
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", fleetKeyEnv, err)
		return 2
	}
	tb := &procTB{}
	defer func() {
		for i := len(tb.cleanups) - 1; i >= 0; i-- {
			tb.cleanups[i]()
		}
	}()
	fake := NewFakeLibvirtd(tb)
	fake.SetLatency(latency)
	out := bufio.NewWriter(os.Stdout)
	fmt.Fprintf(out, "socket %s\n", fake.Path())
	for i := range n {
		srv := newSSHServer(tb, key, fake.Path())
		state := "ok"
		if silent > 0 && i%silent == silent-1 {
			srv.setMode(modeSilent)
			state = "silent"
		}
		fmt.Fprintf(out, "host %s %s %s", state, srv.addr, knownHostsLine(srv.addr, srv.hostKey.PublicKey()))
	}
	fmt.Fprintln(out, "ready")
	if err := out.Flush(); err != nil {
		return 1
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// fleetHost is one simulated host as the benchmark sees it.
type fleetHost struct {
	addr   string
	silent bool
}

// startFleet runs the fleet's process and returns its libvirt socket and
// hosts; the process ends when the benchmark does.
func startFleet(b *testing.B, n, silent int, key ssh.PublicKey, knownHosts string) (string, []fleetHost) {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(),
		fleetEnv+"="+strconv.Itoa(n),
		fleetSilentEnv+"="+strconv.Itoa(silent),
		fleetKeyEnv+"="+strings.TrimSpace(string(ssh.MarshalAuthorizedKey(key))),
		fleetLatencyEnv+"="+fleetLatency.String())
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		stdin.Close() // the fleet's signal to stop
		_ = cmd.Wait()
	})
	var socket string
	var hosts []fleetHost
	var lines strings.Builder
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), " ", 4)
		switch {
		case f[0] == "socket" && len(f) == 2:
			socket = f[1]
		case f[0] == "host" && len(f) == 4:
			hosts = append(hosts, fleetHost{addr: f[2], silent: f[1] == "silent"})
			lines.WriteString(f[3] + "\n")
		case f[0] == "ready":
			if err := os.WriteFile(knownHosts, []byte(lines.String()), 0o600); err != nil {
				b.Fatal(err)
			}
			go func() { _, _ = io.Copy(io.Discard, stdout) }()
			return socket, hosts
		default:
			b.Fatalf("fleet process said %q", sc.Text())
		}
	}
	b.Fatalf("fleet process ended before it was ready: %v", sc.Err())
	return "", nil
}

// BenchmarkFleet scrapes a simulated fleet through collector.Engine and the
// real kvm Checker with the real go-libvirt client, 20 ms per libvirt reply,
// the scrape header at 5 s (budget 4.5 s). An op is one steady scrape of the
// whole fleet after warm-up; the metrics are explained in the README
// ("Performance"), summarised by testdata/bench/table.sh.
func BenchmarkFleet(b *testing.B) {
	for _, n := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("hosts=%d", n), func(b *testing.B) { benchFleet(b, n, 0) })
	}
	// Every tenth host accepts TCP and never speaks.
	b.Run("hosts=1000/hung=10pct", func(b *testing.B) { benchFleet(b, 1000, 10) })
}

func benchFleet(b *testing.B, n, silent int) {
	dir := b.TempDir()
	keyFile := filepath.Join(dir, "id_ed25519")
	knownHosts := filepath.Join(dir, "known_hosts")
	key := writeKey(b, keyFile)
	socket, hosts := startFleet(b, n, silent, key.PublicKey(), knownHosts)
	if len(hosts) != n {
		b.Fatalf("fleet has %d hosts, want %d", len(hosts), n)
	}
	cfg := &config.KVM{
		Name: "fleet", User: "proxyops", PrivateKeyFile: keyFile, KnownHostsFile: knownHosts,
		LibvirtSocket: socket, LibvirtURI: config.DefaultLibvirtURI, Pool: config.DefaultPool,
		MaxConcurrentDials: config.DefaultMaxConcurrentDials, DialTimeout: config.DefaultDialTimeout,
	}
	healthy := map[string]bool{}
	for i, h := range hosts {
		name := fmt.Sprintf("h%04d", i)
		cfg.Hosts = append(cfg.Hosts, &config.KVMHost{Address: h.addr, Name: name, User: "proxyops",
			Pool: config.DefaultPool, PrivateKeyFile: keyFile})
		healthy[name] = !h.silent
	}

	// The baseline: everything but the exporter's checker and engine.
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	goroutinesBefore := runtime.NumGoroutine()

	var dials atomic.Int64
	logger := slog.New(slog.DiscardHandler)
	engine := collector.NewEngine(logger)
	b.Cleanup(engine.Close)
	err := engine.Load([]collector.Entry{{
		Kind: "kvm", Name: cfg.Name, Reasons: Reasons(), Timeout: time.Duration(config.DefaultTimeout),
		Fingerprint: "fleet",
		Build: func() (collector.Checker, error) {
			c, err := New(cfg, logger)
			if err != nil {
				return nil, err
			}
			c.dialer.ControlContext = func(context.Context, string, string, syscall.RawConn) error {
				dials.Add(1)
				return nil
			}
			return c, nil
		},
	}})
	if err != nil {
		b.Fatal(err)
	}
	req := collector.Request{ScrapeTimeout: 5 * time.Second, Offset: 500 * time.Millisecond}
	// why counts the verdicts of healthy hosts that were not Ready, by
	// reason and message, for the benchmark's log.
	why := map[string]int{}
	scrape := func() (notReady int, wall time.Duration) {
		start := time.Now()
		res, err := engine.Run(context.Background(), req)
		wall = time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		for _, tr := range res[0].Targets {
			if healthy[tr.Target.Name] && tr.Reason != collector.ReasonReady {
				notReady++
				why[string(tr.Reason)+": "+fleetAddr.ReplaceAllString(tr.Message, "ADDR")]++
			}
		}
		return notReady, wall
	}

	// Warm-up: the cold scrape, then scrapes until every healthy host is
	// Ready (at most ten) so the kept connections are established.
	notReady1, cold := scrape()
	notReady2, _ := scrape()
	warmup := 2
	for left := notReady2; left > 0 && warmup < 10; warmup++ {
		left, _ = scrape()
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	heapPerHost := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n)
	goroutinesPerHost := float64(runtime.NumGoroutine()-goroutinesBefore) / float64(n)

	dialsBefore := dials.Load()
	cpuBefore := cpuTime()
	notReady := 0
	for b.Loop() {
		nr, _ := scrape()
		notReady += nr
	}
	b.StopTimer()
	logged := 0
	for w, k := range why {
		if logged++; logged > 10 {
			b.Logf("and %d other messages", len(why)-10)
			break
		}
		b.Logf("%d× not Ready: %s", k, w)
	}
	// Reported after the loop: b.Loop resets the timer, which drops the
	// metrics reported before it.
	b.ReportMetric(cold.Seconds(), "cold-s")
	b.ReportMetric(float64(warmup), "warmup-scrapes")
	if silent > 0 {
		b.ReportMetric(float64(notReady1), "notready-scrape1")
		b.ReportMetric(float64(notReady2), "notready-scrape2")
	}
	b.ReportMetric(heapPerHost, "heap-B/host")
	b.ReportMetric(goroutinesPerHost, "goroutines/host")
	b.ReportMetric(float64(dials.Load()-dialsBefore)/float64(b.N), "dials/scrape")
	b.ReportMetric((cpuTime()-cpuBefore).Seconds()*1000/float64(b.N), "cpu-ms/scrape")
	b.ReportMetric(float64(notReady)/float64(b.N), "notready/scrape")
}

// cpuTime is the CPU time (user + system) of this process so far: the
// exporter's side only, the fleet runs in its own process.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
