//go:build integration

package kubernetes

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// oracleScheduler is the schedulerName of the kube-scheduler ctl.sh
// starts: it binds only the Pods that name it.
const oracleScheduler = "phe-oracle"

// startScheduler starts the real kube-scheduler (ctl.sh start-scheduler)
// for the test and stops it, by its PID, when the test ends.
func startScheduler(t *testing.T, cl *cluster) {
	t.Helper()
	bin := os.Getenv("PHE_K8S_SCHEDULER")
	if bin == "" {
		t.Fatal("PHE_K8S_SCHEDULER not set: run the integration tests with testdata/kubernetes/run-integration.sh (make integration-kubernetes)")
	}
	if out, err := exec.Command(cl.ctl, "start-scheduler", cl.state, bin).CombinedOutput(); err != nil {
		t.Fatalf("start kube-scheduler: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command(cl.ctl, "stop-scheduler", cl.state).CombinedOutput(); err != nil {
			t.Errorf("stop kube-scheduler: %v\n%s", err, out)
		}
	})
}

// synthNode is a synthetic Node of a case: no kubelet runs it.
type synthNode struct {
	name      string
	alloc     []string // cpu, memory, pods (and more) as name, quantity pairs
	labels    map[string]string
	taints    []corev1.Taint
	cordoned  bool
	boundCPU  string // requests.cpu of a Pod bound to it beforehand ("" none)
	boundPods int    // how many such Pods
}

// scheduleCase is one case of the oracle test.
type scheduleCase struct {
	name string
	// template is the proxy Pod's spec as YAML, under spec:.
	template string
	nodes    []synthNode
	// limitRange, when set, is the namespace's LimitRange default requests.
	limitRange corev1.ResourceList
	// bound are Pods bound to the case's nodes beforehand (their
	// spec.nodeName the node's short name); nsLabels the namespace's labels.
	bound    []*corev1.Pod
	nsLabels map[string]string
	// cause, when set, is what the verdict's message must name.
	cause string
}

