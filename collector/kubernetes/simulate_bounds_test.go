package kubernetes

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// selfAffinity makes copies of the Pod interact (each is placed one after
// another) at the least cost per copy: a required affinity to its own
// label on the node, which every copy placed satisfies.
func selfAffinity(p *corev1.Pod) {
	p.Labels = map[string]string{"app": "proxy"}
	p.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "proxy"}}, TopologyKey: corev1.LabelHostname}}}}
}

// TestFitPlacedCopiesBounded: copies placed one by one stop at the fit's
// bound of 100,000, said as "at least", even where the quota allows more
// and the node has room for more (100,050 pod slots, no requests).
func TestFitPlacedCopiesBounded(t *testing.T) {
	t.Parallel()
	nodes := []*corev1.Node{fitNode("n", nil, "cpu", "1", "pods", "100050")}
	r, err := fitWithPlugins(context.Background(), fitPod(selfAffinity), nodes, nil, nil, provider.MaxCapacity)
	if err != nil {
		t.Fatal(err)
	}
	msg := r.Message()
	if r.Copies != 100_000 || !r.Bounded || !strings.Contains(msg, "at least 100000 copies") {
		t.Errorf("copies %d, bounded %v (%s); want at least 100000, bounded", r.Copies, r.Bounded, msg)
	}
}

// TestFitCopiesSumSaturates: two nodes that each take 2^63−1 copies (as
// many pod slots, a Pod that requests nothing) sum to the capacity's
// bound, never to a wrapped, negative count: with the plugins' filters
// and without.
func TestFitCopiesSumSaturates(t *testing.T) {
	t.Parallel()
	huge := []string{"cpu", "1", "pods", "9223372036854775807"}
	nodes := []*corev1.Node{fitNode("a", nil, huge...), fitNode("b", nil, huge...)}
	r, err := fitWithPlugins(context.Background(), fitPod(nil), nodes, nil, nil, provider.MaxCapacity)
	if err != nil {
		t.Fatal(err)
	}
	if r.Copies != provider.MaxCapacity || r.Fitting != 2 {
		t.Errorf("with the plugins: %d copies on %d nodes, want %d on 2 (%s)", r.Copies, r.Fitting, int64(provider.MaxCapacity), r.Message())
	}
	if r := fit(fitPod(nil), nodes, nil); r.Copies < 0 || r.Fitting != 2 {
		t.Errorf("without: %d copies on %d nodes, want a saturated count on 2", r.Copies, r.Fitting)
	}
}

// TestFitNegativeRequestFreesNothing: a bound Pod whose request is
// negative (no API server admits one; a stand-in might send it) frees no
// room on its node: a node of 1 CPU takes one copy of a 1-CPU Pod
// whatever it holds, and a template whose request is negative takes no
// more than one that asks nothing.
func TestFitNegativeRequestFreesNothing(t *testing.T) {
	t.Parallel()
	nodes := []*corev1.Node{fitNode("n", nil, "cpu", "1", "memory", "1Gi", "pods", "110")}
	neg := boundPod("n", "cpu", "-2", "memory", "-1Gi")
	neg.Name = "negative"
	pods := []*corev1.Pod{stripPod(neg)}
	for name, pod := range map[string]*corev1.Pod{"resources only": fitPod(nil, "cpu", "1"), "placed one by one": fitPod(selfAffinity, "cpu", "1")} {
		r, err := fitWithPlugins(context.Background(), pod, nodes, pods, nil, provider.MaxCapacity)
		if err != nil {
			t.Fatal(err)
		}
		if r.Copies != 1 {
			t.Errorf("%s: %d copies beside a negative request (%s), want 1", name, r.Copies, r.Message())
		}
	}
	if r := fit(fitPod(nil, "cpu", "1"), nodes, nodeUsage(pods)); r.Copies != 1 {
		t.Errorf("fit: %d copies beside a negative request, want 1", r.Copies)
	}
	// A template of -1 memory and 500m: the 1Gi stays free and the cpu
	// bounds the copies, placed one by one too.
	for name, pod := range map[string]*corev1.Pod{"resources only": fitPod(nil, "cpu", "500m", "memory", "-1Gi"), "placed one by one": fitPod(selfAffinity, "cpu", "500m", "memory", "-1Gi")} {
		r, err := fitWithPlugins(context.Background(), pod, nodes, nil, nil, provider.MaxCapacity)
		if err != nil {
			t.Fatal(err)
		}
		if r.Copies != 2 {
			t.Errorf("template %s: %d copies (%s), want 2", name, r.Copies, r.Message())
		}
	}
}
