//go:build integration

package kubernetes

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestIntegrationScheduleOracleProxies: the proxy-shaped Pods
// (host ports, anti-affinity to their own copies, spread over zones) on
// six synthetic Nodes in three zones, two of 1 CPU and four of 2, another
// app's Pod holding host port 3128 on f and one proxy already bound to d.
// For each, the exporter's capacity equals what the real kube-scheduler
// binds when that many copies and three more are created, and the
// message names the cause the scheduler's plugins give.
func TestIntegrationScheduleOracleProxies(t *testing.T) {
	cl := clusterFromEnv(t)
	admin := cl.clientset(t, cl.adminToken, nil)
	startScheduler(t, cl)
	zone := func(z string) map[string]string { return map[string]string{corev1.LabelTopologyZone: z} }
	small := []string{"cpu", "1", "memory", "8Gi", "pods", "110"}
	big := []string{"cpu", "2", "memory", "8Gi", "pods", "110"}
	six := []synthNode{
		{name: "a", alloc: small, labels: zone("z1")}, {name: "b", alloc: big, labels: zone("z1")},
		{name: "c", alloc: small, labels: zone("z2")}, {name: "d", alloc: big, labels: zone("z2")},
		{name: "e", alloc: big, labels: zone("z3")}, {name: "f", alloc: big, labels: zone("z3")},
	}
	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "other", Labels: map[string]string{"app": "other"}},
		Spec: corev1.PodSpec{NodeName: "f", Containers: []corev1.Container{{Name: "other", Image: "registry.example/other:1",
			Ports: []corev1.ContainerPort{{ContainerPort: 3128, HostPort: 3128}}}}}}
	running := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "proxy-running", Labels: map[string]string{"app": "proxy"}},
		Spec: corev1.PodSpec{NodeName: "d", Containers: []corev1.Container{{Name: "proxy", Image: "registry.example/proxy:1",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("256Mi")}}}}}}
	guard := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "guard", Labels: map[string]string{"app": "guard"}},
		Spec: corev1.PodSpec{NodeName: "e", Containers: []corev1.Container{{Name: "guard", Image: "registry.example/guard:1"}},
			Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "proxy"}}, TopologyKey: corev1.LabelHostname}}}}}}
	bound := []*corev1.Pod{other, running}
	const req = `cpu: 500m, memory: 256Mi`
	anti := func(key, nsSel string) string {
		return "  affinity:\n    podAntiAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n" +
			"      - labelSelector: {matchLabels: {app: proxy}}\n        topologyKey: " + key + "\n" + nsSel
	}
	spread := func(when, extra string) string {
		return "  topologySpreadConstraints:\n  - maxSkew: 1\n    topologyKey: topology.kubernetes.io/zone\n    whenUnsatisfiable: " + when +
			"\n    labelSelector: {matchLabels: {app: proxy}}\n" + extra
	}
	// withPort is the proxy Pod (500m, 256Mi) with container port 3128
	// also a host port; hostNet the same port on the host network (the
	// API's defaulting makes it a host port).
	proxy := func(ports, extra string) string {
		return "apiVersion: v1\nkind: Pod\nmetadata:\n  generateName: proxy-\n  labels: {app: proxy}\nspec:\n" +
			"  automountServiceAccountToken: false\n  containers:\n  - name: proxy\n    image: registry.example/proxy:1\n" +
			"    resources: {requests: {" + req + "}}\n    ports: [" + ports + "]\n" + extra
	}
	withPort := func(extra string) string { return proxy("{containerPort: 3128, hostPort: 3128}", extra) }
	hostNet := proxy("{containerPort: 3128}", "  hostNetwork: true\n")
	// The seventh node, in a zone of its own, has a taint the proxy does
	// not tolerate: nodeTaintsPolicy Honor leaves its zone out of the
	// spread, Ignore (the default) counts it as a domain with no proxy.
	tainted := append(append([]synthNode{}, six...), synthNode{name: "g", alloc: big, labels: zone("z4"),
		taints: []corev1.Taint{{Key: "dedicated", Value: "batch", Effect: corev1.TaintEffectNoSchedule}}})
	cases := []scheduleCase{
		{name: "resources-only", template: podSpec(req, ""), nodes: six, bound: bound},
		{name: "host-port", template: withPort(""), nodes: six, bound: bound,
			cause: "1 node(s) didn't have free ports for the requested pod ports"},
		{name: "host-network", template: hostNet, nodes: six, bound: bound,
			cause: "1 node(s) didn't have free ports for the requested pod ports"},
		{name: "anti-affinity-per-node", template: podSpec(req, anti(corev1.LabelHostname, "")), nodes: six, bound: bound,
			cause: "node(s) didn't match pod anti-affinity rules"},
		{name: "anti-affinity-per-zone", template: podSpec(req, anti(corev1.LabelTopologyZone, "")), nodes: six, bound: bound,
			cause: "node(s) didn't match pod anti-affinity rules"},
		{name: "zone-spread", template: podSpec(req, spread("DoNotSchedule", "")), nodes: six, bound: bound},
		{name: "zone-spread-schedule-anyway", template: podSpec(req, spread("ScheduleAnyway", "")), nodes: six, bound: bound},
		{name: "host-port-where-taken", template: withPort("  nodeSelector: {topology.kubernetes.io/zone: z3}\n"), nodes: six,
			bound: []*corev1.Pod{other, {ObjectMeta: metav1.ObjectMeta{Name: "other-e", Labels: map[string]string{"app": "other"}},
				Spec: corev1.PodSpec{NodeName: "e", Containers: []corev1.Container{{Name: "other", Image: "registry.example/other:1",
					Ports: []corev1.ContainerPort{{ContainerPort: 3128, HostPort: 3128}}}}}}},
			cause: "2 node(s) didn't have free ports for the requested pod ports"},
		{name: "bound-anti-affinity-repels", template: podSpec(req, ""), nodes: six, bound: append([]*corev1.Pod{guard}, bound...),
			cause: "1 node(s) didn't satisfy existing pods anti-affinity rules"},
		{name: "namespace-selector", template: podSpec(req, anti(corev1.LabelHostname, "        namespaceSelector: {matchLabels: {team: proxies}}\n")),
			nodes: six, bound: bound, nsLabels: map[string]string{"team": "proxies"},
			cause: "node(s) didn't match pod anti-affinity rules"},
		{name: "min-domains", template: podSpec(req, spread("DoNotSchedule", "    minDomains: 4\n")), nodes: six, bound: bound,
			cause: "node(s) didn't match pod topology spread constraints"},
		{name: "node-taints-policy-honor", template: podSpec(req, spread("DoNotSchedule", "    nodeTaintsPolicy: Honor\n")), nodes: tainted, bound: bound},
		{name: "node-taints-policy-ignore", template: podSpec(req, spread("DoNotSchedule", "")), nodes: tainted, bound: bound,
			cause: "node(s) didn't match pod topology spread constraints"},
		{name: "host-port-and-zone-spread", template: withPort(spread("DoNotSchedule", "")), nodes: six, bound: bound},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { runScheduleCase(t, cl, admin, tc) })
	}
}