// TestIntegrationScheduleOracle: for each case, the exporter's capacity
// (with schedule, from its watch caches of the real kube-apiserver's
// Nodes and Pods) equals how many copies of the same Pod the real
// kube-scheduler binds when that many and a few more are created; when it
// binds none, the verdict is Unschedulable, its message counting the
// nodes per cause.
func TestIntegrationScheduleOracle(t *testing.T) {
	cl := clusterFromEnv(t)
	admin := cl.clientset(t, cl.adminToken, nil)
	startScheduler(t, cl)
	gi := func(n int) string { return fmt.Sprintf("%dGi", n) }
	std := []string{"cpu", "4", "memory", gi(8), "pods", "110"}
	cases := []scheduleCase{
		{name: "resources", template: podSpec(`cpu: "1", memory: 3Gi`, ""),
			nodes: []synthNode{{name: "a", alloc: std, boundCPU: "2500m", boundPods: 1}, {name: "b", alloc: std}}},
		{name: "taints-and-tolerations", template: podSpec(`cpu: "1"`, "  tolerations: [{key: dedicated, operator: Equal, value: proxies, effect: NoSchedule}]\n"),
			nodes: []synthNode{
				{name: "gpu", alloc: std, taints: []corev1.Taint{{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}}},
				{name: "proxies", alloc: std, taints: []corev1.Taint{{Key: "dedicated", Value: "proxies", Effect: corev1.TaintEffectNoSchedule}}},
				{name: "evict", alloc: std, taints: []corev1.Taint{{Key: "maintenance", Effect: corev1.TaintEffectNoExecute}}},
				{name: "soft", alloc: []string{"cpu", "2", "memory", gi(8), "pods", "110"}, taints: []corev1.Taint{{Key: "x", Effect: corev1.TaintEffectPreferNoSchedule}}},
			}},
		{name: "node-selector", template: podSpec(`cpu: "1"`, "  nodeSelector: {pool: proxies}\n"),
			nodes: []synthNode{{name: "p", alloc: std, labels: map[string]string{"pool": "proxies"}}, {name: "b", alloc: std, labels: map[string]string{"pool": "batch"}}}},
		{name: "required-node-affinity", template: podSpec(`cpu: "1"`, "  affinity:\n    nodeAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n        nodeSelectorTerms:\n        - matchExpressions: [{key: zone, operator: In, values: [a, b]}]\n"),
			nodes: []synthNode{{name: "za", alloc: std, labels: map[string]string{"zone": "a"}}, {name: "zc", alloc: std, labels: map[string]string{"zone": "c"}}, {name: "zb", alloc: []string{"cpu", "2", "memory", gi(8), "pods", "110"}, labels: map[string]string{"zone": "b"}}}},
		{name: "cordoned", template: podSpec(`cpu: "1"`, ""),
			nodes: []synthNode{{name: "c", alloc: std, cordoned: true}, {name: "u", alloc: []string{"cpu", "3", "memory", gi(8), "pods", "110"}}}},
		{name: "pod-limit", template: podSpec(`cpu: 100m`, ""),
			nodes: []synthNode{{name: "small", alloc: []string{"cpu", "4", "memory", gi(8), "pods", "4"}, boundCPU: "0", boundPods: 1}, {name: "full", alloc: []string{"cpu", "4", "memory", gi(8), "pods", "2"}, boundCPU: "0", boundPods: 2}}},
		{name: "init-containers", template: podSpec(`cpu: 500m`, "  initContainers: [{name: init, image: registry.example/init:1, resources: {requests: {cpu: \"2\"}}}]\n"),
			nodes: []synthNode{{name: "a", alloc: std}, {name: "b", alloc: []string{"cpu", "5", "memory", gi(8), "pods", "110"}}}},
		{name: "limitrange-defaults", template: podSpec("", ""), limitRange: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1500m")},
			nodes: []synthNode{{name: "a", alloc: std}, {name: "b", alloc: []string{"cpu", "2", "memory", gi(8), "pods", "110"}}}},
		{name: "unschedulable", template: podSpec(`cpu: "2"`, "  nodeSelector: {pool: proxies}\n"),
			nodes: []synthNode{
				{name: "full-1", alloc: std, labels: map[string]string{"pool": "proxies"}, boundCPU: "3", boundPods: 1},
				{name: "full-2", alloc: std, labels: map[string]string{"pool": "proxies"}, boundCPU: "3", boundPods: 1},
				{name: "gpu", alloc: std, labels: map[string]string{"pool": "proxies"}, taints: []corev1.Taint{{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}}},
				{name: "cordoned", alloc: std, labels: map[string]string{"pool": "proxies"}, cordoned: true},
				{name: "batch", alloc: std, labels: map[string]string{"pool": "batch"}},
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { runScheduleCase(t, cl, admin, tc) })
	}
}

// podSpec is a proxy Pod template with requests (the YAML flow map's
// entries, "" for none) and extra spec lines.
func podSpec(requests, extra string) string {
	res := ""
	if requests != "" {
		res = "\n    resources: {requests: {" + requests + "}}"
	}
	return "apiVersion: v1\nkind: Pod\nmetadata:\n  generateName: proxy-\n  labels: {app: proxy}\nspec:\n" +
		"  automountServiceAccountToken: false\n  containers:\n  - name: proxy\n    image: registry.example/proxy:1" + res + "\n" + extra
}

func runScheduleCase(t *testing.T, cl *cluster, admin *k8s.Clientset, tc scheduleCase) {
	ctx := context.Background()
	ns := setupScheduleCase(t, admin, tc)
	runScheduleCheck(ctx, t, cl, admin, tc, ns)
}

// setupScheduleCase makes the case's namespace, its Nodes (named after
// the namespace, deleted when the test ends) and its bound Pods.
func setupScheduleCase(t *testing.T, admin *k8s.Clientset, tc scheduleCase) string {
	t.Helper()
	ctx := context.Background()
	ns := fmt.Sprintf("schedule-it-%08x", rand.Uint32())
	createNamespace(t, admin, ns)
	t.Cleanup(func() { _ = admin.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}) })
	if tc.limitRange != nil {
		_, err := admin.CoreV1().LimitRanges(ns).Create(ctx, &corev1.LimitRange{ObjectMeta: metav1.ObjectMeta{Name: "defaults"},
			Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{Type: corev1.LimitTypeContainer, DefaultRequest: tc.limitRange}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	if tc.nsLabels != nil {
		n, err := admin.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Labels = tc.nsLabels
		if _, err := admin.CoreV1().Namespaces().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	prefix := ns + "-"
	for _, p := range tc.bound {
		p = p.DeepCopy()
		p.Spec.NodeName = prefix + p.Spec.NodeName
		p.Spec.AutomountServiceAccountToken = new(bool)
		if _, err := admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("bind pod %s: %v", p.Name, err)
		}
	}
	for _, n := range tc.nodes {
		createSynthNode(t, admin, prefix, n)
		for i := range n.boundPods {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("filler-%s-%d", n.name, i)},
				Spec: corev1.PodSpec{NodeName: prefix + n.name, AutomountServiceAccountToken: new(bool),
					Containers: []corev1.Container{{Name: "filler", Image: "registry.example/filler:1",
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(n.boundCPU)}}}}}}
			if _, err := admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
				t.Fatalf("bind filler pod to %s: %v", n.name, err)
			}
		}
	}
	t.Cleanup(func() {
		for _, n := range tc.nodes {
			_ = admin.CoreV1().Nodes().Delete(ctx, prefix+n.name, metav1.DeleteOptions{})
		}
	})
	return ns
}

