package kubernetes

import (
	"context"
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The scale of BenchmarkFitWithPlugins, BenchmarkScheduleScale's.
const (
	benchNodes = 1000
	benchPods  = 20000
)

// scaleCluster is BenchmarkScheduleScale's cluster without an API
// server: 1,000 Nodes of 8 CPUs in three zones, 20,000 Pods of a
// Deployment's shape bound to them, as the watch caches hold them
// (stripNode, stripPod).
func scaleCluster() ([]*corev1.Node, []*corev1.Pod) {
	nodes := make([]*corev1.Node, 0, benchNodes)
	for i := range benchNodes {
		name := fmt.Sprintf("scale-node-%04d", i)
		nodes = append(nodes, stripNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels: map[string]string{corev1.LabelHostname: name, corev1.LabelTopologyZone: fmt.Sprintf("zone-%d", i%3)}},
			Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"),
				corev1.ResourceMemory: resource.MustParse("32Gi"), corev1.ResourcePods: resource.MustParse("110")}}}))
	}
	pods := make([]*corev1.Pod, 0, benchPods)
	for i := range benchPods {
		pods = append(pods, stripPod(&corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("app-%05d", i), Namespace: "apps", Labels: map[string]string{
				"app.kubernetes.io/name": "app", "app.kubernetes.io/instance": fmt.Sprintf("app-%d", i%50), "pod-template-hash": "5d8f7c9b6"}},
			Spec: corev1.PodSpec{NodeName: fmt.Sprintf("scale-node-%04d", i%benchNodes),
				Containers: []corev1.Container{{Name: "app", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
						corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")}}}}},
		}))
	}
	return nodes, pods
}

// BenchmarkFitWithPlugins is one scrape's fit at 1,000 Nodes and 20,000
// Pods (docs/scaling.md): a proxy with resources only, and one with
// anti-affinity to its own copies per node and a DoNotSchedule spread
// over the zones, whose 1,000 copies are placed one after another.
func BenchmarkFitWithPlugins(b *testing.B) {
	for _, bc := range []struct {
		name   string
		pod    *corev1.Pod
		copies int64
	}{
		{"resources", proxyPod(nil), 1000 * 12}, // per node 6 CPUs free / 500m
		{"anti-affinity+spread", proxyPod(func(p *corev1.Pod) { antiAffinity(corev1.LabelHostname)(p); zoneSpread(corev1.DoNotSchedule)(p) }), 1000},
	} {
		b.Run(bc.name, func(b *testing.B) {
			nodes, pods := scaleCluster()
			var r FitResult
			var err error
			b.ReportAllocs()
			cpu0 := cpuTime()
			for b.Loop() {
				if r, err = fitWithPlugins(context.Background(), bc.pod, nodes, pods, nil, 1<<53); err != nil {
					b.Fatal(err)
				}
			}
			// The process's CPU time per fit (GC included): on a shared,
			// loaded machine ns/op counts the waits for a core too.
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(r.Copies), "copies")
		})
	}
}

// BenchmarkStrippedPodBytes is the heap a watch cache's stripped Pod
// holds (docs/scaling.md), for 20,000 Pods of a Deployment's shape (three
// labels, a container port, requests) and of a proxy's (plus a host port
// and a required anti-affinity term): with what the scheduler's plugins
// read (labels, host ports, required pod affinity terms) and, for
// comparison, without it (requests only, as before the plugins).
func BenchmarkStrippedPodBytes(b *testing.B) {
	app := func(i int) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("app-%05d", i), Namespace: "apps", UID: "0f8b2a5e-3c1d-4b7a-9e6f-1a2b3c4d5e6f", ResourceVersion: "123456", Labels: map[string]string{
				"app.kubernetes.io/name": "app", "app.kubernetes.io/instance": fmt.Sprintf("app-%d", i%50), "pod-template-hash": "5d8f7c9b6"}},
			Spec: corev1.PodSpec{NodeName: fmt.Sprintf("scale-node-%04d", i%benchNodes),
				Containers: []corev1.Container{{Name: "app", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
						corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")}}}}},
		}
	}
	proxy := func(i int) *corev1.Pod {
		p := app(i)
		p.Labels = map[string]string{"app": "proxy", "pod-template-hash": "5d8f7c9b6"}
		hostPort(p)
		antiAffinity(corev1.LabelHostname)(p)
		return p
	}
	for _, bc := range []struct {
		name  string
		pod   func(int) *corev1.Pod
		terms bool
	}{{"deployment", app, true}, {"deployment-requests-only", app, false}, {"proxy", proxy, true}, {"proxy-requests-only", proxy, false}} {
		b.Run(bc.name, func(b *testing.B) {
			var perPod float64
			for b.Loop() {
				before := heapNow()
				pods := make([]*corev1.Pod, benchPods)
				for i := range pods {
					pods[i] = stripPod(bc.pod(i))
					if !bc.terms {
						pods[i].Labels, pods[i].Spec.Affinity = nil, nil
						if len(pods[i].Spec.Containers) == 1 {
							pods[i].Spec.Containers[0].Ports = nil
						}
					}
				}
				perPod = float64(heapNow()-before) / benchPods
				runtime.KeepAlive(pods)
			}
			b.ReportMetric(perPod, "heap-B/pod")
		})
	}
}

