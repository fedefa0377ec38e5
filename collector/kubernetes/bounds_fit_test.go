package kubernetes

import (
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/egress-proxies/provider_health_exporter/internal/quantity"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

// TestFitSaturates: requests whose sum is beyond int64 on a node that is
// full take no copy and name the request that could not be counted; they
// never wrap into room (MilliValue of 2^63−1 cpus is −1000, three
// requests of 2^62 bytes sum to a negative number).
func TestFitSaturates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		bound   []*corev1.Pod
		message string
	}{
		{
			name:    "3 × 2^62 bytes of memory",
			bound:   []*corev1.Pod{boundPod("full", "memory", "4611686018427387904"), boundPod("full", "memory", "4611686018427387904"), boundPod("full", "memory", "4611686018427387904")},
			message: "0/1 nodes are available: 1 node(s) whose bound Pods' requests cannot be counted (egress-proxies/proxy requests memory 4611686018427387904, beyond 2^63−1 in all)",
		},
		{
			name:    "2 × MaxInt64 cpu",
			bound:   []*corev1.Pod{boundPod("full", "cpu", "9223372036854775807"), boundPod("full", "cpu", "9223372036854775807")},
			message: "0/1 nodes are available: 1 node(s) whose bound Pods' requests cannot be counted (egress-proxies/proxy requests cpu 9223372036854775807, beyond 2^63−1 in all)",
		},
		{
			name:    "an extended resource",
			bound:   []*corev1.Pod{boundPod("full", "example.com/gpu", "9223372036854775807"), boundPod("full", "example.com/gpu", "1")},
			message: "0/1 nodes are available: 1 node(s) whose bound Pods' requests cannot be counted (egress-proxies/proxy requests example.com/gpu 9223372036854775807, beyond 2^63−1 in all)",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var pods []*corev1.Pod
			for _, p := range tc.bound {
				pods = append(pods, stripPod(p))
			}
			node := fitNode("full", nil, "cpu", "4", "memory", "8Gi", "pods", "110", "example.com/gpu", "4")
			r := fit(fitPod(nil, "cpu", "1", "memory", "1Gi"), []*corev1.Node{stripNode(node)}, nodeUsage(pods))
			if r.Copies != 0 || r.Message() != tc.message {
				t.Errorf("fit = %d copies, %q\nwant 0, %q", r.Copies, r.Message(), tc.message)
			}
			// The scheduler's plugins' path, as a schedule check runs it:
			// copies counted per node (fitNodes) and, with anti-affinity
			// per node, placed one after another (simulate).
			for _, pod := range []*corev1.Pod{fitPod(nil, "cpu", "1", "memory", "1Gi"), proxyPod(antiAffinity(corev1.LabelHostname))} {
				r, err := fitWithPlugins(t.Context(), pod, []*corev1.Node{stripNode(node)}, pods, nil, 1000)
				if err != nil || r.Copies != 0 || r.Message() != tc.message {
					t.Errorf("fitWithPlugins(affinity %v) = %d copies, %q, %v\nwant 0, %q", pod.Spec.Affinity != nil, r.Copies, r.Message(), err, tc.message)
				}
			}
		})
	}
}

// The pod's own absurd request and absurd allocatable saturate too: a
// Pod asking 2^63−1 cpus fits nowhere, and a node with 10^30 of
// everything is counted as 2^63−1 thousandths, not wrapped.
func TestFitSaturatesNeedAndAllocatable(t *testing.T) {
	t.Parallel()
	r := fit(fitPod(nil, "cpu", "9223372036854775807"), []*corev1.Node{fitNode("a", nil)}, nil)
	if r.Copies != 0 || r.Message() != "0/1 nodes are available: 1 Insufficient cpu" {
		t.Errorf("an absurd request: %d copies, %q", r.Copies, r.Message())
	}
	huge := fitNode("huge", nil, "cpu", "1e30", "memory", "1e30", "pods", "1e30")
	r = fit(fitPod(nil, "cpu", "1"), []*corev1.Node{huge}, nil)
	if r.Copies != 9223372036854775807/1000 {
		t.Errorf("absurd allocatable cpu: %d copies, want 2^63−1 thousandths / 1000", r.Copies)
	}
	r = fit(fitPod(nil, "memory", "1"), []*corev1.Node{huge, huge}, nil)
	if r.Copies != 9223372036854775807 || r.Fitting != 2 {
		t.Errorf("absurd allocatable: %d copies on %d nodes, want 2^63−1 (the sum saturated) on 2", r.Copies, r.Fitting)
	}
	if v, sat := satMilli(resource.MustParse("-1e30")); v != -9223372036854775807 || !sat {
		t.Errorf("satMilli(-1e30) = %d, %v", v, sat)
	}
	if v, sat := satValue(resource.MustParse("9223372036854775807")); v != 9223372036854775807 || !sat {
		t.Errorf("satValue(MaxInt64) = %d, %v", v, sat)
	}
	if v, sat := satValue(resource.MustParse("9223372036854775806")); v != 9223372036854775806 || sat {
		t.Errorf("satValue(MaxInt64-1) = %d, %v", v, sat)
	}
}

