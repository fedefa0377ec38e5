package kubernetes

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// proxyCluster is the cluster: six nodes in three zones (two of
// 1 CPU, four of 2), another app's Pod holding host port 3128 on f, one
// proxy (500m) already bound to d.
func proxyCluster() ([]*corev1.Node, []*corev1.Pod) {
	zone := func(z string) func(*corev1.Node) {
		return func(n *corev1.Node) { n.Labels[corev1.LabelTopologyZone] = z }
	}
	small := []string{"cpu", "1", "memory", "8Gi", "pods", "110"}
	big := []string{"cpu", "2", "memory", "8Gi", "pods", "110"}
	nodes := []*corev1.Node{
		fitNode("a", zone("z1"), small...), fitNode("b", zone("z1"), big...),
		fitNode("c", zone("z2"), small...), fitNode("d", zone("z2"), big...),
		fitNode("e", zone("z3"), big...), fitNode("f", zone("z3"), big...),
	}
	other := boundPod("f")
	other.Name, other.Labels = "other", map[string]string{"app": "other"}
	other.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 3128, HostPort: 3128, Protocol: corev1.ProtocolTCP}}
	running := boundPod("d", "cpu", "500m", "memory", "256Mi")
	running.Name, running.Labels = "proxy-running", map[string]string{"app": "proxy"}
	return nodes, []*corev1.Pod{stripPod(other), stripPod(running)}
}

func proxyPod(mut func(*corev1.Pod)) *corev1.Pod {
	return fitPod(func(p *corev1.Pod) {
		p.Labels = map[string]string{"app": "proxy"}
		if mut != nil {
			mut(p)
		}
	}, "cpu", "500m", "memory", "256Mi")
}

func antiAffinity(topologyKey string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "proxy"}}, TopologyKey: topologyKey}}}}
	}
}

func hostPort(p *corev1.Pod) {
	p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 3128, HostPort: 3128, Protocol: corev1.ProtocolTCP}}
}

func zoneSpread(when corev1.UnsatisfiableConstraintAction) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.TopologySpreadConstraints = append(p.Spec.TopologySpreadConstraints, corev1.TopologySpreadConstraint{
			MaxSkew: 1, TopologyKey: corev1.LabelTopologyZone, WhenUnsatisfiable: when,
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "proxy"}}})
	}
}

// TestFitWithPlugins: the table, judged by the scheduler's
// plugins with copies placed one after another. The same cases run
// against the real kube-scheduler in TestIntegrationScheduleOracle.
func TestFitWithPlugins(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		pod     *corev1.Pod
		copies  int64
		message string
	}{
		// a 2, b 4, c 2, d 3 (the running proxy's 500m), e 4, f 4.
		{name: "resources only", pod: proxyPod(nil), copies: 19},
		{name: "host port", pod: proxyPod(hostPort), copies: 5,
			message: "1 node(s) didn't have free ports for the requested pod ports"},
		{name: "host network", pod: proxyPod(func(p *corev1.Pod) {
			// The API's defaulting of a hostNetwork Pod: its container
			// ports are host ports.
			p.Spec.HostNetwork = true
			hostPort(p)
		}), copies: 5},
		{name: "anti-affinity per node", pod: proxyPod(antiAffinity(corev1.LabelHostname)), copies: 5,
			message: "1 node(s) didn't match pod anti-affinity rules"},
		{name: "anti-affinity per zone", pod: proxyPod(antiAffinity(corev1.LabelTopologyZone)), copies: 2,
			message: "4 node(s) didn't match pod anti-affinity rules"},
		// z1 takes 6, z2 5 (besides the running one), z3 then 7: one over
		// the others, never two.
		{name: "zone spread DoNotSchedule", pod: proxyPod(zoneSpread(corev1.DoNotSchedule)), copies: 18},
		{name: "zone spread ScheduleAnyway only scores", pod: proxyPod(zoneSpread(corev1.ScheduleAnyway)), copies: 19},
		{name: "host port and zone spread", pod: proxyPod(func(p *corev1.Pod) { hostPort(p); zoneSpread(corev1.DoNotSchedule)(p) }),
			// z1 2, z2 1 (c; d holds a proxy already, so z2 counts 2), z3 1 (e; f's port is taken).
			copies: 4},
		{name: "host port on the one node where it is taken", pod: proxyPod(func(p *corev1.Pod) {
			hostPort(p)
			p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: "f"}
		}), copies: 0, message: "0/6 nodes are available: 1 node(s) didn't have free ports for the requested pod ports, 5 node(s) didn't match Pod's node affinity/selector"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			nodes, pods := proxyCluster()
			r, err := fitWithPlugins(context.Background(), tc.pod, nodes, pods, nil, 1000)
			if err != nil {
				t.Fatal(err)
			}
			msg := r.Message()
			if r.Copies != tc.copies || !strings.Contains(msg, tc.message) {
				t.Errorf("copies %d (%s), want %d and %q", r.Copies, msg, tc.copies, tc.message)
			}
		})
	}
}

