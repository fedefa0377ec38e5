//go:build integration

package kubernetes

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// TestIntegrationScheduleOracleDomains: capacity_domain against the real
// kube-scheduler, on six synthetic Nodes in three zones (two of 1 CPU
// and four of 2, as TestIntegrationScheduleOracleProxies) with proxies
// running: two on b (zone z1), one on d (z2), one on e (z3). The zone
// label's key is the test's own, so that no other test's Nodes add
// domains. For each template, from one check of the exporter:
//   - each domain's capacity equals what the scheduler binds of copies
//     pinned to that zone by a nodeSelector;
//   - each zone's loss is made for real on a fresh copy of the cluster:
//     its Nodes get node.kubernetes.io/unreachable NoSchedule and
//     NoExecute, its Pods are deleted, its proxies created again and
//     three copies more than the exporter says still fit; the bound
//     copies less the proxies equal the exporter's after-loss.
func TestIntegrationScheduleOracleDomains(t *testing.T) {
	cl := clusterFromEnv(t)
	admin := cl.clientset(t, cl.adminToken, nil)
	startScheduler(t, cl)
	key := fmt.Sprintf("oracle.phe.test/zone-%08x", rand.Uint32())
	zone := func(z string) map[string]string { return map[string]string{key: z} }
	small := []string{"cpu", "1", "memory", "8Gi", "pods", "110"}
	big := []string{"cpu", "2", "memory", "8Gi", "pods", "110"}
	six := []synthNode{
		{name: "a", alloc: small, labels: zone("z1")}, {name: "b", alloc: big, labels: zone("z1")},
		{name: "c", alloc: small, labels: zone("z2")}, {name: "d", alloc: big, labels: zone("z2")},
		{name: "e", alloc: big, labels: zone("z3")}, {name: "f", alloc: big, labels: zone("z3")},
	}
	proxyOn := func(name, node string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "proxy"}},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "proxy", Image: "registry.example/proxy:1",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("256Mi")}}}}}}
	}
	bound := []*corev1.Pod{proxyOn("proxy-b1", "b"), proxyOn("proxy-b2", "b"), proxyOn("proxy-d", "d"), proxyOn("proxy-e", "e")}
	const req = `cpu: 500m, memory: 256Mi`
	spread := func(policy string) string {
		return "  topologySpreadConstraints:\n  - maxSkew: 1\n    topologyKey: " + key + "\n    whenUnsatisfiable: DoNotSchedule\n" +
			"    labelSelector: {matchLabels: {app: proxy}}\n    nodeTaintsPolicy: " + policy + "\n"
	}
	anti := "  affinity:\n    podAntiAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n" +
		"      - labelSelector: {matchLabels: {app: proxy}}\n        topologyKey: kubernetes.io/hostname\n"
	for _, tc := range []scheduleCase{
		{name: "plain", template: podSpec(req, "")},
		{name: "anti-affinity-per-node", template: podSpec(req, anti)},
		{name: "zone-spread-taints-ignore", template: podSpec(req, spread("Ignore"))},
		{name: "zone-spread-taints-honor", template: podSpec(req, spread("Honor"))},
	} {
		tc.nodes, tc.bound = six, bound
		t.Run(tc.name, func(t *testing.T) { runDomainsCase(t, cl, admin, tc, key) })
	}
}

