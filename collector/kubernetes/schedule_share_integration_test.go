//go:build integration

package kubernetes

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"
)

// apiserverWatches is the number of WATCH requests of nodes and pods the
// API server is serving, from its own apiserver_longrunning_requests.
func apiserverWatches(t *testing.T, admin *k8s.Clientset) int {
	t.Helper()
	body, err := admin.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_longrunning_requests{") || !strings.Contains(line, `verb="WATCH"`) ||
			!strings.Contains(line, `resource="nodes"`) && !strings.Contains(line, `resource="pods"`) {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		n += int(v)
	}
	return n
}

// TestIntegrationScheduleSharesCaches: schedule entries on one cluster
// with the same credentials hold one Node and one Pod watch between them:
// the API server serves as many watches of nodes and pods with eight
// entries as with one (its apiserver_longrunning_requests), and the last
// entry's removal ends them.
func TestIntegrationScheduleSharesCaches(t *testing.T) {
	cl := clusterFromEnv(t)
	admin := cl.clientset(t, cl.adminToken, nil)
	ns := "schedule-share"
	createNamespace(t, admin, ns)
	path := filepath.Join(t.TempDir(), "pod.yaml")
	if err := os.WriteFile(path, []byte(podSpec(`cpu: 100m`, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	pt, err := ReadPodTemplate(path)
	if err != nil {
		t.Fatal(err)
	}
	kc := cl.kubeconfigFor(t, cl.adminToken, nil)
	base := apiserverWatches(t, admin)
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	// waitWatches polls the API server's gauge until it says want: a
	// watch is counted once its request is served, some time after the
	// caches synced.
	waitWatches := func(want int) int {
		deadline := time.Now().Add(30 * time.Second)
		for {
			got := apiserverWatches(t, admin) - base
			if got == want || time.Now().After(deadline) {
				return got
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	hub := newWatchHub()
	run := func(entries int) (watches int, heapGrowth int64) {
		before := heap()
		var cs []*Checker
		for i := range entries {
			c, err := newChecker(&Entry{Name: fmt.Sprintf("share-%d", i), Kubeconfig: kc, LabelSelector: DefaultLabelSelector,
				Namespace: ns, PodTemplate: pt, Schedule: true}, slog.New(slog.DiscardHandler), hub)
			if err != nil {
				t.Fatal(err)
			}
			cs = append(cs, c)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			v := c.Check(ctx, slog.New(slog.DiscardHandler), TargetName)
			cancel()
			if !v.Capacity.Known {
				t.Fatalf("entry %d: no capacity: %s %s", i, v.Reason, v.Message)
			}
		}
		// Nodes, bound Pods, and Pods nominated to a node (nominated.go).
		watches = waitWatches(3)
		heapGrowth = int64(heap()) - int64(before)
		for _, c := range cs {
			if err := c.Close(); err != nil {
				t.Error(err)
			}
		}
		if got := waitWatches(0); got != 0 {
			t.Errorf("%d watches of nodes and pods left after every entry was closed", got)
		}
		return watches, heapGrowth
	}
	w1, h1 := run(1)
	w8, h8 := run(8)
	t.Logf("watches of nodes and pods served: %d with one entry, %d with eight; heap grown by %d and %d bytes", w1, w8, h1, h8)
	if w1 != 3 || w8 != 3 {
		t.Errorf("the API server serves %d watches for one entry and %d for eight, want 3 (nodes, bound and nominated pods) for both", w1, w8)
	}
	if hub.running() != 0 {
		t.Errorf("%d sets of caches still run", hub.running())
	}
	_ = admin.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
}