// TestFitWithPluginsBoundAntiAffinity: a bound Pod whose anti-affinity
// repels the proxy keeps it off that node, the copies otherwise free.
func TestFitWithPluginsBoundAntiAffinity(t *testing.T) {
	t.Parallel()
	nodes, pods := proxyCluster()
	guard := boundPod("e")
	guard.Name, guard.Labels = "guard", map[string]string{"app": "guard"}
	guard.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "proxy"}}, TopologyKey: corev1.LabelHostname}}}}
	pods = append(pods, stripPod(guard))
	r, err := fitWithPlugins(context.Background(), proxyPod(nil), nodes, pods, nil, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if r.Copies != 15 || r.Causes["node(s) didn't satisfy existing pods anti-affinity rules"] != 1 {
		t.Errorf("copies %d, %s: want 15, e refused by the guard's anti-affinity", r.Copies, r.Message())
	}
}

// TestFitWithPluginsLimit: the placing stops at the quota's capacity.
func TestFitWithPluginsLimit(t *testing.T) {
	t.Parallel()
	nodes, pods := proxyCluster()
	r, err := fitWithPlugins(context.Background(), proxyPod(zoneSpread(corev1.DoNotSchedule)), nodes, pods, nil, 3)
	if err != nil {
		t.Fatal(err)
	}
	if r.Copies != 3 || !r.Bounded || !strings.HasPrefix(r.Message(), "at least 3 copies") {
		t.Errorf("copies %d bounded %v (%s), want at least 3", r.Copies, r.Bounded, r.Message())
	}
}

// TestFitWithPluginsTaintedDomain: a seventh node, alone in its zone, has
// a taint the proxy does not tolerate. With nodeTaintsPolicy Ignore (the
// default) its zone is a domain that never takes a copy, so every other
// zone stays within one of it; Honor leaves it out of the spread.
func TestFitWithPluginsTaintedDomain(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		policy *corev1.NodeInclusionPolicy
		copies int64
	}{{nil, 2}, {new(corev1.NodeInclusionPolicyHonor), 18}} {
		nodes, pods := proxyCluster()
		nodes = append(nodes, fitNode("g", func(n *corev1.Node) {
			n.Labels[corev1.LabelTopologyZone] = "z4"
			n.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "batch", Effect: corev1.TaintEffectNoSchedule}}
		}))
		pod := proxyPod(func(p *corev1.Pod) {
			zoneSpread(corev1.DoNotSchedule)(p)
			p.Spec.TopologySpreadConstraints[0].NodeTaintsPolicy = tc.policy
		})
		r, err := fitWithPlugins(context.Background(), pod, nodes, pods, nil, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if r.Copies != tc.copies {
			t.Errorf("nodeTaintsPolicy %v: copies %d (%s), want %d", tc.policy, r.Copies, r.Message(), tc.copies)
		}
	}
}