func runScheduleCheck(ctx context.Context, t *testing.T, cl *cluster, admin *k8s.Clientset, tc scheduleCase, ns string) {
	// The exporter's verdict and capacity.
	c := scheduleChecker(t, cl, ns, tc.template, "")
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	v := c.Check(cctx, slog.New(slog.DiscardHandler), TargetName)
	cancel()
	if !v.Capacity.Known {
		t.Fatalf("no capacity: %s %s", v.Reason, v.Message)
	}
	want := v.Capacity.Proxies

	// The oracle: that many copies and three more, as the operator would
	// create them, bound by the real kube-scheduler.
	bound := oracleBinds(t, admin, ns, tc.template, int(want)+3)
	t.Logf("capacity %d (%s), kube-scheduler bound %d; %s: %s", want, v.Capacity.Binding, bound, v.Reason, v.Message)
	if int64(bound) != want {
		t.Errorf("exporter's capacity %d, kube-scheduler bound %d (%s %s)", want, bound, v.Reason, v.Message)
	}
	if tc.cause != "" && !strings.Contains(v.Message, tc.cause) {
		t.Errorf("message %q does not name %q", v.Message, tc.cause)
	}
	switch {
	case want == 0 && (v.Reason != ReasonUnschedulable || !strings.HasPrefix(v.Message, fmt.Sprintf("0/%d nodes are available: ", countNodes(t, admin)))):
		t.Errorf("verdict %s %q, want Unschedulable counting the nodes", v.Reason, v.Message)
	case want > 0 && (v.Reason != provider.ReasonReady || v.Capacity.Binding != "nodes"):
		t.Errorf("verdict %s %q, capacity bound by %q: want Ready, bound by nodes", v.Reason, v.Message, v.Capacity.Binding)
	}
}

func countNodes(t *testing.T, admin *k8s.Clientset) int {
	t.Helper()
	l, err := admin.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return len(l.Items)
}

// createSynthNode creates a Node with its status written through the
// status subresource (allocatable, Ready) and its taints as the case says:
// the TaintNodesByCondition admission's node.kubernetes.io/not-ready taint
// is lifted, since no node controller runs to lift it.
func createSynthNode(t *testing.T, admin *k8s.Clientset, prefix string, n synthNode) {
	t.Helper()
	ctx := context.Background()
	labels := map[string]string{"kubernetes.io/hostname": prefix + n.name, "provider-health-test": "synthetic"}
	for k, v := range n.labels {
		labels[k] = v
	}
	node, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: prefix + n.name, Labels: labels}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create node %s: %v", n.name, err)
	}
	alloc := fitResources(n.alloc...)
	node.Status.Capacity, node.Status.Allocatable = alloc, alloc
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	if node, err = admin.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("node %s status: %v", n.name, err)
	}
	node.Spec.Taints, node.Spec.Unschedulable = n.taints, n.cordoned
	if n.cordoned {
		node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule})
	}
	if _, err = admin.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("node %s taints: %v", n.name, err)
	}
}

// oracleBinds creates n copies of the template for the oracle scheduler,
// waits until each is bound or marked unschedulable, counts the bound, and
// force-deletes them all.
func oracleBinds(t *testing.T, admin *k8s.Clientset, ns, template string, n int) int {
	t.Helper()
	ctx := context.Background()
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict([]byte(template), &pod); err != nil {
		t.Fatal(err)
	}
	pod.Spec.SchedulerName = oracleScheduler
	pod.Labels["phe-oracle"] = "copy"
	defer func() {
		zero := int64(0)
		_ = admin.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero},
			metav1.ListOptions{LabelSelector: "phe-oracle=copy"})
	}()
	for range n {
		if _, err := admin.CoreV1().Pods(ns).Create(ctx, &pod, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create copy: %v", err)
		}
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		l, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "phe-oracle=copy"})
		if err != nil {
			t.Fatal(err)
		}
		bound, settled := 0, 0
		for _, p := range l.Items {
			if p.Spec.NodeName != "" {
				bound++
				settled++
				continue
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
					settled++
				}
			}
		}
		if settled == n {
			return bound
		}
		if time.Now().After(deadline) {
			t.Fatalf("kube-scheduler settled %d of %d copies (%d bound) in 3 minutes", settled, n, bound)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// scheduleChecker is a schedule entry on the test cluster, as the admin,
// fitting template in ns, with capacity_domain key ("" none); it is closed
// when the test ends.
func scheduleChecker(t *testing.T, cl *cluster, ns, template, key string) *Checker {
	t.Helper()
	path := filepath.Join(t.TempDir(), "pod.yaml")
	if err := os.WriteFile(path, []byte(template), 0o600); err != nil {
		t.Fatal(err)
	}
	pt, err := ReadPodTemplate(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(&Entry{Name: "integration", Kubeconfig: cl.kubeconfigFor(t, cl.adminToken, nil), LabelSelector: DefaultLabelSelector,
		Namespace: ns, PodTemplate: pt, Schedule: true, CapacityDomain: key}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	return c
}
