package kvm

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/digitalocean/go-libvirt"
	"github.com/prometheus/common/expfmt"
	"golang.org/x/crypto/ssh"

	"github.com/egress-proxies/provider_health_exporter/config"
	"github.com/egress-proxies/provider_health_exporter/internal/engine"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

// The fleet simulator of BenchmarkFleet (docs/scaling.md: "Performance"). The fake
// hosts run in a child process (this test binary again, told so by
// fleetEnv), so the heap, goroutines and CPU the benchmark reports are the
// exporter's alone, not the fakes'.
const (
	fleetEnv        = "KVM_FLEET_HOSTS"   // number of hosts to serve
	fleetHungEnv    = "KVM_FLEET_HUNG"    // percent of hosts that accept TCP and never speak
	fleetKeyEnv     = "KVM_FLEET_KEY"     // authorized public key, authorized_keys format
	fleetLatencyEnv = "KVM_FLEET_LATENCY" // delay of every libvirt reply
	fleetFirstEnv   = "KVM_FLEET_FIRST"   // index of the process's first host in the fleet
	fleetSocketEnv  = "KVM_FLEET_SOCKET"  // libvirt socket path the hosts answer for, when not the process's own
	fleetVolumesEnv = "KVM_FLEET_VOLUMES" // volumes of the pool, when not FakeVolumes (BenchmarkPoolVolumes)
)

// fleetPerProcess is the most hosts one fleet process serves: each holds
// two descriptors (its listener and the exporter's connection), and a
// process may open 20,000 on the machines this runs on (docs/development.md).
const fleetPerProcess = 5000

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
	hung, _ := strconv.Atoi(os.Getenv(fleetHungEnv))
	first, _ := strconv.Atoi(os.Getenv(fleetFirstEnv))
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
	if v := os.Getenv(fleetVolumesEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			fmt.Fprintf(os.Stderr, "%s: not a number of volumes: %q\n", fleetVolumesEnv, v)
			return 2
		}
		fake.SetVolumes(benchVolumes(n))
	}
	// The hosts answer libvirt's calls themselves; the socket path is only
	// the name the exporter asks for, one for the whole fleet.
	socket := cmp.Or(os.Getenv(fleetSocketEnv), fake.Path())
	out := bufio.NewWriter(os.Stdout)
	fmt.Fprintf(out, "socket %s\n", socket)
	for i := range n {
		srv := newSSHServer(tb, key, socket)
		// Each host answers libvirt's calls itself, as if it had its
		// own libvirtd: one descriptor per host instead of three.
		srv.answer = fake.handle
		state := "ok"
		if fleetRoleOf(first+i, hung, 0, 0) == roleHung {
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

// fleetRole is what a simulated host does.
type fleetRole int

const (
	roleHealthy fleetRole = iota
	roleHung              // accepts TCP, never speaks
	roleMissing           // no pool of the configured name (PoolMissing)
	roleDrop              // its libvirt connection drops in every check (LibvirtConnectionLost)
)

// fleetRoleOf spreads the roles over the hosts by percent: within every
// hundred hosts, host i gets rank i*37 mod 100, a permutation, so each
// role is scattered through the configuration order, not bunched.
func fleetRoleOf(i, hung, missing, drop int) fleetRole {
	r := i * 37 % 100
	switch {
	case r < hung:
		return roleHung
	case r < hung+missing:
		return roleMissing
	case r < hung+missing+drop:
		return roleDrop
	}
	return roleHealthy
}

// startFleet runs the fleet's processes (fleetPerProcess hosts each) and
// returns the libvirt socket its hosts answer for and its hosts; the
// processes end when the benchmark does.
func startFleet(b *testing.B, n, hung int, key ssh.PublicKey, knownHosts string, padLines int) (string, []fleetHost) {
	b.Helper()
	var socket string
	var hosts []fleetHost
	var lines strings.Builder
	for first := 0; first < n; first += fleetPerProcess {
		s, hs, ls := startFleetProcess(b, first, min(fleetPerProcess, n-first), hung, key, socket)
		socket = cmp.Or(socket, s)
		hosts = append(hosts, hs...)
		lines.WriteString(ls)
	}
	// Lines for hosts the exporter does not check: a known_hosts shared
	// with other tools is larger than the fleet.
	for range padLines {
		lines.WriteString(knownHostsLine(fmt.Sprintf("192.0.2.%d:22", rand.IntN(250)+1), randomKey(b)))
	}
	if err := os.WriteFile(knownHosts, []byte(lines.String()), 0o600); err != nil {
		b.Fatal(err)
	}
	return socket, hosts
}

// startFleetProcess runs one process serving n hosts of the fleet from
// index first; socket, when set, is the path its hosts answer for. It
// returns that path, the hosts and their known_hosts lines. env, in the
// form NAME=value, is added to its environment last, so it wins.
func startFleetProcess(b *testing.B, first, n, hung int, key ssh.PublicKey, socket string, env ...string) (string, []fleetHost, string) {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(),
		fleetEnv+"="+strconv.Itoa(n),
		fleetFirstEnv+"="+strconv.Itoa(first),
		fleetSocketEnv+"="+socket,
		fleetHungEnv+"="+strconv.Itoa(hung),
		fleetKeyEnv+"="+strings.TrimSpace(string(ssh.MarshalAuthorizedKey(key))),
		fleetLatencyEnv+"="+fleetLatency.String())
	cmd.Env = append(cmd.Env, env...)
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
			go func() { _, _ = io.Copy(io.Discard, stdout) }()
			return socket, hosts, lines.String()
		default:
			b.Fatalf("fleet process said %q", sc.Text())
		}
	}
	b.Fatalf("fleet process ended before it was ready: %v", sc.Err())
	return "", nil, ""
}

