package kubernetes

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ktypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	schedcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// termCluster is issue 52's cluster: nodes Nodes of 8 CPUs in three
// zones, 20 bound Pods per Node, each with one required anti-affinity
// term (per node, against its own app: running proxies look like this),
// as the watch caches hold them (stripNode, keepPod).
func termCluster(nodeCount int) ([]*corev1.Node, []*corev1.Pod) {
	nodes := make([]*corev1.Node, 0, nodeCount)
	for i := range nodeCount {
		name := fmt.Sprintf("scale-node-%04d", i)
		nodes = append(nodes, stripNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels: map[string]string{corev1.LabelHostname: name, corev1.LabelTopologyZone: fmt.Sprintf("zone-%d", i%3)}},
			Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"),
				corev1.ResourceMemory: resource.MustParse("32Gi"), corev1.ResourcePods: resource.MustParse("110")}}}))
	}
	pods := make([]*corev1.Pod, 0, 20*nodeCount)
	for i := range 20 * nodeCount {
		app := fmt.Sprintf("app-%d", i%50)
		pods = append(pods, keepPod(&corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("app-%05d", i), Namespace: "apps", UID: ktypes.UID(fmt.Sprintf("uid-%05d", i)),
				Labels: map[string]string{"app.kubernetes.io/name": "app", "app.kubernetes.io/instance": app, "pod-template-hash": "5d8f7c9b6"}},
			Spec: corev1.PodSpec{NodeName: fmt.Sprintf("scale-node-%04d", i%nodeCount),
				Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
					LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/instance": app}}, TopologyKey: corev1.LabelHostname}}}},
				Containers: []corev1.Container{{Name: "app", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")}}}}},
		}))
	}
	return nodes, pods
}

// fedCache is the cluster cache as the watches' handlers fill it.
func fedCache(ctx context.Context, nodes []*corev1.Node, pods []*corev1.Pod) *clusterCache {
	initSchedulerMetrics()
	cc := &clusterCache{cache: schedcache.New(ctx, nil, false, false), logger: klog.Background().V(10)}
	for _, n := range nodes {
		cc.cache.AddNode(cc.logger, n)
	}
	for _, p := range pods {
		_ = cc.cache.AddPod(cc.logger, p)
	}
	return cc
}

// BenchmarkFitClusterCache is one scrape's fit at 1,000 Nodes and 20,000
// bound Pods with a required anti-affinity term each, the template a
// proxy with a zone spread (DoNotSchedule), no quota (docs/scaling.md):
// "rebuild" is the fit as it was (a snapshot and every Pod's terms built
// at each fit), "cache" the fit on the cluster cache's snapshot, with 1
// and with 8 entries fitting at once on one cluster; "same" entries fit
// one Pod (sharedfit.go), "distinct" ones eight Pods that differ in a
// label. Before each scrape one bound Pod changes (a watch event), as on
// a live cluster, so no scrape finds the last one's result. cpu-ns/scrape
// is the process's CPU time for all the entries' fits of one scrape.
func BenchmarkFitClusterCache(b *testing.B) {
	nodes, pods := termCluster(benchNodes)
	limit := int64(1000)
	for _, bc := range []struct {
		name     string
		cached   bool
		entries  int
		distinct bool
	}{
		{"rebuild/entries=1", false, 1, false}, {"cache/entries=1", true, 1, false},
		{"rebuild/entries=8", false, 8, false}, {"cache/entries=8/same", true, 8, false},
		{"cache/entries=8/distinct", true, 8, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var cc *clusterCache
			if bc.cached {
				cc = fedCache(ctx, nodes, pods)
			}
			templates := make([]*corev1.Pod, bc.entries)
			for i := range templates {
				templates[i] = proxyPod(zoneSpread(corev1.DoNotSchedule))
				if bc.distinct {
					templates[i].Labels["team"] = fmt.Sprintf("team-%d", i)
				}
			}
			fitOne := func(pod *corev1.Pod) {
				if !bc.cached {
					if _, err := fitWithPlugins(ctx, pod, nodes, pods, nil, limit); err != nil {
						b.Error(err)
					}
					return
				}
				if _, err := fitSharedFit(ctx, cc, pod, limit, func(fs *fitSnapshot) (FitResult, error) {
					return fitWithPluginsOn(ctx, pod, fs, fs.nodes(), pods, nil, limit)
				}); err != nil {
					b.Error(err)
				}
			}
			b.ReportAllocs()
			cpu0 := cpuTime()
			i := 0
			for b.Loop() {
				if bc.cached {
					// One event between scrapes: a bound Pod's labels change.
					old := pods[i%len(pods)]
					updated := old.DeepCopy()
					updated.Labels["revision"] = fmt.Sprint(i)
					if err := cc.cache.UpdatePod(cc.logger, old, updated); err != nil {
						b.Fatal(err)
					}
					cc.events.Add(1)
					pods[i%len(pods)] = updated
					i++
				}
				var wg sync.WaitGroup
				for _, pod := range templates {
					wg.Go(func() { fitOne(pod) })
				}
				wg.Wait()
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/scrape")
		})
	}
}

