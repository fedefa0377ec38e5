package main

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestSoftMemoryLimit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		env     map[string]string
		want    int64
		wantErr string
	}{
		{name: "nothing set", want: 0},
		{name: "the Deployment's limit", env: map[string]string{memoryLimitEnv: "268435456"}, want: 160 << 20},
		{name: "a small limit: half of it", env: map[string]string{memoryLimitEnv: "134217728"}, want: 64 << 20},
		{name: "a large limit: 90% of it", env: map[string]string{memoryLimitEnv: "2147483648"}, want: 1932735284},
		{name: "spaces around it", env: map[string]string{memoryLimitEnv: " 1000\n"}, want: 500},
		{name: "GOMEMLIMIT wins", env: map[string]string{memoryLimitEnv: "134217728", "GOMEMLIMIT": "64MiB"}, want: 0},
		{name: "a quantity, not bytes", env: map[string]string{memoryLimitEnv: "128Mi"}, wantErr: `PROVIDER_HEALTH_MEMORY_LIMIT="128Mi": want the container's memory limit as a positive number of bytes`},
		{name: "zero", env: map[string]string{memoryLimitEnv: "0"}, wantErr: `PROVIDER_HEALTH_MEMORY_LIMIT="0"`},
		{name: "negative", env: map[string]string{memoryLimitEnv: "-5"}, wantErr: `PROVIDER_HEALTH_MEMORY_LIMIT="-5"`},
		{name: "overflow", env: map[string]string{memoryLimitEnv: "99999999999999999999"}, wantErr: `PROVIDER_HEALTH_MEMORY_LIMIT="99999999999999999999"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := softMemoryLimit(func(k string) string { return tc.env[k] })
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("softMemoryLimit = %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}

// TestMemoryLimitFromTheContainer: the real binary, given the container's
// memory limit the way the downward API gives it, runs with that limit less
// 96 MiB for its mapped code as the Go runtime's soft limit (go_gc_gomemlimit_bytes of its own metrics);
// an explicit GOMEMLIMIT wins; a value that is not bytes stops the start
// with an error naming the variable.
func TestMemoryLimitFromTheContainer(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "provider_health.yml")
	writeFile(t, cfg, "kubernetes:\n  - name: k\n    kubeconfig: kubeconfig\n")
	writeFile(t, filepath.Join(dir, "kubeconfig"), "not read before a check\n")
	gomemlimit := regexp.MustCompile(`(?m)^go_gc_gomemlimit_bytes (\S+)$`)
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{[]string{"GOMEMLIMIT=", memoryLimitEnv + "=268435456"}, "1.6777216e+08"},
		{[]string{"GOMEMLIMIT=64MiB", memoryLimitEnv + "=134217728"}, "6.7108864e+07"},
	} {
		var logs syncBuffer
		_, _, addr := startExporterEnv(t, dir, &logs, tc.env, "--config.file="+cfg)
		resp, err := (&http.Client{Timeout: 30 * time.Second}).Get("http://" + addr + "/metrics?collect[]=exporter")
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		m := gomemlimit.FindSubmatch(body)
		if m == nil {
			t.Fatalf("%v: no go_gc_gomemlimit_bytes in the exporter's metrics:\n%s", tc.env, body)
		}
		if string(m[1]) != tc.want {
			t.Errorf("%v: go_gc_gomemlimit_bytes %s, want %s", tc.env, m[1], tc.want)
		}
	}

	var out bytes.Buffer
	cmd := exec.Command(binary(t), "--config.file="+cfg, "--web.listen-address=127.0.0.1:0")
	cmd.Env = append(cmd.Environ(), "GOMEMLIMIT=", memoryLimitEnv+"=128Mi")
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if code := exitCode(err); code != 1 || !strings.Contains(out.String(), memoryLimitEnv+`=\"128Mi\"`) {
		t.Errorf("with %s=128Mi: exit %v, want 1 and an error naming the variable; output:\n%s", memoryLimitEnv, err, out.String())
	}
}

func exitCode(err error) int {
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}
