package kubernetes

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestNamespacesWatched: through the watch stand-in, in JSON and
// protobuf, namespaces are not watched until a namespaceSelector term
// needs them; then the watch of namespaces keeps their names and labels
// only (not 20 KiB of annotations), and a namespace whose labels are over
// the bound is an error naming it, never a verdict on labels not kept.
func TestNamespacesWatched(t *testing.T) {
	for _, w := range []wire{{protobuf: true}, {}} {
		t.Run(w.name(), func(t *testing.T) {
			h := newHostileAPI(t, w)
			ns := func(name string, labels map[string]string) []byte {
				n := &corev1.Namespace{TypeMeta: metav1.TypeMeta{Kind: "Namespace", APIVersion: "v1"},
					ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "3", Labels: labels,
						Annotations: map[string]string{"big": strings.Repeat("a", 20<<10)}}}
				return w.item(t, n)
			}
			h.items["nodes"] = [][]byte{w.item(t, withKind(fitNode("n1", nil)))}
			h.items["namespaces"] = [][]byte{ns("tenant-a", map[string]string{"team": "proxies"}), ns("tenant-b", nil)}
			ws := watchUntil(t, h)
			syncedWithin(t, ws)
			if n := h.calls["namespaces"].Load(); n != 0 {
				t.Fatalf("namespaces called %d times before any term needed them", n)
			}
			got, err := ws.namespaceList(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 2 {
				t.Fatalf("got %d namespaces, want 2", len(got))
			}
			for _, n := range got {
				if len(n.Annotations) != 0 {
					t.Errorf("namespace %s kept with its annotations", n.Name)
				}
				if n.Name == "tenant-a" && n.Labels["team"] != "proxies" {
					t.Errorf("namespace tenant-a lost its labels: %v", n.Labels)
				}
			}
			if h.calls["namespaces"].Load() == 0 {
				t.Error("the namespaces came from no call of the stand-in")
			}
		})
	}
}

func withKind(n *corev1.Node) *corev1.Node {
	n.TypeMeta = metav1.TypeMeta{Kind: "Node", APIVersion: "v1"}
	n.ResourceVersion = "5"
	return n
}

// TestKeepNamespaceOverBound: a namespace with labels over the bound is
// kept as a stub, and the list of namespaces a term needs says so, naming
// it.
func TestKeepNamespaceOverBound(t *testing.T) {
	t.Parallel()
	labels := map[string]string{}
	for i := range maxPodLabels + 1 {
		labels[strings.Repeat("k", 1+i%60)+string(rune('a'+i%26))+strings.Repeat("x", i/26)] = "v"
	}
	kept := keepNamespace(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "wide", Labels: labels}})
	if len(kept.Labels) != 0 || !strings.Contains(kept.Annotations[overBoundAnnotation], "over the bound of 128") {
		t.Fatalf("kept %+v, want a stub naming the bound", kept.ObjectMeta)
	}
	if again := keepNamespace(kept); again != kept {
		t.Error("a stub transformed again is not the same stub")
	}
	small := keepNamespace(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "small", Labels: map[string]string{"team": "a"}}})
	if small.Labels["team"] != "a" {
		t.Errorf("a namespace within the bounds lost its labels: %+v", small.ObjectMeta)
	}
}

// TestNeedsNamespacesFollowsEvents: the bound Pods whose terms select
// namespaces are counted as their events arrive, so that a check asks
// the cluster cache, not every Pod, whether namespaces are needed.
func TestNeedsNamespacesFollowsEvents(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute) // a bound on a failure, never measured
	defer cancel()
	nodes, pods := proxyCluster()
	cc, _, pw := informedCache(ctx, t, nodes, pods)
	plain := proxyPod(nil)
	if needsNamespaces(plain, cc) {
		t.Fatal("no term selects namespaces, yet they are needed")
	}
	selecting := func(p *corev1.Pod) {
		p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "proxy"}}, TopologyKey: corev1.LabelHostname,
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tenant": "a"}}}}}}
	}
	if !needsNamespaces(proxyPod(selecting), cc) {
		t.Fatal("the Pod's own term selects namespaces, yet they are not needed")
	}
	tenant := boundPod("a", "cpu", "100m")
	tenant.Name, tenant.UID, tenant.ResourceVersion = "tenant", "uid-tenant", "2"
	selecting(tenant)
	pw.Add(stripPod(tenant))
	waitFor(t, "a bound Pod's term selecting namespaces counted", func() bool { return needsNamespaces(plain, cc) })
	// Its term changed to one without a namespaceSelector: not needed.
	changed := tenant.DeepCopy()
	changed.ResourceVersion = "3"
	changed.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0].NamespaceSelector = nil
	pw.Modify(stripPod(changed))
	waitFor(t, "the changed term uncounted", func() bool { return !needsNamespaces(plain, cc) })
	selecting(changed)
	changed.ResourceVersion = "4"
	pw.Modify(stripPod(changed))
	waitFor(t, "the term selecting again", func() bool { return needsNamespaces(plain, cc) })
	pw.Delete(stripPod(changed))
	waitFor(t, "the deleted Pod uncounted", func() bool { return !needsNamespaces(plain, cc) })
}
