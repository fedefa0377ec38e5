package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// reloadConfigBytesEnv sets the size of the configuration
// TestLargeReloadsUnderTheDeploymentLimit reloads: 16 MiB, the cap of a
// configuration file, unless set (testdata/bench/reload-memory.sh).
const reloadConfigBytesEnv = "PROVIDER_HEALTH_RELOAD_TEST_BYTES"

// TestLargeReloadsUnderTheDeploymentLimit: the real binary, under the
// Deployment's memory limit, loads a configuration of one KVM entry of
// as many hosts as fill 16 MiB (some 260,000), then reloads it five
// times, twice with one host fewer or back, so that the entry is built
// anew, and once more with an unknown field in a host, which is refused:
// the peak resident size (VmHWM) stays under the Deployment's 256 MiB,
// every reload of a valid file succeeds, and the refused ones (an unknown
// field; a syntax error, a duplicate top-level key, an anchor used across
// pieces, a tab, "\r\n" with a syntax error: none decoded whole) keep the
// configuration in force (docs/scaling.md: "Large configurations"). Before, the node tree of the whole file (211 MiB) and
// a state of some 600 bytes per host made the peak 605-621 MiB.
func TestLargeReloadsUnderTheDeploymentLimit(t *testing.T) {
	// Not parallel: its peak must be its own.
	size := 16<<20 - 1
	if v := os.Getenv(reloadConfigBytesEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1<<10 || n >= 16<<20 {
			t.Fatalf("%s=%q: want a size in bytes, at least 1024 and under 16 MiB", reloadConfigBytesEnv, v)
		}
		size = n
	}
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "key"), "not a key")
	full := largeKVMConfig(size)
	// One host fewer: the same entry with other settings, built anew.
	fewer := full[:strings.LastIndex(full, "      - address:")]
	hosts := strings.Count(full, "- address:")
	path := filepath.Join(dir, "provider_health.yml")
	writeFile(t, path, full)

	var logs syncBuffer
	cmd, exited, addr := startExporterEnv(t, dir, &logs,
		[]string{fmt.Sprintf("PROVIDER_HEALTH_MEMORY_LIMIT=%d", deploymentMemoryLimit)}, "--config.file="+path)
	t.Logf("%d bytes, %d hosts: peak RSS (VmHWM) after the first load %.1f MiB",
		len(full), hosts, float64(peakResidentBytes(t, cmd.Process.Pid))/(1<<20))
	// A guard against a hang, not a measure of speed: a reload of 16 MiB
	// takes seconds, more on a loaded machine.
	client := &http.Client{Timeout: 5 * time.Minute}
	for i, text := range []string{full, fewer, fewer, full, full} {
		writeFile(t, path, text)
		resp, err := client.Post("http://"+addr+"/-/reload", "", nil)
		if err != nil {
			t.Fatalf("reload %d: %v\nlog:\n%.4000s", i+1, err, logs.String())
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("reload %d: %s %s", i+1, resp.Status, body)
		}
		t.Logf("reload %d: peak RSS (VmHWM) %.1f MiB", i+1, float64(peakResidentBytes(t, cmd.Process.Pid))/(1<<20))
	}
	// A file with an error is refused, the running configuration kept:
	// the error comes from the piece that holds it, with its line and
	// place, and the whole file's node tree is never built.
	bad := strings.Replace(fewer, "        name: proxy-host-000100\n", "        name: proxy-host-000100\n        passwd: x\n", 1)
	writeFile(t, path, bad)
	resp, err := client.Post("http://"+addr+"/-/reload", "", nil)
	if err != nil {
		t.Fatalf("reload of a file with an error: %v\nlog:\n%.4000s", err, logs.String())
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	resp.Body.Close()
	if want := `line 209: kvm[0] "fleet": hosts[100]: unknown field "passwd"`; resp.StatusCode != http.StatusInternalServerError || !strings.Contains(string(body), want) {
		t.Errorf("reload of a file with an error: %s %s; want 500 and %s", resp.Status, body, want)
	}
	t.Logf("a refused reload: peak RSS (VmHWM) %.1f MiB", float64(peakResidentBytes(t, cmd.Process.Pid))/(1<<20))
	// Files the list-by-list decode cannot cut, which it once handed to
	// decoding the whole file (and its node tree took the exporter past
	// its limit): refused with the line, from the pieces.
	deep := "        name: proxy-host-200000\n"
	if hosts < 200001 {
		deep = fmt.Sprintf("        name: proxy-host-%06d\n", hosts*3/4)
	}
	lineOf := func(text, marker string) int {
		before, _, found := strings.Cut(text, marker)
		if !found {
			t.Fatalf("no %q in the file", marker)
		}
		return strings.Count(before, "\n") + 1
	}
	syntax := strings.Replace(fewer, deep, deep+"        name: : :\n", 1)
	// With "\r\n", one byte more a line: hosts off the end keep it under
	// the 16 MiB cap of a file.
	crlf := syntax
	if excess := len(crlf) + strings.Count(crlf, "\n") - (size - 1); excess > 0 {
		crlf = crlf[:strings.LastIndex(crlf[:len(crlf)-excess], "      - address:")]
	}
	crlf = strings.ReplaceAll(crlf, "\n", "\r\n")
	for _, c := range []struct {
		name, text, want string
	}{
		{"a syntax error", syntax, fmt.Sprintf("yaml: line %d: mapping values are not allowed in this context", lineOf(syntax, "name: : :"))},
		{"a duplicate top-level key", fewer + "kvm:\n  - name: other\n", fmt.Sprintf(`line %d: mapping key "kvm" already defined at line 1`, strings.Count(fewer, "\n")+1)},
		{"an anchor used across pieces", strings.Replace(fewer, "address: 10.0.0.0:22", "address: &h 10.0.0.0:22", 1) + "      - address: *h\n",
			fmt.Sprintf("line %d: an alias (*h) of an anchor in another part of the file", strings.Count(fewer, "\n")+1)},
		{"a tab", strings.Replace(fewer, deep, deep+"\t\n", 1), fmt.Sprintf("line %d: a tab in the indentation", lineOf(fewer, deep)+1)},
		{"\\r\\n and a syntax error", crlf, fmt.Sprintf("yaml: line %d: mapping values are not allowed in this context", lineOf(syntax, "name: : :"))},
	} {
		writeFile(t, path, c.text)
		resp, err := client.Post("http://"+addr+"/-/reload", "", nil)
		if err != nil {
			t.Fatalf("reload of a file with %s: %v\nlog:\n%.4000s", c.name, err, logs.String())
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		resp.Body.Close()
		if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(string(body), c.want) {
			t.Errorf("reload of a file with %s: %s %s; want 500 and %s", c.name, resp.Status, body, c.want)
		}
		t.Logf("a refused reload of %d bytes with %s: peak RSS (VmHWM) %.1f MiB", len(c.text), c.name, float64(peakResidentBytes(t, cmd.Process.Pid))/(1<<20))
	}
	select {
	case err := <-exited:
		exited <- err
		t.Fatalf("the exporter exited: %v\nlog:\n%.4000s", err, logs.String())
	default:
	}
	s := scraper{t: t, addr: addr, header: 2 * time.Minute, logs: &logs}
	code, metrics := s.get("/metrics?collect[]=exporter")
	if code != http.StatusOK || !strings.Contains(metrics, "provider_health_exporter_config_last_reload_successful 0\n") {
		t.Errorf("/metrics: %d, the refused reload not reported:\n%.2000s", code, metrics)
	}
	log := logs.String()
	last, _, _ := strings.Cut(log[strings.LastIndex(log, `msg="loaded config"`)+1:], "\n")
	// The summary names every kind built in (the toy kind too, under its
	// tag): only the kvm part and the total are this test's.
	for _, want := range []string{fmt.Sprintf(" 1 kvm (%d hosts)", hosts), fmt.Sprintf(": %d targets", hosts)} {
		if !strings.Contains(last, want) {
			t.Errorf("the last reload's summary has no %q:\n%.2000s", want, log)
		}
	}
	peak := peakResidentBytes(t, cmd.Process.Pid)
	t.Logf("peak RSS (VmHWM) after five reloads of %d bytes and six refused ones: %.1f MiB", len(full), float64(peak)/(1<<20))
	if peak >= deploymentMemoryLimit {
		t.Errorf("peak RSS %.1f MiB, not under the Deployment's 256 MiB", float64(peak)/(1<<20))
	}
}
