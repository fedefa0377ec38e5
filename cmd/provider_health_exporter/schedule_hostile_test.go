package main

import (
	encbinary "encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// scheduleAPIServer is an API server for entries with schedule, one per
// path prefix: /grind/ watches a Node whose allocatable cpu is
// 1e-1000000000 (protobuf, as the exporter asks), /huge/ a good Node and
// then a 400 MiB JSON event, /configmaps/ answers the Nodes with
// ConfigMaps. The list call, the dry run (admitted as sent) and the quota
// list are answered alike. hugeSent counts the bytes of the 400 MiB event
// written.
func scheduleAPIServer(t *testing.T) (srv *httptest.Server, hugeSent *atomic.Int64) {
	t.Helper()
	hugeSent = &atomic.Int64{}
	node := func(name, cpu string) []byte {
		meta, err := (&metav1.ObjectMeta{Name: name, ResourceVersion: "5", Labels: map[string]string{"kubernetes.io/hostname": name}}).Marshal()
		if err != nil {
			t.Fatal(err)
		}
		return pbBytes(pbBytes(nil, 1, meta), 3, pbQuantities(nil, 2, map[string]string{"cpu": cpu, "memory": "8Gi", "pods": "110"}))
	}
	frame := func(typ string, obj []byte) []byte {
		b, err := (&metav1.WatchEvent{Type: typ, Object: runtime.RawExtension{Raw: obj}}).Marshal()
		if err != nil {
			t.Fatal(err)
		}
		return append(encbinary.BigEndian.AppendUint32(nil, uint32(len(b))), b...)
	}
	bookmark := func(kind string) []byte {
		meta, _ := (&metav1.ObjectMeta{ResourceVersion: "10", Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}).Marshal()
		return frame("BOOKMARK", pbAnswer(t, kind, pbBytes(nil, 1, meta)))
	}
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, rest, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		q := r.URL.Query()
		switch {
		case r.Method == http.MethodPost && rest == "api/v1/namespaces/"+testNamespace+"/pods":
			var pod map[string]any
			if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&pod); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			pod["metadata"].(map[string]any)["name"] = "proxy-x7k2p"
			b, _ := json.Marshal(pod)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write(b)
		case rest == "api/v1/namespaces/"+testNamespace+"/resourcequotas":
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"kind":"ResourceQuotaList","apiVersion":"v1","metadata":{},"items":[]}`)
		case rest == "api/v1/pods" && q.Get("watch") == "true":
			w.Header().Set("Content-Type", runtime.ContentTypeProtobuf)
			if q.Get("sendInitialEvents") == "true" {
				_, _ = w.Write(bookmark("Pod"))
			}
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		case rest == "api/v1/pods" && q.Get("fieldSelector") != "":
			writePB(w, pbAnswer(t, "PodList", pbBytes(nil, 1, pbBytes(nil, 2, []byte("10")))))
		case rest == "api/v1/pods":
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"kind":"PodList","apiVersion":"v1","metadata":{},"items":[]}`)
		case rest == "api/v1/nodes" && c == "configmaps" && q.Get("watch") != "true":
			writePB(w, pbAnswer(t, "ConfigMapList", pbBytes(nil, 1, pbBytes(nil, 2, []byte("10")))))
		case rest == "api/v1/nodes" && q.Get("watch") != "true":
			cpu := "4"
			if c == "grind" {
				cpu = "1e-1000000000"
			}
			writePB(w, pbAnswer(t, "NodeList", pbBytes(pbBytes(nil, 1, pbBytes(nil, 2, []byte("10"))), 2, node("n1", cpu))))
		case rest == "api/v1/nodes":
			w.Header().Set("Content-Type", runtime.ContentTypeProtobuf)
			if c == "huge" {
				// In JSON, which a server may send whatever was asked:
				// the Node (a watch-list's initial events), then the event.
				w.Header().Set("Content-Type", runtime.ContentTypeJSON)
				if q.Get("sendInitialEvents") == "true" {
					_, _ = io.WriteString(w, `{"type":"ADDED","object":{"kind":"Node","apiVersion":"v1","metadata":{"name":"n1","resourceVersion":"5","labels":{"kubernetes.io/hostname":"n1"}},"status":{"allocatable":{"cpu":"4","memory":"8Gi","pods":"110"}}}}`+"\n"+
						`{"type":"BOOKMARK","object":{"kind":"Node","apiVersion":"v1","metadata":{"resourceVersion":"10","annotations":{"k8s.io/initial-events-end":"true"}}}}`+"\n")
				}
				_, _ = io.WriteString(w, `{"type":"MODIFIED","object":{"kind":"Node","apiVersion":"v1","metadata":{"name":"n1","annotations":{"a":"`)
				chunk := []byte(strings.Repeat("x", 64<<10))
				for sent := 0; sent < 400<<20; sent += len(chunk) {
					if _, err := w.Write(chunk); err != nil {
						return
					}
					hugeSent.Add(int64(len(chunk)))
				}
				return
			}
			if q.Get("sendInitialEvents") == "true" {
				switch c {
				case "configmaps":
					meta, _ := (&metav1.ObjectMeta{Name: "cm", ResourceVersion: "5"}).Marshal()
					_, _ = w.Write(frame("ADDED", pbAnswer(t, "ConfigMap", pbBytes(nil, 1, meta))))
				case "grind":
					_, _ = w.Write(frame("ADDED", pbAnswer(t, "Node", node("n1", "1e-1000000000"))))
				default:
					_, _ = w.Write(frame("ADDED", pbAnswer(t, "Node", node("n1", "4"))))
				}
				_, _ = w.Write(bookmark("Node"))
			}
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, hugeSent
}

