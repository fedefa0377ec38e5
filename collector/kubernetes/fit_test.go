package kubernetes

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func fitResources(kv ...string) corev1.ResourceList {
	l := corev1.ResourceList{}
	for i := 0; i+1 < len(kv); i += 2 {
		l[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return l
}

func fitNode(name string, mut func(*corev1.Node), alloc ...string) *corev1.Node {
	if len(alloc) == 0 {
		alloc = []string{"cpu", "4", "memory", "8Gi", "pods", "110"}
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
		Status: corev1.NodeStatus{Allocatable: fitResources(alloc...)}}
	if mut != nil {
		mut(n)
	}
	return n
}

func fitPod(mut func(*corev1.Pod), req ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "proxy", Namespace: "egress-proxies"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "proxy", Resources: corev1.ResourceRequirements{Requests: fitResources(req...)}}}}}
	if mut != nil {
		mut(p)
	}
	return p
}

func boundPod(node string, req ...string) *corev1.Pod {
	p := fitPod(nil, req...)
	p.Spec.NodeName = node
	return p
}

func TestFit(t *testing.T) {
	t.Parallel()
	taint := func(key, value string, effect corev1.TaintEffect) func(*corev1.Node) {
		return func(n *corev1.Node) {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: key, Value: value, Effect: effect})
		}
	}
	cordon := func(n *corev1.Node) { n.Spec.Unschedulable = true }
	label := func(k, v string) func(*corev1.Node) { return func(n *corev1.Node) { n.Labels[k] = v } }
	tolerate := func(key string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists})
		}
	}
	cases := []struct {
		name    string
		pod     *corev1.Pod
		nodes   []*corev1.Node
		bound   []*corev1.Pod
		copies  int64
		message string
	}{
		{
			name:    "cpu and memory: the least of the two per node",
			pod:     fitPod(nil, "cpu", "1", "memory", "3Gi"),
			nodes:   []*corev1.Node{fitNode("a", nil), fitNode("b", nil)},
			bound:   []*corev1.Pod{boundPod("a", "cpu", "2500m")},
			copies:  1 + 2, // a: cpu 1.5 left → 1; b: memory 8/3 → 2
			message: "3 copies of the Pod fit on 2/2 nodes",
		},
		{
			name:    "no node has room: the scheduler's histogram",
			pod:     fitPod(nil, "cpu", "2", "memory", "1Gi"),
			nodes:   []*corev1.Node{fitNode("a", nil), fitNode("b", nil), fitNode("c", nil)},
			bound:   []*corev1.Pod{boundPod("a", "cpu", "3"), boundPod("b", "cpu", "3", "memory", "7.5Gi"), boundPod("c", "cpu", "3")},
			message: "0/3 nodes are available: 1 Insufficient memory, 3 Insufficient cpu",
		},
		{
			name: "taints, cordon, selector: the first failing filter names the cause",
			pod: fitPod(func(p *corev1.Pod) {
				p.Spec.NodeSelector = map[string]string{"pool": "proxies"}
			}, "cpu", "1"),
			nodes: []*corev1.Node{
				fitNode("gpu", func(n *corev1.Node) {
					taint("dedicated", "gpu", corev1.TaintEffectNoSchedule)(n)
					label("pool", "proxies")(n)
				}),
				fitNode("evict", func(n *corev1.Node) { taint("drain", "", corev1.TaintEffectNoExecute)(n); label("pool", "proxies")(n) }),
				fitNode("cordoned", func(n *corev1.Node) { cordon(n); taint("dedicated", "gpu", corev1.TaintEffectNoSchedule)(n) }),
				fitNode("other", label("pool", "batch")),
				fitNode("soft", func(n *corev1.Node) {
					taint("x", "y", corev1.TaintEffectPreferNoSchedule)(n)
					label("pool", "proxies")(n)
				}, "cpu", "500m", "pods", "10"),
			},
			message: "0/5 nodes are available: 1 Insufficient cpu, 1 node(s) didn't match Pod's node affinity/selector, 1 node(s) had untolerated taint {dedicated: gpu}, 1 node(s) had untolerated taint {drain: }, 1 node(s) were unschedulable",
		},
		{
			name:    "tolerated taint and tolerated cordon",
			pod:     fitPod(func(p *corev1.Pod) { tolerate("dedicated")(p); tolerate(corev1.TaintNodeUnschedulable)(p) }, "cpu", "1"),
			nodes:   []*corev1.Node{fitNode("gpu", taint("dedicated", "gpu", corev1.TaintEffectNoSchedule)), fitNode("c", cordon)},
			copies:  8,
			message: "8 copies of the Pod fit on 2/2 nodes",
		},
		{
			name: "required node affinity",
			pod: fitPod(func(p *corev1.Pod) {
				p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
					NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a", "b"}}}}},
				}}}
			}, "cpu", "1"),
			nodes:   []*corev1.Node{fitNode("a", label("zone", "a")), fitNode("c", label("zone", "c")), fitNode("none", nil)},
			copies:  4,
			message: "4 copies of the Pod fit on 1/3 nodes; the others take none: 2 node(s) didn't match Pod's node affinity/selector",
		},
		{
			name:    "the node's pod limit",
			pod:     fitPod(nil, "cpu", "100m"),
			nodes:   []*corev1.Node{fitNode("small", nil, "cpu", "4", "pods", "3"), fitNode("full", nil, "cpu", "4", "pods", "1")},
			bound:   []*corev1.Pod{boundPod("small"), boundPod("full")},
			copies:  2,
			message: "2 copies of the Pod fit on 1/2 nodes; the others take none: 1 Too many pods",
		},
		{
			name: "init containers and overhead count",
			pod: fitPod(func(p *corev1.Pod) {
				p.Spec.InitContainers = []corev1.Container{{Name: "init", Resources: corev1.ResourceRequirements{Requests: fitResources("cpu", "3")}}}
				p.Spec.Overhead = fitResources("cpu", "500m")
			}, "cpu", "1"),
			nodes:  []*corev1.Node{fitNode("a", nil, "cpu", "8", "pods", "110")},
			copies: 2, // max(1, 3) + 0.5 = 3.5 per copy
		},
		{
			name:    "an extended resource the node lacks",
			pod:     fitPod(nil, "cpu", "1", "example.com/gpu", "1"),
			nodes:   []*corev1.Node{fitNode("a", nil), fitNode("g", nil, "cpu", "4", "pods", "110", "example.com/gpu", "2")},
			copies:  2,
			message: "2 copies of the Pod fit on 1/2 nodes; the others take none: 1 Insufficient example.com/gpu",
		},
		{
			name:    "no requests: pod slots alone",
			pod:     fitPod(nil),
			nodes:   []*corev1.Node{fitNode("a", nil, "pods", "5")},
			bound:   []*corev1.Pod{boundPod("a"), boundPod("a", "cpu", "64")},
			copies:  3,
			message: "3 copies of the Pod fit on 1/1 nodes",
		},
		{
			name:    "overcommitted node",
			pod:     fitPod(nil, "memory", "1Gi"),
			nodes:   []*corev1.Node{fitNode("a", nil)},
			bound:   []*corev1.Pod{boundPod("a", "memory", "9Gi")},
			message: "0/1 nodes are available: 1 Insufficient memory",
		},
		{
			name:    "no nodes",
			pod:     fitPod(nil, "cpu", "1"),
			message: "0/0 nodes are available",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var stripped []*corev1.Pod
			for _, p := range tc.bound {
				stripped = append(stripped, stripPod(p))
			}
			var nodes []*corev1.Node
			for _, n := range tc.nodes {
				nodes = append(nodes, stripNode(n))
			}
			r := fit(tc.pod, nodes, nodeUsage(stripped))
			if r.Copies != tc.copies {
				t.Errorf("copies = %d, want %d (%s)", r.Copies, tc.copies, r.Message())
			}
			if tc.message != "" && r.Message() != tc.message {
				t.Errorf("message = %q\nwant      %q", r.Message(), tc.message)
			}
		})
	}
}

