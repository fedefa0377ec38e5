package kubernetes

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ktypes "k8s.io/apimachinery/pkg/types"
)

// TestWatchPodsBounded: through the watch stand-in, in JSON and protobuf,
// a Pending Pod with 16,000 labels (a valid object of 1.4 MB) is kept as
// its name only, and a bound Pod over each bound (labels, their bytes,
// terms, their bytes, host ports) is a stub: its node is not judged, the
// Pod named in the message, and the other nodes are fitted as usual.
// The stand-in ignores the field selector, as a hostile server may.
func TestWatchPodsBounded(t *testing.T) {
	manyLabels := func(n, size int) map[string]string {
		l := make(map[string]string, n)
		for i := range n {
			l[fmt.Sprintf("label-%05d", i)] = strings.Repeat("v", size)
		}
		return l
	}
	terms := func(n int, value string) *corev1.Affinity {
		a := &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{}}
		for range n {
			a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution = append(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution,
				corev1.PodAffinityTerm{TopologyKey: corev1.LabelHostname, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": value}}})
		}
		return a
	}
	over := []struct {
		name string
		mut  func(*corev1.Pod)
		why  string
	}{
		{"labels", func(p *corev1.Pod) { p.Labels = manyLabels(maxPodLabels+1, 1) }, "129 labels, over the bound of 128"},
		{"label-bytes", func(p *corev1.Pod) { p.Labels = manyLabels(2, maxLabelBytes/2) }, "over the bound of 16 KiB"},
		{"terms", func(p *corev1.Pod) { p.Spec.Affinity = terms(maxPodTerms+1, "proxy") }, "33 required pod affinity and anti-affinity terms, over the bound of 32"},
		{"term-bytes", func(p *corev1.Pod) { p.Spec.Affinity = terms(1, strings.Repeat("x", maxTermBytes)) }, "terms of 16409 bytes, over the bound of 16 KiB"},
		{"host-ports", func(p *corev1.Pod) {
			for i := range maxHostPorts + 1 {
				p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, corev1.ContainerPort{ContainerPort: int32(1000 + i), HostPort: int32(1000 + i)})
			}
		}, "257 host ports, over the bound of 256"},
	}
	for _, w := range []wire{{protobuf: true}, {}} {
		t.Run(w.name(), func(t *testing.T) {
			h := newHostileAPI(t, w)
			node := func(name string) []byte {
				n := fitNode(name, nil)
				n.TypeMeta = metav1.TypeMeta{Kind: "Node", APIVersion: "v1"}
				n.ResourceVersion = "5"
				return w.item(t, n)
			}
			pod := func(name, nodeName string, mut func(*corev1.Pod)) []byte {
				p := boundPod(nodeName, "cpu", "1")
				p.Name, p.ResourceVersion, p.UID = name, "6", ktypes.UID("uid-"+name)
				p.TypeMeta = metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"}
				if mut != nil {
					mut(p)
				}
				return w.item(t, p)
			}
			h.items["nodes"] = [][]byte{node("good")}
			h.items["pods"] = [][]byte{
				pod("small", "good", nil),
				pod("pending", "", func(p *corev1.Pod) { p.Labels = manyLabels(16000, 60) }),
			}
			for _, o := range over {
				h.items["nodes"] = append(h.items["nodes"], node("n-"+o.name))
				h.items["pods"] = append(h.items["pods"], pod("big-"+o.name, "n-"+o.name, o.mut))
			}
			ws := watchUntil(t, h)
			syncedWithin(t, ws)
			if reason, msg, ok := ws.verdict(time.Now()); !ok {
				t.Fatalf("verdict %s %s, want the caches usable", reason, msg)
			}
			nodes, pods := ws.snapshot()
			if len(pods) != len(over)+2 {
				t.Fatalf("cached %d Pods, want %d", len(pods), len(over)+2)
			}
			for _, p := range pods {
				switch {
				case p.Name == "pending":
					if len(p.Labels) != 0 || len(p.Spec.Containers) != 0 {
						t.Errorf("the Pending Pod is kept with %d labels and %d containers, want its name only", len(p.Labels), len(p.Spec.Containers))
					}
				case strings.HasPrefix(p.Name, "big-"):
					if len(p.Labels) != 0 || p.Spec.Affinity != nil || len(p.Spec.Containers) != 0 || p.Spec.NodeName == "" {
						t.Errorf("the Pod %s over a bound is kept with its labels, terms or ports, or without its node: %+v", p.Name, p.Spec)
					}
				}
			}
			res := fit(fitPod(nil, "cpu", "1"), nodes, nodeUsage(pods))
			msg := res.Message()
			if res.Fitting != 1 || res.Copies != 3 {
				t.Errorf("fit %d copies on %d nodes, want 3 on the good node only: %s", res.Copies, res.Fitting, msg)
			}
			for _, o := range over {
				want := fmt.Sprintf("not judged: a bound Pod's labels or terms are over the exporter's bounds (egress-proxies/big-%s: ", o.name)
				if !strings.Contains(msg, want) || !strings.Contains(msg, o.why) {
					t.Errorf("message %q\ndoes not say %q and %q", msg, want, o.why)
				}
			}
		})
	}
}

// TestKeepPodWithinBounds: a proxy's Pod, and one at every bound, is
// kept with its labels, terms and host ports.
func TestKeepPodWithinBounds(t *testing.T) {
	t.Parallel()
	p := proxyPod(func(p *corev1.Pod) { antiAffinity(corev1.LabelHostname)(p); hostPort(p) })
	p.Spec.NodeName = "n1"
	p.Labels = map[string]string{}
	for i := range maxPodLabels {
		p.Labels[fmt.Sprintf("k%03d", i)] = strings.Repeat("v", maxLabelBytes/maxPodLabels-4)
	}
	if why := podOverBound(p); why != "" {
		t.Fatalf("a Pod at the bounds is over one: %s", why)
	}
	kept := keepPod(p)
	if len(kept.Labels) != maxPodLabels || kept.Spec.Affinity == nil || len(kept.Spec.Containers) != 1 || len(kept.Spec.Containers[0].Ports) == 0 {
		t.Errorf("kept %+v, want its labels, term and host port", kept)
	}
	if _, ok := kept.Annotations[overBoundAnnotation]; ok {
		t.Error("a Pod within the bounds is a stub")
	}
}