// fleetScenario is one fleet BenchmarkFleet scrapes.
type fleetScenario struct {
	hosts               int
	hung, missing, drop int  // percent of the hosts
	knownHostsPad       int  // extra known_hosts lines, for hosts not checked
	freeMemory          bool // min_free_memory set: one more RPC a check
	placement           bool // volume and network set: one more RPC a check each
	// promised sets every promised-resource key (with min_free_memory and
	// min_pool_available, which they count against): the domains' stats,
	// the free memory, the volume list and one call per volume a check.
	promised bool
	// dials is max_concurrent_dials; 0 is the default. 16 keeps the dial
	// window fixed where it starts, as it was before it adapted.
	dials int
	// header is the scrape header (and the interval of the warm-up
	// scrapes); 0 is fleetHeader.
	header time.Duration
	// settle is a number of steady scrapes made after the warm-up and
	// before the measured ones; the resident memory is read after them.
	settle int
	// limit, when set, is the container's memory limit: the exporter's
	// side runs under the Go memory limit the exporter derives from it
	// (softMemoryLimit), and its resident memory after the settling
	// scrapes must stay below it.
	limit int64
}

func (sc fleetScenario) String() string {
	name := fmt.Sprintf("hosts=%d", sc.hosts)
	if sc.hung > 0 {
		name += fmt.Sprintf("/hung=%dpct", sc.hung)
	}
	if sc.missing > 0 {
		name += fmt.Sprintf("/nopool=%dpct", sc.missing)
	}
	if sc.drop > 0 {
		name += fmt.Sprintf("/drop=%dpct", sc.drop)
	}
	if sc.knownHostsPad > 0 {
		name += fmt.Sprintf("/known_hosts=%d", sc.hosts+sc.knownHostsPad)
	}
	if sc.freeMemory {
		name += "/min_free_memory"
	}
	if sc.placement {
		name += "/volume+network"
	}
	if sc.promised {
		name += "/promised"
	}
	if sc.dials > 0 {
		name += fmt.Sprintf("/max_concurrent_dials=%d", sc.dials)
	}
	if sc.header != 0 && sc.header != fleetHeader {
		name += fmt.Sprintf("/header=%s", sc.header)
	}
	if sc.limit > 0 {
		name += fmt.Sprintf("/gomemlimit=%dMiB", softLimit(sc.limit)>>20)
	}
	return name
}

// Scrape settings of the fleet: Prometheus's header (unless a scenario sets
// its own) and the exporter's default --timeout-offset. The warm-up scrapes
// are one header apart, the shortest interval Prometheus allows with that
// timeout (scrape_timeout may not exceed scrape_interval).
const (
	fleetHeader = 5 * time.Second
	fleetOffset = 500 * time.Millisecond
	// fleetLate is how far past the budget an answer may leave: the
	// scrape's answer must be on the wire before the header runs out.
	fleetLate = 100 * time.Millisecond
)