// Hugepages are counted against the node's, and what bound Pods use of
// them and of an extended resource (a GPU) is subtracted.
func TestFitScalarResources(t *testing.T) {
	t.Parallel()
	node := fitNode("a", nil, "cpu", "8", "memory", "8Gi", "pods", "110", "hugepages-2Mi", "2Gi", "example.com/gpu", "2")
	for _, tc := range []struct {
		name    string
		pod     *corev1.Pod
		bound   []*corev1.Pod
		copies  int64
		message string
	}{
		{"hugepages", fitPod(nil, "cpu", "1", "hugepages-2Mi", "1Gi"), []*corev1.Pod{boundPod("a", "hugepages-2Mi", "1Gi")}, 1, "1 copies of the Pod fit on 1/1 nodes"},
		{"hugepages used up", fitPod(nil, "cpu", "1", "hugepages-2Mi", "1Gi"), []*corev1.Pod{boundPod("a", "hugepages-2Mi", "1536Mi")}, 0, "0/1 nodes are available: 1 Insufficient hugepages-2Mi"},
		{"a GPU in use", fitPod(nil, "cpu", "1", "example.com/gpu", "1"), []*corev1.Pod{boundPod("a", "example.com/gpu", "2")}, 0, "0/1 nodes are available: 1 Insufficient example.com/gpu"},
		{"a GPU free", fitPod(nil, "cpu", "1", "example.com/gpu", "1"), []*corev1.Pod{boundPod("a", "example.com/gpu", "1")}, 1, "1 copies of the Pod fit on 1/1 nodes"},
	} {
		var pods []*corev1.Pod
		for _, p := range tc.bound {
			pods = append(pods, stripPod(p))
		}
		r := fit(tc.pod, []*corev1.Node{stripNode(node)}, nodeUsage(pods))
		if r.Copies != tc.copies || r.Message() != tc.message {
			t.Errorf("%s: %d copies, %q; want %d, %q", tc.name, r.Copies, r.Message(), tc.copies, tc.message)
		}
	}
}

// A Failed Pod, like a Succeeded one, holds nothing on its node (the
// watch's field selector leaves both out; a cache may still hold one
// that just ended).
func TestFitFailedPodsHoldNothing(t *testing.T) {
	t.Parallel()
	for _, phase := range []corev1.PodPhase{corev1.PodFailed, corev1.PodSucceeded} {
		done := boundPod("a", "cpu", "4")
		done.Status.Phase = phase
		r := fit(fitPod(nil, "cpu", "1"), []*corev1.Node{fitNode("a", nil)}, nodeUsage([]*corev1.Pod{stripPod(done)}))
		if r.Copies != 4 {
			t.Errorf("%s pod: copies = %d, want 4", phase, r.Copies)
		}
	}
}

// The message names maxCauses causes and counts the rest, exactly.
func TestFitMessageCausesCount(t *testing.T) {
	t.Parallel()
	for _, n := range []int{maxCauses - 1, maxCauses, maxCauses + 1, maxCauses + 2} {
		r := FitResult{Nodes: n, Causes: map[string]int{}}
		for i := range n {
			r.Causes["cause "+string(rune('a'+i))] = 1
		}
		msg := r.Message()
		named := strings.Count(msg, "1 cause ")
		more := ""
		if n > maxCauses {
			more = ", and " + strconv.Itoa(n-maxCauses) + " more causes"
		}
		if named != min(n, maxCauses) || !strings.HasSuffix(msg, more) || (more == "" && strings.Contains(msg, "more causes")) {
			t.Errorf("%d causes: %q names %d, want %d and %q", n, msg, named, min(n, maxCauses), more)
		}
	}
}

// TestQuotaCapacitySurvivors: a count/pods quota counts one Pod a copy;
// a quota without usage yet is not judged; a resource the Pod asks
// nothing of does not bound it, however over-used.
func TestQuotaCapacitySurvivors(t *testing.T) {
	t.Parallel()
	q := func(quota, res, hard, used string) QuotaUsage {
		u := QuotaUsage{Quota: quota, Resource: corev1.ResourceName(res), Hard: mustQ(t, hard)}
		if used == "" {
			u.NoUsage = true
		} else {
			u.Used = mustQ(t, used)
		}
		return u
	}
	needs, err := decodeQuotaNeeds([]byte(`{"spec":{"containers":[{"name":"p","resources":{"requests":{"cpu":"1","memory":"0"}}}]}}`), false)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		q    QuotaUsage
		want provider.Capacity
	}{
		{"count/pods", q("objects", "count/pods", "5", "3"), provider.Capacity{Known: true, Proxies: 2, Binding: "quota objects count/pods"}},
		{"count/pods full", q("objects", "count/pods", "5", "5"), provider.Capacity{Known: true, Binding: "quota objects count/pods"}},
		{"no usage yet", q("new", "requests.cpu", "0", ""), provider.Capacity{}},
		{"memory over-used, asked 0 of", q("mem", "requests.memory", "1Gi", "2Gi"), provider.Capacity{}},
		{"storage over-used, not asked", q("st", "requests.storage", "1Gi", "2Gi"), provider.Capacity{}},
		{"cpu", q("cpu", "requests.cpu", "4", "1"), provider.Capacity{Known: true, Proxies: 3, Binding: "quota cpu requests.cpu"}},
	} {
		got := quotaCapacity(Headroom{PodQuotas: []QuotaUsage{tc.q}}, nil, needs)
		if got != tc.want {
			t.Errorf("%s: capacity %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func mustQ(t *testing.T, s string) Quantity {
	t.Helper()
	m, err := quantity.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return Quantity{Text: s, Milli: m}
}
