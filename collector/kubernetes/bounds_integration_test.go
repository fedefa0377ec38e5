//go:build integration

package kubernetes

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestIntegrationScheduleAbsurdRequests: on the real kube-apiserver, a
// node filled by Pods whose requests sum beyond int64 (three of 2^62 bytes
// of memory; two of 2^63−1 cpus), which the API server admits, takes no
// copy of the proxy Pod: Unschedulable, naming the request that could not
// be counted, never Ready on a sum that wrapped.
func TestIntegrationScheduleAbsurdRequests(t *testing.T) {
	cl := clusterFromEnv(t)
	admin := cl.clientset(t, cl.adminToken, nil)
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		resource corev1.ResourceName
		each     string
		pods     int
	}{
		{"memory", corev1.ResourceMemory, "4611686018427387904", 3},
		{"cpu", corev1.ResourceCPU, "9223372036854775807", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := fmt.Sprintf("absurd-it-%08x", rand.Uint32())
			createNamespace(t, admin, ns)
			t.Cleanup(func() { _ = admin.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}) })
			node := ns + "-full"
			createSynthNode(t, admin, ns+"-", synthNode{name: "full", alloc: []string{"cpu", "4", "memory", "8Gi", "pods", "110"},
				labels: map[string]string{"absurd-it": ns}})
			t.Cleanup(func() { _ = admin.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{}) })
			for i := range tc.pods {
				p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("filler-%d", i)},
					Spec: corev1.PodSpec{NodeName: node, AutomountServiceAccountToken: new(bool),
						Containers: []corev1.Container{{Name: "filler", Image: "registry.example/filler:1",
							Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{tc.resource: resource.MustParse(tc.each)}}}}}}
				if _, err := admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
					t.Fatalf("bind filler pod %d: %v", i, err)
				}
			}
			// Only this node matches the template: other tests' nodes
			// are counted, but never fit.
			template := podSpec(`cpu: "1", memory: 1Gi`, "  nodeSelector: {absurd-it: "+ns+"}\n")
			path := filepath.Join(t.TempDir(), "pod.yaml")
			if err := os.WriteFile(path, []byte(template), 0o600); err != nil {
				t.Fatal(err)
			}
			pt, err := ReadPodTemplate(path)
			if err != nil {
				t.Fatal(err)
			}
			c, err := New(&Entry{Name: "integration", Kubeconfig: cl.kubeconfigFor(t, cl.adminToken, nil),
				LabelSelector: DefaultLabelSelector, Namespace: ns, PodTemplate: pt, Schedule: true}, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := c.Close(); err != nil {
					t.Error(err)
				}
			})
			cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			v := c.Check(cctx, slog.New(slog.DiscardHandler), TargetName)
			cancel()
			t.Logf("%s: %s (capacity %s)", v.Reason, v.Message, v.Capacity)
			want := "1 node(s) whose bound Pods' requests cannot be counted (" + ns + "/filler-"
			if v.Reason != ReasonUnschedulable || !strings.Contains(v.Message, want) || !strings.Contains(v.Message, "requests "+string(tc.resource)) {
				t.Errorf("verdict %s %q, want Unschedulable with %q", v.Reason, v.Message, want)
			}
			if !v.Capacity.Known || v.Capacity.Proxies != 0 {
				t.Errorf("capacity %s, want 0", v.Capacity)
			}
		})
	}
}
