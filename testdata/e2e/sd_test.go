//go:build e2e

package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/egress-proxies/provider_health_exporter/internal/testnet"
)

// probeConfig is the example the service discovery test runs: its
// http_sd_configs and relabelling, not a copy of them, decide what
// Prometheus scrapes.
const probeConfig = "deploy/prometheus/prometheus-probe.yml"

// deployExporter is the exporter's address in probeConfig, which the test
// replaces with that of the exporter it starts.
const deployExporter = "provider-health-exporter:9877"

// TestServiceDiscovery runs deploy/prometheus/prometheus-probe.yml against
// the real exporter: a Prometheus that knows nothing but the exporter's
// /sd URL scrapes every entry and KVM host through /probe, each as its own
// target with the instance NAME or NAME/HOST and job provider-health, and
// picks up a KVM host added by a reload of the exporter alone, without any
// change to its own configuration.
func TestServiceDiscovery(t *testing.T) {
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

	kubeAPI := newKubeAPI(t)
	tokens := newTokenServer(t, &strSet{})
	compute := newComputeAPI(t, root)
	kubeconfig := writeFile(t, dir, "kubeconfig", fmt.Sprintf(kubeconfigTmpl, kubeAPI.URL, kubeAPI.caData(), kubeToken))
	saFile := writeServiceAccount(t, dir, tokens.URL+"/token")
	sshKey := filepath.Join(dir, "id_ed25519")
	run(t, "", nil, "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "provider-health-e2e", "-f", sshKey)
	exporterConfig := filepath.Join(dir, "provider_health.yml")
	cfgData := map[string]any{
		"Kubeconfig": kubeconfig, "KubeName": kubeName,
		"GCPName": gcpName, "Project": gcpProject, "SAFile": saFile, "ComputeURL": compute.URL,
		"KVMName": kvmName, "KVMHost": kvmHost, "KVMAddress": testnet.RefusedAddr(t), "SSHKey": sshKey,
		// No real KVM host: /sd is asserted for the three entries above.
		"Headroom": false, "Quota": false, "Admission": false,
	}
	writeTemplate(t, exporterConfig, exporterConfigTmpl, cfgData)
	_, exporterAddr := startExporter(t, dir, "exporter", exporterBin, exporterConfig, home)
	step("exporter ready at %s", exporterAddr)

	prom := startPrometheus(t, dir, prometheusBin, renderProbeConfig(t, root, dir, exporterAddr), home)
	step("prometheus %s ready at %s", prom.version(), prom.url)

	// 1. Every entry and host is discovered and scraped, each as its own
	// target of job provider-health, and the exporter itself too.
	wantInstances := []string{kubeName, gcpName, kvmName + "/" + kvmHost}
	slices.Sort(wantInstances)
	waitInstances := func(want []string) {
		t.Helper()
		waitFor(t, fmt.Sprintf("provider_health_up of instances %v", want), prom.proc, func() (bool, string) {
			var got []string
			for _, s := range prom.query(fmt.Sprintf(`provider_health_up{job=%q}`, job)) {
				got = append(got, s.metric["instance"])
			}
			slices.Sort(got)
			return slices.Equal(got, want), fmt.Sprintf("instances %v; targets: %s", got, activeTargets(prom))
		})
	}
	waitInstances(wantInstances)
	for _, inst := range wantInstances {
		if got := prom.query(fmt.Sprintf(`up{job=%q,instance=%q}`, job, inst)); len(got) != 1 || got[0].value != "1" {
			t.Errorf("up of %s: %v, want one target up", inst, got)
		}
		// One scrape per target: its series are those of its own entry only.
		if got := prom.query(fmt.Sprintf(`count(provider_health_ready{instance=%q})`, inst)); len(got) != 1 || got[0].value != "1" {
			t.Errorf("the scrape of %s gives %v ready series, want 1", inst, got)
		}
	}
	// The exporter's own job is scraped on its own schedule: its first
	// scrape may come after every probe target's.
	waitFor(t, "the exporter's own metrics in Prometheus", prom.proc, func() (bool, string) {
		got := prom.query(fmt.Sprintf(`provider_health_exporter_config_last_reload_successful{job=%q,instance=%q}`, job, exporterAddr))
		return len(got) == 1, fmt.Sprint(got)
	})
	if got := prom.query(`{__name__=~"provider_health_.+",exported_provider!=""} or {__name__=~"provider_health_.+",exported_name!=""} or {__name__=~"provider_health_.+",exported_target!=""}`); len(got) != 0 {
		t.Errorf("series with exported_* labels: the discovered provider, name or target labels clash with the series' own: %v", got)
	}
	step("every target discovered and scraped: %v", wantInstances)

	// 2. A host added to the exporter's config and reloaded is scraped,
	// with Prometheus's configuration untouched.
	cfgData["KVMHost2"] = kvmHost + "-2"
	cfgData["KVMAddress2"] = testnet.RefusedAddr(t)
	writeTemplate(t, exporterConfig, exporterConfigTmpl+"      - address: {{.KVMAddress2}}\n        name: {{.KVMHost2}}\n", cfgData)
	if code, body := post(t, "http://"+exporterAddr+"/-/reload"); code != http.StatusOK {
		t.Fatalf("POST /-/reload: %d %s", code, body)
	}
	wantInstances = append(wantInstances, kvmName+"/"+kvmHost+"-2")
	slices.Sort(wantInstances)
	waitInstances(wantInstances)
	if got := prom.query(fmt.Sprintf(`provider_health_reason{instance=%q,target=%q,reason="Unreachable"}`, kvmName+"/"+kvmHost+"-2", kvmHost+"-2")); len(got) != 1 || got[0].value != "1" {
		t.Errorf("the added host's verdict in Prometheus: %v, want Unreachable", got)
	}
	step("the host added by the reload is scraped")
}

// renderProbeConfig writes probeConfig for the test: the exporter's address
// in place of deployExporter (in the static target and the /sd URLs),
// scrapes every 2s, discovery refreshed every second, no rules and no
// Alertmanager. Everything else is the committed file's.
func renderProbeConfig(t *testing.T, root, dir, exporterAddr string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, probeConfig))
	must(t, err)
	var cfg map[string]any
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatalf("%s: %v", probeConfig, err)
	}
	cfg["global"] = map[string]any{"scrape_interval": "2s", "scrape_timeout": "2s", "evaluation_interval": "2s"}
	delete(cfg, "rule_files")
	delete(cfg, "alerting")
	jobs, _ := cfg["scrape_configs"].([]any)
	sdJobs := 0
	for _, j := range jobs {
		j, _ := j.(map[string]any)
		delete(j, "scrape_interval")
		delete(j, "scrape_timeout")
		for _, sd := range asSlice(j["http_sd_configs"]) {
			sd := sd.(map[string]any)
			// A YAML alias may share one map between jobs: replaced already.
			if sd["url"] != "http://"+deployExporter+"/sd" && sd["url"] != "http://"+exporterAddr+"/sd" {
				t.Fatalf("%s: job %v discovers from %v, want http://%s/sd", probeConfig, j["job_name"], sd["url"], deployExporter)
			}
			sd["url"] = "http://" + exporterAddr + "/sd"
			sd["refresh_interval"] = "1s"
			sdJobs++
		}
		for _, sc := range asSlice(j["static_configs"]) {
			sc := sc.(map[string]any)
			for i, tg := range asSlice(sc["targets"]) {
				if tg == deployExporter {
					asSlice(sc["targets"])[i] = exporterAddr
				}
			}
		}
	}
	if sdJobs == 0 {
		t.Fatalf("%s: no job discovers from /sd", probeConfig)
	}
	out, err := yaml.Marshal(cfg)
	must(t, err)
	if strings.Contains(string(out), deployExporter) {
		t.Fatalf("%s names %s somewhere the test does not replace it", probeConfig, deployExporter)
	}
	return writeFile(t, dir, "prometheus-probe.yml", string(out))
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

// activeTargets lists Prometheus's active targets, for a failure message.
func activeTargets(prom *promAPI) string {
	var r struct {
		Data struct {
			ActiveTargets []struct {
				ScrapeURL string            `json:"scrapeUrl"`
				Labels    map[string]string `json:"labels"`
				Health    string            `json:"health"`
				LastError string            `json:"lastError"`
			} `json:"activeTargets"`
		} `json:"data"`
	}
	prom.get("/api/v1/targets", nil, &r)
	var out []string
	for _, at := range r.Data.ActiveTargets {
		out = append(out, fmt.Sprintf("%s %v %s %q", at.ScrapeURL, at.Labels, at.Health, at.LastError))
	}
	return strings.Join(out, "; ")
}
