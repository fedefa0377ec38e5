package kubernetes

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ktypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// fakeInformer is an informer over a fixed list and a watch the test
// drives.
func fakeInformer(t *testing.T, list runtime.Object, example runtime.Object, fw *watch.FakeWatcher) cache.SharedIndexInformer {
	t.Helper()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) { return list, nil },
		WatchFuncWithContext: func(_ context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			if opts.SendInitialEvents != nil && *opts.SendInitialEvents {
				// No watch-list: the reflector falls back to list and watch.
				return nil, apierrors.NewBadRequest("no watch-list")
			}
			return fw, nil
		},
	}
	return cache.NewSharedIndexInformerWithOptions(lw, example, cache.SharedIndexInformerOptions{})
}

// TestClusterCache: kube-scheduler's cache fed by the watches' events
// gives each fit a snapshot equal to one built from the same Nodes and
// Pods; a fit that places copies leaves the kept snapshot as it was (the
// NodeInfos it changed are restored), and a Pod's events reach the next
// fit's snapshot incrementally.
// informedCache is the cluster cache of nodes and pods fed by informers
// as the watches' are, each with a watch the test drives.
func informedCache(ctx context.Context, t *testing.T, nodes []*corev1.Node, pods []*corev1.Pod) (*clusterCache, *watch.FakeWatcher, *watch.FakeWatcher) {
	t.Helper()
	for i, p := range pods {
		p.UID = ktypes.UID(fmt.Sprintf("uid-%d", i))
		p.ResourceVersion = "1"
	}
	nl := &corev1.NodeList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}
	for _, n := range nodes {
		nl.Items = append(nl.Items, *n)
	}
	pl := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}
	for _, p := range pods {
		pl.Items = append(pl.Items, *p)
	}
	nw, pw := watch.NewFake(), watch.NewFake()
	ni := fakeInformer(t, nl, &corev1.Node{}, nw)
	pi := fakeInformer(t, pl, &corev1.Pod{}, pw)
	cc, regs, err := newClusterCache(ctx, ni, pi)
	if err != nil {
		t.Fatal(err)
	}
	go ni.RunWithContext(ctx)
	go pi.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), regs[0].HasSynced, regs[1].HasSynced) {
		t.Fatal("never synced")
	}
	return cc, nw, pw
}

func TestClusterCache(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute) // a bound on a failure, never measured
	defer cancel()
	nodes, pods := proxyCluster()
	cc, _, pw := informedCache(ctx, t, nodes, pods)
	pod := proxyPod(antiAffinity(corev1.LabelHostname))
	fitOn := func() (FitResult, []int) {
		t.Helper()
		fs, err := cc.acquire()
		if err != nil {
			t.Fatal(err)
		}
		defer fs.release()
		res, err := fitWithPluginsOn(t.Context(), pod, fs, fs.nodes(), pods, nil, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		return res, nil
	}
	want, err := fitWithPlugins(t.Context(), pod, nodes, pods, nil, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		got, _ := fitOn()
		if got.Copies != want.Copies || got.Fitting != want.Fitting || got.Message() != want.Message() {
			t.Fatalf("fit %d on the cluster cache: %s; rebuilt: %s", i, got.Message(), want.Message())
		}
	}
	// The fits placed copies; the snapshot kept for the next fit holds
	// none of them, and was kept, not dropped.
	cc.mu.Lock()
	idle := len(cc.idle)
	var held int
	if idle > 0 {
		all, _ := cc.idle[0].NodeInfos().List()
		for _, ni := range all {
			held += len(ni.GetPods())
		}
	}
	cc.mu.Unlock()
	if idle != 1 || held != len(pods) {
		t.Fatalf("after the fits %d snapshots kept holding %d Pods, want 1 holding the %d bound Pods", idle, held, len(pods))
	}

	// A proxy bound to e by an event: the next fit's snapshot has it.
	running := boundPod("e", "cpu", "500m", "memory", "256Mi")
	running.Name, running.Labels, running.UID, running.ResourceVersion = "proxy-2", map[string]string{"app": "proxy"}, "uid-new", "2"
	pw.Add(stripPod(running))
	more := append(append([]*corev1.Pod{}, pods...), stripPod(running))
	want2, err := fitWithPlugins(t.Context(), pod, nodes, more, nil, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new Pod in the fit", func() bool {
		got, _ := fitOn()
		return got.Copies == want2.Copies && got.Message() == want2.Message()
	})
	if want2.Copies >= want.Copies {
		t.Fatalf("a proxy bound to e left %d copies, want fewer than %d", want2.Copies, want.Copies)
	}
	// And its deletion gives the first fit back.
	pw.Delete(stripPod(running))
	waitFor(t, "the deleted Pod out of the fit", func() bool {
		got, _ := fitOn()
		return got.Copies == want.Copies && got.Message() == want.Message()
	})
}
