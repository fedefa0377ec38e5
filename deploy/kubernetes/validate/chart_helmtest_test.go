package validate

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestChartHelmTestRunsConfigCheck runs what the helm test Pod runs — the
// real exporter, built from this repository, with the Pod's args — on the
// configuration the chart renders into its ConfigMap: it passes the chart's
// default, and fails, naming the mistake, on a configuration the schema
// lets through but the exporter refuses (a name used twice).
func TestChartHelmTestRunsConfigCheck(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "provider_health_exporter")
	build := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "./cmd/provider_health_exporter")
	build.Dir = repoRoot
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	dup := map[string]any{"config": map[string]any{
		"kubernetes": []any{map[string]any{"name": "prod"}},
		"gcp":        []any{map[string]any{"name": "prod", "project": "crawl-prod-123"}},
	}}
	for _, tc := range []struct {
		name   string
		values map[string]any
		ok     bool
		want   string
	}{
		{"the chart's default", nil, true, "SUCCESS"},
		{"a name used twice", dup, false, `"prod" is already used`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := renderChart(t, tc.values)
			if c.testPod == nil {
				t.Fatal("no helm test Pod")
			}
			ctr := c.testPod.Spec.Containers[0]
			var cmName string
			for _, v := range c.testPod.Spec.Volumes {
				if v.Name == "config" && v.ConfigMap != nil {
					cmName = v.ConfigMap.Name
				}
			}
			var mountPath string
			for _, m := range ctr.VolumeMounts {
				if m.Name == "config" {
					mountPath = m.MountPath
				}
			}
			cm, ok := c.configMaps[cmName]
			if !ok || mountPath == "" {
				t.Fatalf("the test Pod mounts ConfigMap %q at %q; rendered: %v", cmName, mountPath, c.configMaps)
			}
			dir := t.TempDir()
			for name, data := range cm.Data {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			args := make([]string, len(ctr.Args))
			for i, a := range ctr.Args {
				args[i] = strings.ReplaceAll(a, mountPath, dir)
			}
			cmd := exec.CommandContext(t.Context(), bin, args...)
			// No Google credentials are looked up off this machine.
			cmd.Env = append(os.Environ(), "GCE_METADATA_HOST=127.0.0.1:1", "GCE_METADATA_IP=127.0.0.1:1")
			out, err := cmd.CombinedOutput()
			if (err == nil) != tc.ok || !strings.Contains(string(out), tc.want) {
				t.Errorf("%s %q: %v\n%s\nwant success=%v and %q", bin, args, err, out, tc.ok, tc.want)
			}
		})
	}
}
