package kubernetes

import (
	"strings"
	"testing"

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
