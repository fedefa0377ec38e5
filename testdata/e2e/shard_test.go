//go:build e2e

package e2e

import (
	"bufio"
	"crypto/md5"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

const (
	// shardName is the kvm entry both replicas check.
	shardName = "e2e-shard"
	// shardedConfig is the example the test runs: its relabelling, not a
	// copy of it, decides which replica checks which host.
	shardedConfig = "deploy/prometheus/prometheus-sharded.yml"
	// shardScrape is the interval and timeout of the kvm job. Its checks get
	// it less --timeout-offset (1.5s): enough for a first dial through the
	// real sshd on a loaded machine. A check cut by its budget drops the
	// connection and the next one redials, which is what the test counts.
	shardScrape = "2s"
	// shardScrapes is how many scrapes of every host, after all are Ready,
	// must show no redial.
	shardScrapes = 3
)

// shardHosts are the KVM hosts, each a distinct loopback address of the one
// sshd. Their names are picked so that hashmod over NAME/HOST spreads them
// over both replicas (the test checks that it does).
var shardHosts = []string{"host-a", "host-b", "host-c", "host-d", "host-e", "host-f"}

// deployReplicas are the replica addresses of shardedConfig, which the test
// replaces with those of the replicas it starts.
var deployReplicas = []string{"provider-health-exporter-0:9877", "provider-health-exporter-1:9877"}

// TestShardedKVM runs deploy/prometheus/prometheus-sharded.yml: two exporter
// replicas with the same config of six KVM hosts, and a real Prometheus that
// discovers the hosts from a replica's /sd and whose hashmod relabelling
// sends each host's /probe scrape to one replica.
// The hosts are real: one OpenSSH sshd listening on six loopback addresses
// (127.0.0.1 to 127.0.0.6) and an unprivileged libvirtd with a running dir
// pool, started by testdata/kvm/ctl.sh, so it needs root. The test asserts
// that every host is Ready and scraped from exactly the replica its hash
// names, that both replicas have hosts, that the replicas established one
// connection per host in all (provider_health_kvm_connects_total summed,
// and sshd's own log), and that neither replica ever checked a host of the
// other (its /api/v1/status).
func TestShardedKVM(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: testdata/kvm/ctl.sh starts sshd and runs libvirtd as nobody")
	}
	start := time.Now()
	step := func(format string, args ...any) {
		t.Logf("[%5.1fs] %s", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}

	root, err := filepath.Abs(filepath.Join("..", ".."))
	must(t, err)
	dir := workDir(t)
	exporterBin := exporterBinary(t, root, dir)
	prometheusBin := lookBinary(t, envPrometheus, "prometheus")
	home := filepath.Join(dir, "home")
	must(t, os.MkdirAll(home, 0o700))

	kvm := startKVMHosts(t, root, len(shardHosts))
	step("sshd on %s, libvirtd with pool %s", strings.Join(kvm.addresses, " "), kvm.env["KVM_IT_POOL"])

	// The same file for both replicas: every replica knows every host.
	exporterConfig := filepath.Join(dir, "provider_health.yml")
	var hosts []map[string]string
	for i, h := range shardHosts {
		hosts = append(hosts, map[string]string{"Name": h, "Address": kvm.addresses[i]})
	}
	writeTemplate(t, exporterConfig, shardExporterConfigTmpl, map[string]any{
		"Name": shardName, "User": kvm.env["KVM_IT_USER"], "Key": kvm.env["KVM_IT_KEY"],
		"KnownHosts": kvm.env["KVM_IT_KNOWN_HOSTS"], "Socket": kvm.env["KVM_IT_SOCKET"],
		"URI": kvm.env["KVM_IT_URI"], "Pool": kvm.env["KVM_IT_POOL"], "Hosts": hosts,
	})
	replicas := make([]string, len(deployReplicas))
	procs := make([]*process, len(deployReplicas))
	for i := range replicas {
		procs[i], replicas[i] = startExporter(t, dir, fmt.Sprintf("exporter-%d", i), exporterBin, exporterConfig, home)
	}
	step("replicas ready at %v", replicas)

	// What the kvm job hashes: NAME/HOST, the discovered __param_name and
	// __param_target joined by the rule's separator.
	var targets []string
	for _, h := range shardHosts {
		targets = append(targets, shardName+"/"+h)
	}
	promConfig, modulus := renderShardedConfig(t, root, dir, replicas)
	if modulus != uint64(len(replicas)) {
		t.Fatalf("%s: hashmod modulus %d, but it maps %d replicas", shardedConfig, modulus, len(replicas))
	}
	// Which replica each host must land on: Prometheus' hashmod is the md5
	// of the source label values joined by the separator (NAME/HOST), its
	// last 8 bytes as a big-endian integer, modulo the modulus.
	want := map[string]string{}
	perReplica := map[string]int{}
	for i, h := range shardHosts {
		sum := md5.Sum([]byte(targets[i]))
		r := replicas[binary.BigEndian.Uint64(sum[8:])%modulus]
		want[h] = r
		perReplica[r]++
	}
	if len(perReplica) != len(replicas) {
		t.Fatalf("the host names do not spread over every replica: %v; pick others", want)
	}
	step("rendered %s; hosts per replica: %v", shardedConfig, want)

	prom := startPrometheus(t, dir, prometheusBin, promConfig, home)
	step("prometheus %s ready at %s", prom.version(), prom.url)

	// 1. Every host becomes Ready, each from one replica.
	readyQuery := fmt.Sprintf(`provider_health_ready{provider="kvm",name=%q}`, shardName)
	waitFor(t, "every host to be Ready in Prometheus", prom.proc, func() (bool, string) {
		got := prom.query(readyQuery)
		ready := 0
		for _, s := range got {
			if s.value == "1" {
				ready++
			}
		}
		if len(got) == len(shardHosts) && ready == len(shardHosts) {
			return true, ""
		}
		return false, fmt.Sprintf("ready: %v; reasons: %v", got, prom.query(fmt.Sprintf(`provider_health_reason{name=%q} == 1`, shardName)))
	})
	step("every host Ready")

	// 2. A few more scrapes of every host, so that a redial would show.
	scrapes := func() map[string]int {
		out := map[string]int{}
		for _, s := range prom.query(fmt.Sprintf(`count_over_time(%s[1h])`, readyQuery)) {
			n, err := strconv.Atoi(s.value)
			must(t, err)
			out[s.metric["target"]] += n
		}
		return out
	}
	first := scrapes()
	waitFor(t, fmt.Sprintf("%d more scrapes of every host", shardScrapes), prom.proc, func() (bool, string) {
		now := scrapes()
		for _, h := range shardHosts {
			if now[h] < first[h]+shardScrapes {
				return false, fmt.Sprintf("scrapes now %v, at Ready %v", now, first)
			}
		}
		return true, ""
	})
	step("%d more scrapes of every host", shardScrapes)

	// 3. Each host's series came from exactly the replica of its hash,
	// over the whole run, and are Ready.
	seen := map[string][]string{}
	for _, s := range prom.query(fmt.Sprintf(`count by (target, replica) (count_over_time(provider_health_up{provider="kvm",name=%q}[1h]))`, shardName)) {
		seen[s.metric["target"]] = append(seen[s.metric["target"]], s.metric["replica"])
	}
	for _, h := range shardHosts {
		if got := seen[h]; len(got) != 1 || got[0] != want[h] {
			t.Errorf("host %s scraped from replicas %q, want only %s", h, got, want[h])
		}
	}
	for _, s := range prom.query(readyQuery) {
		if s.value != "1" || s.metric["job"] != job || s.metric["replica"] != want[s.metric["target"]] {
			t.Errorf("%s, want 1 with job=%q and replica=%q", s, job, want[s.metric["target"]])
		}
	}
	step("every host from its own replica only: %v", seen)

	// 4. One connection per host in all: the kept ones, no redial, none
	// from the other replica.
	connects := fmt.Sprintf(`provider_health_kvm_connects_total{name=%q}`, shardName)
	total := prom.query(fmt.Sprintf(`sum(%s)`, connects))
	if len(total) != 1 || total[0].value != strconv.Itoa(len(shardHosts)) {
		t.Errorf("sum(%s) = %v, want %d; per host: %v", connects, total, len(shardHosts), prom.query(connects))
	}
	step("sum(provider_health_kvm_connects_total) over the replicas: %v", total)

	// 5. The exporter's own metrics come from every replica, and checking
	// nothing there: no provider series under a replica's instance.
	for _, r := range replicas {
		q := fmt.Sprintf(`provider_health_exporter_config_last_reload_successful{job=%q,instance=%q,replica=%q}`, job, r, r)
		waitFor(t, q+" == 1", prom.proc, func() (bool, string) {
			got := prom.query(q)
			return len(got) == 1 && got[0].value == "1", fmt.Sprint(got)
		})
		if got := prom.query(fmt.Sprintf(`provider_health_up{instance=%q}`, r)); len(got) != 0 {
			t.Errorf("/metrics?collect[]=exporter of %s checked providers: %v", r, got)
		}
	}

	// 6. Each replica says itself that it never checked (so never dialed)
	// a host of the other: /api/v1/status only reports, it starts nothing.
	for _, r := range replicas {
		var status struct {
			Providers []struct {
				Targets []struct {
					Target  string `json:"target"`
					Checked bool   `json:"checked"`
					Ready   bool   `json:"ready"`
				} `json:"targets"`
			} `json:"providers"`
		}
		must(t, json.Unmarshal([]byte(get(t, "http://"+r+"/api/v1/status?name="+shardName)), &status))
		if len(status.Providers) != 1 || len(status.Providers[0].Targets) != len(shardHosts) {
			t.Fatalf("%s /api/v1/status?name=%s: %+v, want one provider with %d targets", r, shardName, status, len(shardHosts))
		}
		for _, tg := range status.Providers[0].Targets {
			own := want[tg.Target] == r
			if tg.Checked != own || tg.Ready != own {
				t.Errorf("replica %s, host %s: checked=%v ready=%v, want %v (its replica is %s)", r, tg.Target, tg.Checked, tg.Ready, own, want[tg.Target])
			}
		}
	}
	step("each replica checked its own hosts only (/api/v1/status)")

	// 7. sshd saw it too: one SSH session per host address in the whole run.
	sessions := kvm.sshSessions(t)
	for i, h := range shardHosts {
		if n := sessions[strings.Split(kvm.addresses[i], ":")[0]]; n != 1 {
			t.Errorf("sshd accepted %d sessions on %s (host %s), want 1", n, kvm.addresses[i], h)
		}
	}
	step("sshd accepted one session per host: %v", sessions)

	for _, p := range procs {
		if done, err := p.exited(); done {
			t.Errorf("%s exited during the test: %v", p.name, err)
		}
	}
}

// shardExporterConfigTmpl is the one config of both replicas.
const shardExporterConfigTmpl = `kvm:
  - name: {{.Name}}
    user: {{.User}}
    private_key_file: {{.Key}}
    known_hosts_file: {{.KnownHosts}}
    libvirt_socket: {{.Socket}}
    libvirt_uri: {{.URI}}
    pool: {{.Pool}}
    hosts:
{{- range .Hosts}}
      - address: {{.Address}}
        name: {{.Name}}
{{- end}}
`

// renderShardedConfig writes shardedConfig for the test: the replicas'
// addresses in place of deployReplicas (in the /sd URL the kvm job discovers
// its hosts from too), scrapes every second (every shardScrape for the kvm
// job), discovery refreshed every second, no rules and no Alertmanager.
// Everything else, the discovery and the relabelling above all, is the
// committed file's: the hosts come from the exporter's /sd. It returns the
// path and the hashmod modulus.
func renderShardedConfig(t *testing.T, root, dir string, replicas []string) (string, uint64) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, shardedConfig))
	must(t, err)
	var cfg map[string]any
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatalf("%s: %v", shardedConfig, err)
	}
	repl := map[string]string{}
	for i, r := range deployReplicas {
		repl[r] = replicas[i]
	}
	replaced := map[string]int{}
	cfg = replaceStrings(cfg, repl, replaced).(map[string]any)
	for _, r := range deployReplicas {
		// Once in the exporter job's targets, once in the kvm job's
		// relabelling.
		if replaced[r] < 2 {
			t.Fatalf("%s names replica %s %d times, want it in both jobs", shardedConfig, r, replaced[r])
		}
	}

	cfg["global"] = map[string]any{"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"}
	delete(cfg, "rule_files")
	delete(cfg, "alerting")
	jobs, _ := cfg["scrape_configs"].([]any)
	var probes []map[string]any
	for _, j := range jobs {
		if j, ok := j.(map[string]any); ok && j["http_sd_configs"] != nil {
			probes = append(probes, j)
		}
	}
	if len(probes) != 1 {
		t.Fatalf("%s has %d jobs discovering from /sd, want the one kvm job", shardedConfig, len(probes))
	}
	kvmJob := probes[0]
	if kvmJob["static_configs"] != nil || kvmJob["metrics_path"] != nil {
		t.Fatalf("%s: the kvm job names targets or a path itself; /sd gives both", shardedConfig)
	}
	sds, _ := kvmJob["http_sd_configs"].([]any)
	sdURL := "http://" + deployReplicas[0] + "/sd"
	if len(sds) != 1 || sds[0].(map[string]any)["url"] != sdURL {
		t.Fatalf("%s: http_sd_configs %v, want the one url %s", shardedConfig, sds, sdURL)
	}
	sds[0].(map[string]any)["url"] = "http://" + replicas[0] + "/sd"
	sds[0].(map[string]any)["refresh_interval"] = "1s"
	kvmJob["scrape_interval"], kvmJob["scrape_timeout"] = shardScrape, shardScrape

	var modulus uint64
	rules, _ := kvmJob["relabel_configs"].([]any)
	for _, r := range rules {
		if r, ok := r.(map[string]any); ok && r["action"] == "hashmod" {
			if src, _ := r["source_labels"].([]any); len(src) != 2 || src[0] != "__param_name" || src[1] != "__param_target" || r["separator"] != "/" {
				t.Fatalf("%s: hashmod over %v separated by %v; the test computes it over __param_name/__param_target (NAME/HOST)", shardedConfig, r["source_labels"], r["separator"])
			}
			m, ok := r["modulus"].(int)
			if !ok || m < 1 {
				t.Fatalf("%s: hashmod modulus %v", shardedConfig, r["modulus"])
			}
			modulus = uint64(m)
		}
	}
	if modulus == 0 {
		t.Fatalf("%s: no hashmod rule in the kvm job", shardedConfig)
	}

	out, err := yaml.Marshal(cfg)
	must(t, err)
	return writeFile(t, dir, "prometheus-sharded.yml", string(out)), modulus
}