// BenchmarkFleet scrapes a simulated fleet through engine.Engine and the
// real kvm Checker with the exporter's libvirt client, 20 ms per libvirt reply,
// the scrape header at 5 s (budget 4.5 s; 10 s for the 5,000 hosts), and encodes every answer in the
// text format as /metrics does. An op is one steady scrape of the whole
// fleet after warm-up; the metrics are explained in
// docs/scaling.md: "Performance", summarised by testdata/bench/table.sh.
func BenchmarkFleet(b *testing.B) {
	for _, sc := range []fleetScenario{
		{hosts: 1},
		{hosts: 100, settle: 50},
		{hosts: 100, freeMemory: true},
		{hosts: 100, placement: true},
		{hosts: 100, knownHostsPad: 4900},
		{hosts: 1000, settle: 50},
		{hosts: 1000, settle: 50, promised: true},
		{hosts: 1000, knownHostsPad: 4000},
		{hosts: 1000, hung: 10},
		{hosts: 1000, hung: 10, dials: 16},
		{hosts: 1000, hung: 10, missing: 5, drop: 5},
		// The default Deployment's fleet in the default Deployment's
		// memory: GOMEMLIMIT as the exporter derives it from the
		// container's limit (docs/scaling.md: "Sizing"); the resident
		// memory after the settling scrapes must stay below that limit.
		{hosts: 1000, settle: 50, limit: defaultMemoryLimit},
		// The cold start of a large replica: Prometheus's scrape_timeout
		// of 10s, the exporter's default timeout of 10s.
		{hosts: 5000, header: 10 * time.Second, settle: 50},
		// Beyond what docs/scaling.md sizes one replica for, in the
		// memory its sizing table gives 10,000 hosts.
		{hosts: 10000, header: 10 * time.Second, settle: 50, limit: 2 << 30},
	} {
		b.Run(sc.String(), func(b *testing.B) { benchFleet(b, sc) })
	}
}

// defaultMemoryLimit is the default Deployment's memory limit
// (deploy/kubernetes/deployment.yaml, the chart's values.yaml).
const defaultMemoryLimit = 256 << 20

// softLimit is the Go memory limit the exporter sets from a container's
// memory limit (docs/deployment.md: "Memory limit"): the limit less the
// larger of 10% and 96 MiB, never below half of it.
func softLimit(limit int64) int64 {
	return max(limit-max(limit/10, 64<<20), limit/2)
}

// fleetScrape is what one scrape of the fleet saw.
type fleetScrape struct {
	wall     time.Duration // the engine's run and the encoding of its answer
	bytes    int           // of the text exposition
	notReady int           // healthy hosts not Ready
	wrong    int           // broken hosts whose reason is not the expected one
}