// cpuSeconds is the CPU time the process pid has used (utime + stime).
func cpuSeconds(t *testing.T, pid int) float64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// The fields after the command, which is in parentheses.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ
}

// TestHostileScheduleWatches: the real binary, under the Deployment's
// memory limit, with schedule entries whose API server sends a Node with
// allocatable cpu 1e-1000000000, a 400 MiB watch event, or ConfigMaps for
// the Nodes (docs/security.md: "Strings, labels and pages"). Before, the
// first pinned a core with the cache "still filling" for ever, the second
// got the process OOM-killed, the third read as an empty cluster
// (Unschedulable, 0/0 nodes). Now: Unschedulable naming the quantity, a
// watch cut at 16 MiB, BadResponse naming the kind; the peak RSS and CPU
// time are logged.
func TestHostileScheduleWatches(t *testing.T) {
	// Not parallel: its peak and its CPU time must be its own.
	dir := t.TempDir()
	srv, hugeSent := scheduleAPIServer(t)
	pod := filepath.Join(dir, "proxy-pod.yaml")
	writeFile(t, pod, "apiVersion: v1\nkind: Pod\nmetadata:\n  generateName: proxy-\nspec:\n  containers:\n    - name: proxy\n      image: registry.example/proxy:1\n      resources: {requests: {cpu: 500m}}\n")
	entry := func(name string) string {
		return fmt.Sprintf("  - name: %s\n    kubeconfig: %s\n    namespace: %s\n    pod_template: %s\n    schedule: true\n",
			name, plainKubeconfig(t, dir, name, srv.URL+"/"+name), testNamespace, pod)
	}
	cfgPath := filepath.Join(dir, "provider_health.yml")
	writeFile(t, cfgPath, "kubernetes:\n"+entry("good")+entry("grind")+entry("huge")+entry("configmaps"))
	var logs syncBuffer
	cmd, exited, addr := startExporterEnv(t, dir, &logs,
		[]string{fmt.Sprintf("PROVIDER_HEALTH_MEMORY_LIMIT=%d", deploymentMemoryLimit)}, "--config.file="+cfgPath)
	s := scraper{t: t, addr: addr, header: 20 * time.Second, logs: &logs}
	cpu0, wall0 := cpuSeconds(t, cmd.Process.Pid), time.Now()

	want := map[string]struct{ reason, message string }{
		"good":       {"Ready", "8 copies of the Pod fit on 1/1 nodes"},
		"grind":      {"Unschedulable", `0/1 nodes are available: 1 node(s) with a quantity that cannot be read (status.allocatable[cpu]: quantity "1e-1000000000": magnitude beyond 10^±64`},
		"configmaps": {"BadResponse", `the watch of nodes got an answer it cannot use`},
	}
	// A bound on a hang, not a measure of speed: the first checks wait
	// for the caches, the watch of ConfigMaps fails after its first event.
	deadline := time.Now().Add(3 * time.Minute)
	var st map[string]statusTarget
	for {
		s.get("/metrics")
		_, body := s.get("/api/v1/status")
		st = statusTargets(t, body)
		done := true
		for name, w := range want {
			if st[name].Reason != provider.Reason(w.reason) || !strings.Contains(st[name].Message, w.message) {
				done = false
			}
		}
		if done || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	for name, w := range want {
		if st[name].Reason != provider.Reason(w.reason) || !strings.Contains(st[name].Message, w.message) {
			t.Errorf("%s: %s %q, want %s with %q", name, st[name].Reason, st[name].Message, w.reason, w.message)
		}
	}
	if st["configmaps"].Capacity != nil {
		t.Errorf("configmaps: capacity %d exported from a list of ConfigMaps", *st["configmaps"].Capacity)
	}
	// The 400 MiB event: cut at 16 MiB each time the watch is started
	// again, and the process stays.
	waitUntil(t, 3*time.Minute, func() bool { return hugeSent.Load() > 0 }, &logs)
	for range 5 {
		s.get("/metrics")
		time.Sleep(2 * time.Second)
	}
	select {
	case err := <-exited:
		exited <- err
		t.Fatalf("the exporter exited: %v\nlog:\n%.4000s", err, logs.String())
	default:
	}
	_, body := s.get("/api/v1/status")
	huge := statusTargets(t, body)["huge"]
	peak := peakResidentBytes(t, cmd.Process.Pid)
	cpu, wall := cpuSeconds(t, cmd.Process.Pid)-cpu0, time.Since(wall0).Seconds()
	t.Logf("huge: %s %q; the 400 MiB event's bytes written before the exporter cut it: %d MiB in all", huge.Reason, huge.Message, hugeSent.Load()>>20)
	t.Logf("grind: %s %q", st["grind"].Reason, st["grind"].Message)
	t.Logf("configmaps: %s %q", st["configmaps"].Reason, st["configmaps"].Message)
	t.Logf("peak RSS (VmHWM) %.1f MiB; CPU %.1f s in %.0f s", float64(peak)/(1<<20), cpu, wall)
	if peak >= deploymentMemoryLimit {
		t.Errorf("peak RSS %.1f MiB, not under the Deployment's 256 MiB", float64(peak)/(1<<20))
	}
}