// BenchmarkFitClusterCacheNodes is how one entry's fit on the cluster
// cache grows with the Nodes (20 bound Pods with a term each per Node).
func BenchmarkFitClusterCacheNodes(b *testing.B) {
	pod := proxyPod(zoneSpread(corev1.DoNotSchedule))
	for _, n := range []int{100, 1000, 5000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			nodes, pods := termCluster(n)
			cc := fedCache(ctx, nodes, pods)
			cpu0 := cpuTime()
			for b.Loop() {
				fs, err := cc.acquire()
				if err != nil {
					b.Fatal(err)
				}
				if _, err := fitWithPluginsOn(ctx, pod, fs, fs.nodes(), pods, nil, 1000); err != nil {
					b.Fatal(err)
				}
				fs.release()
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkClusterCacheBytes is the heap the cluster cache holds per Pod
// and per Node beside the watch caches' stripped objects, which it points
// to (1,000 Nodes, 20,000 Pods with a term each).
func BenchmarkClusterCacheBytes(b *testing.B) {
	nodes, pods := termCluster(benchNodes)
	var perPod, perNode float64
	for b.Loop() {
		ctx, cancel := context.WithCancel(context.Background())
		before := heapNow()
		cc := fedCache(ctx, nodes[:0], nil)
		for _, n := range nodes {
			cc.cache.AddNode(cc.logger, n)
		}
		mid := heapNow()
		for _, p := range pods {
			_ = cc.cache.AddPod(cc.logger, p)
		}
		fs, err := cc.acquire()
		if err != nil {
			b.Fatal(err)
		}
		fs.release()
		after := heapNow()
		perNode = float64(mid-before) / float64(len(nodes))
		perPod = float64(after-mid) / float64(len(pods))
		runtime.KeepAlive(cc)
		cancel()
	}
	b.ReportMetric(perNode, "heap-B/node")
	b.ReportMetric(perPod, "heap-B/pod")
}

// BenchmarkFitDomains is one scrape's fit of the zone-spread proxy on
// issue 52's cluster (1,000 Nodes in 3 zones, 20,000 bound Pods with an
// anti-affinity term each) without and with capacity_domain
// topology.kubernetes.io/zone: the domains' figures (each zone's pinned
// fit, its proxies, the fit after losing it) from the same snapshot
// (docs/scaling.md). cpu-ns/scrape is the process's CPU time per scrape.
func BenchmarkFitDomains(b *testing.B) {
	nodes, pods := termCluster(benchNodes)
	pod := proxyPod(zoneSpread(corev1.DoNotSchedule))
	for _, domains := range []bool{false, true} {
		b.Run(fmt.Sprintf("domains=%v", domains), func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			cc := fedCache(ctx, nodes, pods)
			b.ReportAllocs()
			cpu0 := cpuTime()
			for b.Loop() {
				fs, err := cc.acquire()
				if err != nil {
					b.Fatal(err)
				}
				snapNodes := fs.nodes()
				// As a check fits: the requests per node kept by the
				// cluster cache (usage), which the domains' fits reuse.
				var use map[string]*nodeUse
				var reuse *ipaReuse
				opts := fitOptions{keepUse: &use}
				if domains {
					opts.keepIPA = &reuse
				}
				if _, err := fitOnWith(ctx, pod, fs, snapNodes, nil, nil, nil, provider.MaxCapacity, opts); err != nil {
					b.Fatal(err)
				}
				if domains {
					d, err := fitDomains(ctx, pod, fs, snapNodes, use, nil, corev1.LabelTopologyZone, "egress-proxies", reuse)
					if err != nil || len(d.domains) != 3 {
						b.Fatalf("domains %+v, %v; want 3", d, err)
					}
				}
				fs.release()
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/scrape")
		})
	}
}