func benchFleet(b *testing.B, sc fleetScenario) {
	if os.Getenv(fleetProfileEnv) != "" {
		// Every allocation of 4 KiB sampled, not one per 512 KiB: the
		// heap profile is then about each host, not a few of them.
		runtime.MemProfileRate = 4096
	}
	n := sc.hosts
	dir := b.TempDir()
	keyFile := filepath.Join(dir, "id_ed25519")
	knownHosts := filepath.Join(dir, "known_hosts")
	key := writeKey(b, keyFile)
	socket, hosts := startFleet(b, n, sc.hung, key.PublicKey(), knownHosts, sc.knownHostsPad)
	if len(hosts) != n {
		b.Fatalf("fleet has %d hosts, want %d", len(hosts), n)
	}
	cfg := &Entry{
		Name: "fleet", User: "proxyops", PrivateKeyFile: keyFile, KnownHostsFile: knownHosts,
		LibvirtSocket: socket, LibvirtURI: DefaultLibvirtURI, Pool: DefaultPool,
		MaxConcurrentDials: DefaultMaxConcurrentDials, DialTimeout: DefaultDialTimeout,
	}
	if sc.dials > 0 {
		cfg.MaxConcurrentDials = sc.dials
	}
	// want is the reason each host should have once warmed up; index
	// finds a host by its address, for the dials counted per host.
	want := map[string]provider.Reason{}
	index := make(map[string]int, n)
	for i, h := range hosts {
		index[h.addr] = i
		name := fmt.Sprintf("h%04d", i)
		pool := DefaultPool
		role := fleetRoleOf(i, sc.hung, sc.missing, sc.drop)
		switch role {
		case roleHung:
			want[name] = provider.ReasonTimeout
		case roleMissing:
			pool, want[name] = MissingPool, ReasonPoolMissing
		case roleDrop:
			pool, want[name] = DropPool, ReasonLibvirtConnectionLost
		default:
			want[name] = provider.ReasonReady
		}
		if (role == roleHung) != h.silent {
			b.Fatalf("host %d: the fleet and the benchmark disagree on whether it hangs", i)
		}
		host := &Host{Address: h.addr, Name: name, HostSettings: &HostSettings{User: "proxyops", Pool: pool, PrivateKeyFile: keyFile}}
		if sc.freeMemory {
			// Below what the fake reports: the host stays Ready.
			host.MinFreeMemory, host.MinFreeMemoryBytes = "1GiB", 1<<30
		}
		if sc.promised {
			// What the fake host has leaves room (8 CPUs, 32 GiB, four
			// domains of 2 vCPUs and 4 GiB, a 100 GiB pool with three
			// volumes of 20 GiB): the host stays Ready.
			host.MinFreeMemory, host.MinFreeMemoryBytes = "1GiB", 1<<30
			host.MinPoolAvailable, host.MinPoolAvailableBytes = "20GiB", 20<<30
			host.Promised = &Promised{VCPUs: 2, CPURatio: DefaultCPUAllocationRatio, MemoryRatio: 1, ReservedMemory: 512 << 20, DiskRatio: 1}
		}
		if sc.placement {
			// A volume and an active network the fake has: Ready.
			host.Volume, host.Network = "proxy-base.qcow2", "proxies"
		}
		cfg.Hosts = append(cfg.Hosts, host)
	}

	header := sc.header
	if header == 0 {
		header = fleetHeader
	}
	if sc.limit > 0 {
		defer debug.SetMemoryLimit(debug.SetMemoryLimit(softLimit(sc.limit)))
	}

	// The baseline: everything but the exporter's checker and engine.
	// FreeOSMemory hands the pages of earlier fleets back, so that RSS
	// grows from here with this fleet only; the peak is reset to now.
	debug.FreeOSMemory()
	resetPeakRSS(b)
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	rssBefore := rss(b)
	goroutinesBefore := runtime.NumGoroutine()

	var dials, rpcs atomic.Int64
	// hostDials counts the TCP dials of each host, to tell the dials
	// beyond the first of a healthy host.
	hostDials := make([]atomic.Int64, n)
	logs := &countingHandler{counts: map[string]int{}}
	logger := slog.New(logs)
	eng := engine.NewEngine(logger)
	b.Cleanup(eng.Close)
	var checker *Checker
	entry := engine.Entry{
		Kind: "kvm", Name: cfg.Name, Reasons: Kind().EntryReasons(cfg), Timeout: time.Duration(config.DefaultTimeout),
		Fingerprint: "fleet",
		Build: func() (provider.Checker, error) {
			c, err := New(cfg, logger)
			if err != nil {
				return nil, err
			}
			c.dialer.ControlContext = func(_ context.Context, _, address string, _ syscall.RawConn) error {
				dials.Add(1)
				if i, ok := index[address]; ok {
					hostDials[i].Add(1)
				}
				return nil
			}
			newClient := c.newClient
			c.newClient = func(conn net.Conn) libvirtClient { return countingClient{newClient(conn), &rpcs} }
			checker = c
			return c, nil
		},
	}
	if err := eng.Load([]engine.Entry{entry}); err != nil {
		b.Fatal(err)
	}
	req := engine.Request{ScrapeTimeout: header, Offset: fleetOffset}
	budget := engine.Budget(entry.Timeout, header, fleetOffset)
	// why counts the verdicts of healthy hosts that were not Ready, by
	// reason and message, for the benchmark's log.
	why := map[string]int{}
	var (
		late    int           // answers that left after budget + fleetLate
		slowest time.Duration // the longest answer
		scrapes int
		answer  bytes.Buffer
		encoded time.Duration // what the last answer took to build and write
	)
	scrape := func() fleetScrape {
		start := time.Now()
		// As the exporter does: the checks end early by twice what the
		// last answer took, so this one too leaves within the budget.
		req.Reserve = 2 * encoded
		res, err := eng.Run(context.Background(), req)
		if err != nil {
			b.Fatal(err)
		}
		answer.Reset()
		began := time.Now()
		if err := encodeText(&answer, res); err != nil {
			b.Fatal(err)
		}
		encoded = time.Since(began)
		out := fleetScrape{wall: time.Since(start), bytes: answer.Len()}
		scrapes++
		slowest = max(slowest, out.wall)
		if out.wall > budget+fleetLate {
			late++
		}
		for _, tr := range res[0].Targets {
			w := want[tr.Target.Name]
			switch {
			case w == provider.ReasonReady && tr.Reason != w:
				out.notReady++
				why[string(tr.Reason)+": "+fleetAddr.ReplaceAllString(tr.Message, "ADDR")]++
			case w != provider.ReasonReady && tr.Reason != w:
				out.wrong++
			}
		}
		return out
	}

	// Warm-up: the cold scrape, then scrapes one interval apart until every
	// healthy host is Ready (at most ten), so the kept connections are
	// established. Profiled apart from the steady scrapes: it is the dials'.
	profileDir := os.Getenv(fleetProfileEnv)
	prefix := filepath.Join(profileDir, strings.NewReplacer("/", "_", "=", "").Replace(b.Name()))
	stopCold := func() {}
	if profileDir != "" {
		stopCold = startCPUProfile(b, prefix+".cold-cpu.pprof")
	}
	coldCPU := cpuTime()
	first := scrape()
	next := time.Now().Add(header - first.wall)
	wait := func() {
		time.Sleep(time.Until(next))
		next = time.Now().Add(header)
	}
	wait()
	second := scrape()
	warmup, left := 2, second.notReady
	third := second // when every host was Ready at the second
	for ; left > 0 && warmup < 10; warmup++ {
		wait()
		s := scrape()
		if warmup == 2 {
			third = s
		}
		left = s.notReady
	}
	coldCPU = cpuTime() - coldCPU
	stopCold()
	// The last answer's buffer is not the hosts' to carry.
	answer = bytes.Buffer{}
	debug.FreeOSMemory()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	heapPerHost := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n)
	rssPerHost := float64(rss(b)-rssBefore) / float64(n)
	goroutinesPerHost := float64(runtime.NumGoroutine()-goroutinesBefore) / float64(n)

	// Settling: steady scrapes back to back, then the resident memory
	// they leave (the median steady wall counts them too).
	var walls []time.Duration
	for range sc.settle {
		s := scrape()
		walls = append(walls, s.wall)
	}
	rssSettled, peakSettled := rss(b), peakRSS(b)
	if sc.limit > 0 && sc.settle > 0 && rssSettled >= sc.limit {
		b.Errorf("resident memory %d MiB after %d steady scrapes with GOMEMLIMIT %d MiB: the container's limit is %d MiB",
			rssSettled>>20, sc.settle, softLimit(sc.limit)>>20, sc.limit>>20)
	}

	if profileDir != "" {
		writeProfiles(b, prefix)
		defer startCPUProfile(b, prefix+".steady-cpu.pprof")()
	}

	dialsBefore, rpcsBefore := dials.Load(), rpcs.Load()
	cpuBefore := cpuTime()
	var notReady, wrong, totalBytes int
	for b.Loop() {
		s := scrape()
		notReady += s.notReady
		wrong += s.wrong
		totalBytes += s.bytes
		walls = append(walls, s.wall)
	}
	steadyCPU := cpuTime() - cpuBefore
	steadyDials := dials.Load() - dialsBefore
	steadyRPCs := rpcs.Load() - rpcsBefore
	slices.Sort(walls)
	median := walls[len(walls)/2]

	// Dials and sessions of healthy hosts beyond their first, over the
	// whole run: each is a connection that was established and not kept,
	// or a dial that failed.
	var extraDials, extraSessions int64
	for i := range hosts {
		if want[fmt.Sprintf("h%04d", i)] != provider.ReasonReady {
			continue
		}
		extraDials += max(hostDials[i].Load()-1, 0)
	}
	if checker != nil {
		for _, h := range checker.liveHosts() {
			h.mu.Lock()
			if want[h.name] == provider.ReasonReady && h.connects > 1 {
				extraSessions += int64(h.connects) - 1
			}
			h.mu.Unlock()
		}
	}

	// Fully cached: the same entry with min_interval 1h keeps the checker
	// and serves every verdict from the cache; no check runs.
	cachedEntry := entry
	cachedEntry.MinInterval = time.Hour
	if err := eng.Load([]engine.Entry{cachedEntry}); err != nil {
		b.Fatal(err)
	}
	const cachedScrapes = 10
	cpuBefore = cpuTime()
	wallBefore := time.Now()
	for range cachedScrapes {
		scrape()
	}
	cachedCPU := cpuTime() - cpuBefore
	cachedWall := time.Since(wallBefore)

	// The benchmark's log keeps 10 lines: the dial queue, what was logged
	// at info, then the commonest messages of healthy hosts not Ready.
	if checker != nil {
		q := checker.dials
		q.mu.Lock()
		b.Logf("dial queue: at most %d dials at once, %d of failing hosts; window at most %d, halved %d times, %d at the end",
			q.maxRunning, q.maxFailingAtOnce, q.maxWindow, q.shrinks, q.window)
		q.mu.Unlock()
	}
	b.Logf("logged at info or above: %s", logs.summary())
	msgs := slices.SortedFunc(maps.Keys(why), func(a, b string) int { return cmp.Compare(why[b], why[a]) })
	for i, w := range msgs {
		if i == 7 {
			b.Logf("and %d other messages", len(msgs)-7)
			break
		}
		b.Logf("%d× not Ready: %s", why[w], w)
	}
	// Reported after the loop: b.Loop resets the timer, which drops the
	// metrics reported before it.
	b.ReportMetric(first.wall.Seconds(), "cold-s")
	b.ReportMetric(float64(warmup), "warmup-scrapes")
	b.ReportMetric(float64(first.notReady), "notready-scrape1")
	b.ReportMetric(float64(second.notReady), "notready-scrape2")
	b.ReportMetric(float64(third.notReady), "notready-scrape3")
	b.ReportMetric(heapPerHost, "heap-B/host")
	b.ReportMetric(rssPerHost, "rss-B/host")
	b.ReportMetric(goroutinesPerHost, "goroutines/host")
	b.ReportMetric(float64(steadyDials)/float64(b.N), "dials/scrape")
	b.ReportMetric(float64(steadyRPCs)/float64(b.N)/float64(n), "rpcs/host/scrape")
	b.ReportMetric(steadyCPU.Seconds()*1000/float64(b.N), "cpu-ms/scrape")
	b.ReportMetric(cachedCPU.Seconds()*1000/cachedScrapes, "cached-cpu-ms/scrape")
	b.ReportMetric(cachedWall.Seconds()*1000/cachedScrapes, "cached-ms/scrape")
	b.ReportMetric(float64(totalBytes)/float64(b.N), "bytes/scrape")
	b.ReportMetric(float64(notReady)/float64(b.N), "notready/scrape")
	b.ReportMetric(float64(wrong)/float64(b.N), "wrong/scrape")
	b.ReportMetric(slowest.Seconds(), "slowest-s")
	b.ReportMetric(float64(late), "late-answers")
	b.ReportMetric(float64(scrapes), "scrapes")
	b.ReportMetric(median.Seconds()*1000, "median-ms")
	b.ReportMetric(float64(extraDials), "extra-dials")
	b.ReportMetric(float64(extraSessions), "extra-sessions")
	b.ReportMetric(float64(logs.count(dropLogged)), "drops-logged")
	b.ReportMetric(coldCPU.Seconds(), "warmup-cpu-s")
	if sc.settle > 0 {
		b.ReportMetric(float64(rssSettled)/(1<<20), "rss-MiB")
		b.ReportMetric(float64(peakSettled)/(1<<20), "peak-rss-MiB")
	}
}

