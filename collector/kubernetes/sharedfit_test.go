package kubernetes

import (
	"context"
	"errors"
	"maps"
	"reflect"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// TestSharedFit: entries fitting the same Pod at one state of the cluster
// cache share one fit; a watch event, another Pod or another limit is
// another fit; a cut fit is not shared.
func TestSharedFit(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute) // a bound on a failure, never measured
	defer cancel()
	nodes, pods := proxyCluster()
	cc, _, pw := informedCache(ctx, t, nodes, pods)
	pod := proxyPod(antiAffinity(corev1.LabelHostname))
	var fits atomic.Int64
	fit := func(p *corev1.Pod, limit int64) (FitResult, error) {
		t.Helper()
		return fitSharedFit(t.Context(), cc, p, limit, func(fs *fitSnapshot) (FitResult, error) {
			fits.Add(1)
			return fitWithPluginsOn(t.Context(), p, fs, fs.nodes(), pods, nil, limit)
		})
	}
	first, err := fit(pod, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	// The same Pod as admission returns it again: another name and UID,
	// the same namespace, labels and spec.
	again := pod.DeepCopy()
	again.Name, again.UID = "proxy-dry-run-2", "other-uid"
	second, err := fit(again, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if fits.Load() != 1 || second.Copies != first.Copies || second.Message() != first.Message() {
		t.Fatalf("two entries fitting one Pod at one state: %d fits, %s then %s; want 1 fit shared", fits.Load(), first.Message(), second.Message())
	}
	other := pod.DeepCopy()
	other.Labels["team"] = "b"
	if _, err := fit(other, 1<<20); err != nil {
		t.Fatal(err)
	}
	if _, err := fit(pod, 3); err != nil {
		t.Fatal(err)
	}
	if fits.Load() != 3 {
		t.Fatalf("another Pod and another limit: %d fits in all, want 3", fits.Load())
	}

	// A proxy bound by a watch event moves the state: the next fit is
	// computed again, and sees it.
	running := boundPod("e", "cpu", "500m", "memory", "256Mi")
	running.Name, running.Labels, running.UID, running.ResourceVersion = "proxy-2", map[string]string{"app": "proxy"}, "uid-new", "2"
	state := cc.events.Load()
	pw.Add(stripPod(running))
	waitFor(t, "the watch event applied", func() bool { return cc.events.Load() != state })
	before := fits.Load()
	after, err := fit(pod, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if fits.Load() != before+1 || after.Copies >= first.Copies {
		t.Fatalf("after a proxy was bound: %d new fits giving %d copies, want 1 giving fewer than %d", fits.Load()-before, after.Copies, first.Copies)
	}
	cc.fitsMu.Lock()
	kept := len(cc.fits)
	cc.fitsMu.Unlock()
	if kept != 1 {
		t.Fatalf("%d results kept after the state moved, want only the current state's 1", kept)
	}
}

// TestSharedFitCut: an entry that waits for another's fit stops at its
// own deadline, and a fit the other entry's deadline cut is not given to
// the entry waiting for it, which fits on its own. In a bubble, so that
// the second waiter is known to wait before the leader ends.
func TestSharedFitCut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		nodes, pods := proxyCluster()
		cc := fedCache(ctx, nodes, pods)
		pod := proxyPod(nil)

		started, finish := make(chan struct{}), make(chan struct{})
		leaderErr := errors.New("cut by the leader's deadline")
		leader := make(chan error, 1)
		go func() {
			_, err := fitSharedFit(ctx, cc, pod, 10, func(*fitSnapshot) (FitResult, error) {
				close(started)
				<-finish
				return FitResult{}, leaderErr
			})
			leader <- err
		}()
		<-started
		// The leader runs: a waiter whose deadline has passed returns at once.
		ended, stop := context.WithCancel(ctx)
		stop()
		_, err := fitSharedFit(ended, cc, pod, 10, func(*fitSnapshot) (FitResult, error) {
			t.Error("a waiter whose context ended fitted")
			return FitResult{}, nil
		})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("waiter with an ended context: %v, want its context's error", err)
		}
		// A waiter with time left, waiting when the leader's fit is cut,
		// gets no cut result: it fits on its own.
		own := make(chan FitResult, 1)
		go func() {
			res, err := fitSharedFit(ctx, cc, pod, 10, func(*fitSnapshot) (FitResult, error) {
				return FitResult{Nodes: 42}, nil
			})
			if err != nil {
				t.Error(err)
			}
			own <- res
		}()
		synctest.Wait()
		close(finish)
		if err := <-leader; !errors.Is(err, leaderErr) {
			t.Fatalf("leader: %v", err)
		}
		if res := <-own; res.Nodes != 42 {
			t.Fatalf("the waiter got %+v, want its own fit", res)
		}
	})
}

// TestFitSnapshotUsage: the requests per node the cluster cache keeps
// between fits equal nodeUsage over the bound Pods after every kind of
// watch event, summed again only where a NodeInfo changed.
func TestFitSnapshotUsage(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute) // a bound on a failure, never measured
	defer cancel()
	nodes, pods := proxyCluster()
	cc, _, pw := informedCache(ctx, t, nodes, pods)
	current := map[string]*corev1.Pod{}
	for _, p := range pods {
		current[p.Name] = p
	}
	check := func(step string) {
		t.Helper()
		fs, err := cc.acquire()
		if err != nil {
			t.Fatal(err)
		}
		defer fs.release()
		got := fs.usage()
		want := nodeUsage(slicesOf(current))
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: usage kept %v, want %v", step, flat(got), flat(want))
		}
	}
	check("synced")
	check("steady")
	// A Pod bound to a node, another's requests changed, one deleted.
	added := stripPod(boundPod("a", "cpu", "1", "memory", "1Gi"))
	added.Name, added.UID, added.ResourceVersion = "added", "uid-added", "2"
	state := cc.events.Load()
	pw.Add(added)
	current[added.Name] = added
	changed := current["proxy-running"].DeepCopy()
	changed.ResourceVersion = "3"
	changed.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: added.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU]}
	pw.Modify(changed)
	current[changed.Name] = changed
	pw.Delete(added)
	delete(current, added.Name)
	waitFor(t, "three watch events applied", func() bool { return cc.events.Load() >= state+3 })
	check("after an add, a change and a delete")
}

func slicesOf(m map[string]*corev1.Pod) []*corev1.Pod {
	out := make([]*corev1.Pod, 0, len(m))
	for _, p := range m {
		out = append(out, p)
	}
	return out
}

func flat(use map[string]*nodeUse) map[string]nodeUse {
	out := make(map[string]nodeUse, len(use))
	for k, v := range maps.All(use) {
		out[k] = *v
	}
	return out
}

// fitOwnFit and fitSharedFit are fitOwn and fitShared for a fit without
// domains, as most tests fit.
func fitOwnFit(cc *clusterCache, fit func(*fitSnapshot) (FitResult, error)) (FitResult, error) {
	o, err := cc.fitOwn(func(fs *fitSnapshot) (fitOutcome, error) {
		r, err := fit(fs)
		return fitOutcome{fit: r}, err
	})
	return o.fit, err
}

func fitSharedFit(ctx context.Context, cc *clusterCache, pod *corev1.Pod, limit int64, fit func(*fitSnapshot) (FitResult, error)) (FitResult, error) {
	o, err := cc.fitShared(ctx, pod, limit, "", func(fs *fitSnapshot) (fitOutcome, error) {
		r, err := fit(fs)
		return fitOutcome{fit: r}, err
	})
	return o.fit, err
}