func heapNow() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// cpuTime is the process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// spreadCluster is the spread cluster: n Nodes of slots pod
// slots (and room for as many proxies) in three zones, nothing bound.
func spreadCluster(n, slots int) []*corev1.Node {
	nodes := make([]*corev1.Node, 0, n)
	for i := range n {
		name := fmt.Sprintf("spread-node-%03d", i)
		nodes = append(nodes, stripNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels: map[string]string{corev1.LabelHostname: name, corev1.LabelTopologyZone: fmt.Sprintf("zone-%d", i%3)}},
			Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourceCPU: *resource.NewMilliQuantity(int64(500*slots), resource.DecimalSI),
				corev1.ResourceMemory: resource.MustParse("4Ti"), corev1.ResourcePods: *resource.NewQuantity(int64(slots), resource.DecimalSI)}}}))
	}
	return nodes
}

// BenchmarkFitZoneSpread is the fit of a proxy with a zone spread
// (maxSkew 1, DoNotSchedule), no quota, on 100 Nodes in three zones
// (34, 33, 33): the copies counted (count.go) at 20 and 1,000 pod slots
// per Node, and placed one by one (simulate, the fit before the count)
// at 20, which is quadratic in the copies. The exact counts: with 1,000
// slots the two zones of 33 Nodes take 33,000 each and the third one
// more, 99,001; with 20, 1,981.
func BenchmarkFitZoneSpread(b *testing.B) {
	pod := proxyPod(zoneSpread(corev1.DoNotSchedule))
	for _, bc := range []struct {
		name     string
		slots    int
		copies   int64
		oneByOne bool
	}{
		{"counted/slots=1000", 1000, 99_001, false},
		{"counted/slots=20", 20, 1_981, false},
		{"one-by-one/slots=20", 20, 1_981, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var r FitResult
			b.ReportAllocs()
			cpu0 := cpuTime()
			for b.Loop() {
				nodes := spreadCluster(100, bc.slots)
				j, err := newJudge(context.Background(), pod, nil, nodes, nil, nil)
				if err != nil {
					b.Fatal(err)
				}
				if bc.oneByOne {
					r, err = simulate(pod, nodes, nodeUsage(nil), j, maxPlaced)
				} else {
					r, err = fitCopies(pod, nodes, nodeUsage(nil), j, maxPlaced)
				}
				j.close()
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(r.Copies), "copies")
			if r.Copies != bc.copies || r.Bounded {
				b.Errorf("%s", r.Message())
			}
		})
	}
}

// BenchmarkFitBoundAntiAffinity is one scrape's fit at 1,000 Nodes and
// 20,000 bound Pods each with one required anti-affinity term (to its own
// Deployment's Pods, per node: what running proxies look like), the
// template with a zone spread: the snapshot and the plugins' PreFilter
// read every bound Pod's term, and the 12,000 copies are counted.
func BenchmarkFitBoundAntiAffinity(b *testing.B) {
	nodes, pods := scaleCluster()
	for _, p := range pods {
		p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/instance": p.Labels["app.kubernetes.io/instance"]}},
			TopologyKey:   corev1.LabelHostname}}}}
	}
	pod := proxyPod(zoneSpread(corev1.DoNotSchedule))
	var r FitResult
	var err error
	b.ReportAllocs()
	cpu0 := cpuTime()
	for b.Loop() {
		if r, err = fitWithPlugins(context.Background(), pod, nodes, pods, nil, 1<<53); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(r.Copies), "copies")
}