// countingHandler counts what the exporter logs at info and above, by
// message, for the benchmark's log: every dropped connection is logged
// with its reason, and a fleet's log says what went wrong in it.
type countingHandler struct {
	mu     sync.Mutex
	counts map[string]int
}

func (h *countingHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	key := r.Message
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "why" || a.Key == "reason" {
			key += " " + a.Key + "=" + a.Value.String()
		}
		return true
	})
	h.mu.Lock()
	h.counts[key]++
	h.mu.Unlock()
	return nil
}

func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }

// count is how often msg was logged, whatever its attributes.
func (h *countingHandler) count(msg string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for k, v := range h.counts {
		if k == msg || strings.HasPrefix(k, msg+" ") {
			n += v
		}
	}
	return n
}

// summary lists what was logged, by message and reason, with counts.
func (h *countingHandler) summary() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(h.counts)) {
		parts = append(parts, fmt.Sprintf("%d× %s", h.counts[k], k))
	}
	return strings.Join(parts, "; ")
}

// encodeText writes the results in the text format the way /metrics
// does (exposition.Exposition, no Registry), so the cost of the answer is
// counted with the checks'.
func encodeText(w io.Writer, res []engine.ProviderResult) error {
	x, err := engine.NewExposition(res)
	if err != nil {
		return fmt.Errorf("building the answer: %w", err)
	}
	if err := x.Write(w, expfmt.NewFormat(expfmt.TypeTextPlain), nil, nil); err != nil {
		return fmt.Errorf("writing the answer: %w", err)
	}
	return nil
}

