//go:build promtool

// This test runs promtool (Debian's prometheus package): make mixin-test
// runs it with -tags promtool, so that make unit needs no package from apt.

package validate

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"
)

// overriddenRuleTest is a promtool test of ProviderHealthConfigReloadFailed
// as customRules sets it: severity critical (the mixin's is warning) after
// 10m (the mixin's is 5m). The mixin's own rule fails it: it fires at 7m,
// with severity warning.
const overriddenRuleTest = `rule_files:
  - rules.yaml
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'provider_health_exporter_config_last_reload_successful{job="provider-health", instance="exporter-a:9877"}'
        values: '1 0+0x20'
    alert_rule_test:
      - eval_time: 7m
        alertname: ProviderHealthConfigReloadFailed
        exp_alerts: []
      - eval_time: 12m
        alertname: ProviderHealthConfigReloadFailed
        exp_alerts:
          - exp_labels:
              severity: critical
              job: provider-health
              instance: exporter-a:9877
            exp_annotations:
              summary: The provider health exporter refused its new configuration.
              description: The exporter at exporter-a:9877 (job provider-health) failed to reload its configuration file and keeps checking with the previous one.
              runbook_url: https://github.com/egress-proxies/provider_health_exporter/blob/main/mixin/runbook.md#providerhealthconfigreloadfailed
`

// TestChartOverriddenRuleWithPromtool: the PrometheusRule rendered with
// prometheusRule.customRules passes promtool's test of the overridden
// alert, and the one rendered without the override fails it.
func TestChartOverriddenRuleWithPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not found (Debian package prometheus, installed by make deps)")
	}
	run := func(values map[string]any) (string, error) {
		c := renderChart(t, values)
		dir := t.TempDir()
		rules, err := yaml.Marshal(c.prometheusRule.Spec)
		if err != nil {
			t.Fatal(err)
		}
		for name, body := range map[string][]byte{"rules.yaml": rules, "test.yaml": []byte(overriddenRuleTest)} {
			if err := os.WriteFile(filepath.Join(dir, name), body, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		cmd := exec.Command(promtool, "test", "rules", "test.yaml")
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	overridden := map[string]any{"prometheusRule": map[string]any{"enabled": true, "customRules": map[string]any{
		"ProviderHealthConfigReloadFailed": map[string]any{"severity": "critical", "for": "10m"},
	}}}
	if out, err := run(overridden); err != nil {
		t.Errorf("promtool test rules of the overridden rule: %v\n%s", err, out)
	}
	if out, err := run(map[string]any{"prometheusRule": map[string]any{"enabled": true}}); err == nil {
		t.Errorf("promtool test rules passes the mixin's own rule too: the test proves nothing\n%s", out)
	}
}
