//go:build integration

package kubernetes

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"
)

// The scale of BenchmarkScheduleScale (docs/scaling.md: "schedule: watch caches and the node fit").
const (
	scaleNodes       = 1000
	scalePods        = 20000
	scaleNamespace   = "schedule-scale"
	scaleConcurrency = 16
)

// BenchmarkScheduleScale measures schedule at 1,000 Nodes and 20,000 Pods
// bound to them in the real kube-apiserver (testdata/bench/schedule.sh
// starts it): the watch caches' memory (heap after a forced GC, with the
// caches synced, less the heap before) per Node and per Pod, and the fit's
// time per scrape: the snapshot of both caches, the sum of the bound Pods'
// requests per node and the fit of a proxy Pod with anti-affinity per node
// and a zone spread, whose copies are placed one after another. The
// objects are created once per apiserver and reused by later runs.
func BenchmarkScheduleScale(b *testing.B) {
	cl := clusterFromEnv(b)
	admin := cl.clientset(b, cl.adminToken, nil)
	ctx := context.Background()
	seedNodes(b, admin)
	nodeBytes := cacheBytes(b, cl, func(ws *watchSet) int { n, _ := ws.snapshot(); return len(n) }, scaleNodes)
	seedPods(b, admin)
	total := cacheBytes(b, cl, func(ws *watchSet) int { _, p := ws.snapshot(); return len(p) }, scalePods)

	w := &watcher{logger: slog.New(slog.DiscardHandler)}
	defer func() { _ = w.Close(ctx) }()
	ws := w.ensure(cl.benchClient(b))
	if !ws.waitSynced(ctx) {
		b.Fatal("caches never synced")
	}
	// A proxy with anti-affinity to its own copies per node and a
	// DoNotSchedule spread over the three zones: its 1,000 copies are
	// placed one after another by the scheduler's plugins.
	pod := proxyPod(func(p *corev1.Pod) { antiAffinity(corev1.LabelHostname)(p); zoneSpread(corev1.DoNotSchedule)(p) })
	var r FitResult
	var err error
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	for b.Loop() {
		nodes, pods := ws.snapshot()
		if r, err = fitWithPlugins(ctx, pod, nodes, pods, nil, 1<<53); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	// CPU time per scrape's fit (BenchmarkFitWithPlugins says why).
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
	if r.Nodes != scaleNodes || r.Copies != scaleNodes {
		b.Fatalf("fit over %d nodes, %d copies: want one copy on each of %d nodes", r.Nodes, r.Copies, scaleNodes)
	}
	b.ReportMetric(float64(nodeBytes)/scaleNodes, "cache-B/node")
	b.ReportMetric(float64(total-nodeBytes)/scalePods, "cache-B/pod")
	b.ReportMetric(float64(total)/(1<<20), "cache-MiB")
}

// cacheBytes starts fresh watches, waits until they hold want objects
// (count), and returns how much the heap grew.
func cacheBytes(b *testing.B, cl *cluster, count func(*watchSet) int, want int) int64 {
	b.Helper()
	ctx := context.Background()
	heap := func() int64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	before := heap()
	w := &watcher{logger: slog.New(slog.DiscardHandler)}
	ws := w.ensure(cl.benchClient(b))
	if !ws.waitSynced(ctx) || count(ws) < want {
		b.Fatalf("caches hold %d objects, want %d", count(ws), want)
	}
	after := heap()
	runtime.KeepAlive(ws)
	if err := w.Close(ctx); err != nil {
		b.Fatal(err)
	}
	return after - before
}

// benchClient is the client a checker would build, for the watches.
func (c *cluster) benchClient(b *testing.B) *client {
	b.Helper()
	return &client{host: c.server, watchCfg: c.restConfig(b, c.adminToken, nil)}
}

func seedNodes(b *testing.B, admin *k8s.Clientset) {
	b.Helper()
	ctx := context.Background()
	l, err := admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "provider-health-test=scale", Limit: 1})
	if err != nil {
		b.Fatal(err)
	}
	if len(l.Items) > 0 {
		return
	}
	parallel(b, scaleNodes, func(i int) error {
		n, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("scale-node-%04d", i),
			Labels: map[string]string{"provider-health-test": "scale", "kubernetes.io/hostname": fmt.Sprintf("scale-node-%04d", i),
				"topology.kubernetes.io/zone": fmt.Sprintf("zone-%d", i%3), "node.kubernetes.io/instance-type": "n2-standard-8"},
		}}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		alloc := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi"),
			corev1.ResourcePods: resource.MustParse("110"), corev1.ResourceEphemeralStorage: resource.MustParse("100Gi")}
		n.Status.Capacity, n.Status.Allocatable = alloc, alloc
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}}
		n.Status.Images = []corev1.ContainerImage{{Names: []string{"registry.example/proxy@sha256:0123456789abcdef", "registry.example/proxy:1"}, SizeBytes: 50 << 20}}
		if n, err = admin.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			return err
		}
		// The TaintNodesByCondition admission's not-ready taint, which
		// no node controller lifts here.
		n.Spec.Taints = nil
		_, err = admin.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
}

func seedPods(b *testing.B, admin *k8s.Clientset) {
	b.Helper()
	ctx := context.Background()
	// With its default ServiceAccount, which the ServiceAccount admission
	// looks up and no controller-manager creates here.
	createNamespace(b, admin, scaleNamespace)
	l, err := admin.CoreV1().Pods(scaleNamespace).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		b.Fatal(err)
	}
	if len(l.Items) > 0 {
		return
	}
	parallel(b, scalePods, func(i int) error {
		// A Pod of the size a Deployment makes: labels, an owner, one
		// container with ports, env, probes' worth of fields.
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("app-%05d", i), Labels: map[string]string{
				"app.kubernetes.io/name": "app", "app.kubernetes.io/instance": fmt.Sprintf("app-%d", i%50), "pod-template-hash": "5d8f7c9b6"},
				Annotations: map[string]string{"kubectl.kubernetes.io/restartedAt": "2026-12-05T00:00:00Z"}},
			Spec: corev1.PodSpec{NodeName: fmt.Sprintf("scale-node-%04d", i%scaleNodes), AutomountServiceAccountToken: new(bool),
				Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1.2.3",
					Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
					Env:   []corev1.EnvVar{{Name: "LOG_LEVEL", Value: "info"}, {Name: "REGION", Value: "europe-west4"}},
					Resources: corev1.ResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
						Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")}}}}},
		}
		_, err := admin.CoreV1().Pods(scaleNamespace).Create(ctx, p, metav1.CreateOptions{})
		return err
	})
}

// parallel runs f(0..n-1), scaleConcurrency at a time; the first error
// fails the benchmark.
func parallel(b *testing.B, n int, f func(int) error) {
	b.Helper()
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	var failed atomic.Bool
	next := make(chan int)
	for range scaleConcurrency {
		wg.Go(func() {
			for i := range next {
				if failed.Load() {
					continue // drain: one error fails the benchmark
				}
				if err := f(i); err != nil && !apierrors.IsAlreadyExists(err) {
					once.Do(func() { first = err })
					failed.Store(true)
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if first != nil {
		b.Fatal(first)
	}
}