// fleetProfileEnv names a directory where the benchmark writes, for `go
// tool pprof`, the heap (in use) and goroutine profiles of each fleet once
// it is warmed up (what each kept host holds), and a CPU profile of the
// scrapes after that (steady and cached).
const fleetProfileEnv = "KVM_FLEET_PROFILE_DIR"

// startCPUProfile profiles the CPU into path until the returned function is
// called.
func startCPUProfile(b *testing.B, path string) func() {
	b.Helper()
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}
}

func writeProfiles(b *testing.B, prefix string) {
	b.Helper()
	for _, name := range []string{"heap", "goroutine"} {
		f, err := os.Create(prefix + "." + name + ".pprof")
		if err != nil {
			b.Fatal(err)
		}
		if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
			b.Fatal(err)
		}
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// rss is the resident set size of this process in bytes.
func rss(b *testing.B) int64 { return procStatus(b, "VmRSS:") }

// procStatus reads a size field of /proc/self/status in bytes.
func procStatus(b *testing.B, field string) int64 {
	b.Helper()
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Logf("no %s %v", field, err)
		return 0
	}
	for line := range strings.SplitSeq(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				b.Fatalf("%s %q: %v", field, v, err)
			}
			return kb << 10
		}
	}
	return 0
}

// peakRSS is the peak resident set size of this process since the last
// resetPeakRSS, in bytes.
func peakRSS(b *testing.B) int64 { return procStatus(b, "VmHWM:") }