func TestFitTerminalPodsHoldNothing(t *testing.T) {
	t.Parallel()
	done := boundPod("a", "cpu", "4")
	done.Status.Phase = corev1.PodSucceeded
	r := fit(fitPod(nil, "cpu", "1"), []*corev1.Node{fitNode("a", nil)}, nodeUsage([]*corev1.Pod{stripPod(done)}))
	if r.Copies != 4 {
		t.Errorf("copies = %d, want 4", r.Copies)
	}
}

// The message stays bounded however many distinct taints the nodes have.
func TestFitMessageBounded(t *testing.T) {
	t.Parallel()
	var nodes []*corev1.Node
	for i := range 50 {
		nodes = append(nodes, fitNode("n", func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: strings.Repeat("k", 60) + string(rune('a'+i%26)) + string(rune('a'+i/26)), Effect: corev1.TaintEffectNoSchedule}}
		}))
	}
	msg := fit(fitPod(nil, "cpu", "1"), nodes, nil).Message()
	if !strings.HasPrefix(msg, "0/50 nodes are available: 1 node(s) had untolerated taint {") || !strings.HasSuffix(msg, ", and 42 more causes") {
		t.Errorf("message = %q", msg)
	}
	if len(msg) > 1200 {
		t.Errorf("message is %d bytes", len(msg))
	}
}

// stripPod keeps what the fit reads and nothing of the Pod's spec besides.
func TestStripPod(t *testing.T) {
	t.Parallel()
	p := boundPod("a", "cpu", "1", "memory", "1Gi")
	p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "x", Resources: corev1.ResourceRequirements{Requests: fitResources("cpu", "2")}}}
	p.Spec.Containers[0].Image = "registry.example/proxy:1"
	p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "A", Value: strings.Repeat("x", 1000)}}
	p.Annotations = map[string]string{"big": strings.Repeat("y", 1000)}
	p.Status.Phase = corev1.PodRunning
	s := stripPod(p)
	if s.Spec.NodeName != "a" || s.Status.Phase != corev1.PodRunning || s.Name != "proxy" || s.Namespace != "egress-proxies" {
		t.Errorf("stripped pod lost its identity, node or phase: %+v", s)
	}
	if len(s.Annotations) != 0 || len(s.Spec.InitContainers) != 0 || len(s.Spec.Containers) != 1 || s.Spec.Containers[0].Image != "" || len(s.Spec.Containers[0].Env) != 0 {
		t.Errorf("stripped pod kept more than its requests: %+v", s.Spec)
	}
	if n := needOf(s); n.milliCPU != 2000 || n.memory != 1<<30 {
		t.Errorf("stripped pod's need = %+v, want the init container's cpu (2) and the container's memory", n)
	}
	if n := strippedNeed(s); n.milliCPU != 2000 || n.memory != 1<<30 {
		t.Errorf("stripped pod's need read directly = %+v, want what needOf reads", n)
	}
}