// replaceStrings returns v with every string that is a key of repl replaced
// by its value, counting the replacements in n.
func replaceStrings(v any, repl map[string]string, n map[string]int) any {
	switch v := v.(type) {
	case string:
		if r, ok := repl[v]; ok {
			n[v]++
			return r
		}
	case map[string]any:
		for k, e := range v {
			v[k] = replaceStrings(e, repl, n)
		}
	case []any:
		for i, e := range v {
			v[i] = replaceStrings(e, repl, n)
		}
	}
	return v
}

// kvmHosts are the real sshd and libvirtd of testdata/kvm/ctl.sh.
type kvmHosts struct {
	state string
	env   map[string]string // ctl.sh's env file
	// addresses are sshd's, one per host, all on one port.
	addresses []string
}

// startKVMHosts starts sshd listening on n loopback addresses, 127.0.0.1 to
// 127.0.0.n, and libvirtd, with ctl.sh, which stops them by their PIDs at
// the end of the test.
func startKVMHosts(t *testing.T, root string, n int) *kvmHosts {
	t.Helper()
	// Directly under /tmp, as ctl.sh wants it: libvirtd runs as nobody and
	// must reach its state, which a private TMPDIR or t.TempDir's parent
	// (0700) would keep it from.
	state, err := os.MkdirTemp("/tmp", "phe-e2e-kvm.")
	must(t, err)
	ctl := filepath.Join(root, "testdata", "kvm", "ctl.sh")
	t.Cleanup(func() {
		cmd := exec.Command(ctl, "stop", state)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("ctl.sh stop %s: %v\n%s", state, err, out)
		}
		if t.Failed() {
			for _, f := range []string{"sshd.log", "libvirtd.log"} {
				if b, err := os.ReadFile(filepath.Join(state, f)); err == nil {
					t.Logf("--- %s (%s) ---\n%s", f, state, lastLines(string(b), 60))
				}
			}
		}
		if os.Getenv(envKeep) != "" {
			t.Logf("kept the kvm state directory %s", state)
			return
		}
		if err := os.RemoveAll(state); err != nil {
			t.Errorf("remove %s: %v", state, err)
		}
	})
	var addrs []string
	for i := 1; i <= n; i++ {
		addrs = append(addrs, fmt.Sprintf("127.0.0.%d", i))
	}
	env := append(os.Environ(), "KVM_CTL_SSH_ADDRESSES="+strings.Join(addrs, ","))
	run(t, root, env, ctl, "start", state)

	k := &kvmHosts{state: state, env: map[string]string{}}
	b, err := os.ReadFile(filepath.Join(state, "env"))
	must(t, err)
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if key, value, ok := strings.Cut(line, "="); ok {
			k.env[key] = value
		}
	}
	k.addresses = strings.Split(k.env["KVM_IT_ADDRESSES"], ",")
	if len(k.addresses) != n {
		t.Fatalf("ctl.sh: KVM_IT_ADDRESSES=%q, want %d addresses", k.env["KVM_IT_ADDRESSES"], n)
	}
	return k
}

var (
	sshdConnection = regexp.MustCompile(`^Connection from \S+ port (\d+) on (\S+) port \d+`)
	sshdAccepted   = regexp.MustCompile(`^Accepted publickey for \S+ from \S+ port (\d+) `)
)

// sshSessions counts the sessions sshd accepted per local address, from its
// log: a connection is logged with the address it came in on, its
// authentication with the client's port only.
func (k *kvmHosts) sshSessions(t *testing.T) map[string]int {
	t.Helper()
	f, err := os.Open(filepath.Join(k.state, "sshd.log"))
	must(t, err)
	defer f.Close()
	local := map[string]string{} // client port -> local address
	out := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m := sshdConnection.FindStringSubmatch(sc.Text()); m != nil {
			local[m[1]] = m[2]
		} else if m := sshdAccepted.FindStringSubmatch(sc.Text()); m != nil {
			out[local[m[1]]]++
		}
	}
	must(t, sc.Err())
	return out
}