func runDomainsCase(t *testing.T, cl *cluster, admin *k8s.Clientset, tc scheduleCase, key string) {
	ns := setupScheduleCase(t, admin, tc)
	v := checkDomains(t, cl, ns, tc.template, key)
	if len(v.Domains) != 3 {
		t.Fatalf("%s %q: domains %+v, want z1, z2, z3", v.Reason, v.Message, v.Domains)
	}
	capacity := make([]int, len(v.Domains))
	for k, d := range v.Domains {
		pinned := tc.template + fmt.Sprintf("  nodeSelector: {%q: %q}\n", key, d.Name)
		capacity[k] = oracleBinds(t, admin, ns, pinned, int(d.Capacity)+3)
	}
	// Each loss on a fresh copy of the cluster, alone: the copies must
	// find no Node of this one.
	for _, n := range tc.nodes {
		if err := admin.CoreV1().Nodes().Delete(context.Background(), ns+"-"+n.name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for k, d := range v.Domains {
		var afterLoss int
		t.Run("lose-"+d.Name, func(t *testing.T) { afterLoss = oracleAfterLoss(t, admin, tc, key, d) })
		t.Logf("%s %s: capacity %d (kube-scheduler %d), proxies %d, after loss %d (kube-scheduler %d)",
			tc.name, d.Name, d.Capacity, capacity[k], d.Proxies, d.AfterLoss, afterLoss)
		if int64(capacity[k]) != d.Capacity {
			t.Errorf("%s: capacity %d, kube-scheduler bound %d pinned to it", d.Name, d.Capacity, capacity[k])
		}
		if int64(afterLoss) != d.AfterLoss || !d.HasAfterLoss {
			t.Errorf("%s: after loss %d (%v), kube-scheduler's %d", d.Name, d.AfterLoss, d.HasAfterLoss, afterLoss)
		}
	}
	t.Logf("%s: %s %s", tc.name, v.Reason, v.Message)
}

// checkDomains is the exporter's check of the template in ns with
// capacity_domain key.
func checkDomains(t *testing.T, cl *cluster, ns, template, key string) provider.Verdict {
	t.Helper()
	c := scheduleChecker(t, cl, ns, template, key)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return c.Check(ctx, slog.New(slog.DiscardHandler), TargetName)
}

// oracleAfterLoss makes the loss of domain d for real on a fresh copy of
// the case's cluster, as a zone outage looks to the scheduler, and
// returns what kube-scheduler binds of the domain's proxies created again
// and more copies, less those proxies.
func oracleAfterLoss(t *testing.T, admin *k8s.Clientset, tc scheduleCase, key string, d provider.Domain) int {
	ctx := context.Background()
	ns := setupScheduleCase(t, admin, tc)
	prefix := ns + "-"
	for _, n := range tc.nodes {
		if n.labels[key] != d.Name {
			continue
		}
		node, err := admin.CoreV1().Nodes().Get(ctx, prefix+n.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		now := metav1.Now()
		node.Spec.Taints = append(node.Spec.Taints,
			corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoSchedule},
			corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute, TimeAdded: &now})
		if _, err := admin.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("taint node %s: %v", n.name, err)
		}
		zero := int64(0)
		pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + prefix + n.name})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			if err := admin.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
				t.Fatalf("delete pod %s: %v", p.Name, err)
			}
		}
	}
	schedulerSawLoss(t, admin, ns, prefix, tc, key, d.Name)
	// The lost proxies and three copies more than the exporter says fit
	// after them: the count of those bound, less the proxies.
	n := int(d.Proxies) + max(int(d.AfterLoss), 0) + 3
	return oracleBinds(t, admin, ns, tc.template, n) - int(d.Proxies)
}

// schedulerSawLoss waits until kube-scheduler leaves unscheduled a canary
// Pod pinned to the last Node of the lost domain, created after the Nodes
// were tainted and the Pods deleted: each watch's events come in order,
// so the scheduler has then seen the taints and the deletions, and no
// copy lands on a lost Node before it has.
func schedulerSawLoss(t *testing.T, admin *k8s.Clientset, ns, prefix string, tc scheduleCase, key, domain string) {
	t.Helper()
	ctx := context.Background()
	last := ""
	for _, n := range tc.nodes {
		if n.labels[key] == domain {
			last = prefix + n.name
		}
	}
	canary := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "canary"},
		Spec: corev1.PodSpec{SchedulerName: oracleScheduler, AutomountServiceAccountToken: new(bool),
			NodeSelector: map[string]string{corev1.LabelHostname: last},
			Containers:   []corev1.Container{{Name: "canary", Image: "registry.example/canary:1"}}}}
	if _, err := admin.CoreV1().Pods(ns).Create(ctx, canary, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create canary: %v", err)
	}
	zero := int64(0)
	defer func() {
		_ = admin.CoreV1().Pods(ns).Delete(ctx, "canary", metav1.DeleteOptions{GracePeriodSeconds: &zero})
	}()
	deadline := time.Now().Add(time.Minute)
	for {
		p, err := admin.CoreV1().Pods(ns).Get(ctx, "canary", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Spec.NodeName != "" {
			t.Fatalf("kube-scheduler bound the canary to lost node %s", p.Spec.NodeName)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("kube-scheduler did not judge the canary in a minute")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