// resetPeakRSS makes the kernel count the peak resident set size from now
// on (proc(5): clear_refs, 5).
func resetPeakRSS(b *testing.B) {
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		b.Logf("peak RSS not reset: %v", err)
	}
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

// countingClient counts the calls a check makes on a kept connection: the
// pool lookup and info, and the free memory only where min_free_memory is
// set (docs/scaling.md: "Performance").
type countingClient struct {
	libvirtClient
	calls *atomic.Int64
}

func (c countingClient) StoragePoolLookupByName(name string) (libvirt.StoragePool, error) {
	c.calls.Add(1)
	return c.libvirtClient.StoragePoolLookupByName(name)
}

func (c countingClient) StoragePoolGetInfo(p libvirt.StoragePool) (uint8, uint64, uint64, uint64, error) {
	c.calls.Add(1)
	return c.libvirtClient.StoragePoolGetInfo(p)
}

func (c countingClient) NodeGetFreeMemory() (uint64, error) {
	c.calls.Add(1)
	return c.libvirtClient.NodeGetFreeMemory()
}

func (c countingClient) StorageVolLookupByName(p libvirt.StoragePool, name string) (libvirt.StorageVol, error) {
	c.calls.Add(1)
	return c.libvirtClient.StorageVolLookupByName(p, name)
}

func (c countingClient) NetworkLookupByName(name string) (libvirt.Network, error) {
	c.calls.Add(1)
	return c.libvirtClient.NetworkLookupByName(name)
}

func (c countingClient) NetworkIsActive(n libvirt.Network) (int32, error) {
	c.calls.Add(1)
	return c.libvirtClient.NetworkIsActive(n)
}

func (c countingClient) NodeGetInfo() (nodeInfo, error) {
	c.calls.Add(1)
	return c.libvirtClient.NodeGetInfo()
}

func (c countingClient) ConnectGetAllDomainStats() ([]domainStat, error) {
	c.calls.Add(1)
	return c.libvirtClient.ConnectGetAllDomainStats()
}

func (c countingClient) StoragePoolListAllVolumes(p libvirt.StoragePool) ([]libvirt.StorageVol, error) {
	c.calls.Add(1)
	return c.libvirtClient.StoragePoolListAllVolumes(p)
}

func (c countingClient) ConnectListAllDomains() ([]string, error) {
	c.calls.Add(1)
	return c.libvirtClient.ConnectListAllDomains()
}

func (c countingClient) StorageVolGetInfo(v libvirt.StorageVol) (uint64, error) {
	c.calls.Add(1)
	return c.libvirtClient.StorageVolGetInfo(v)
}
