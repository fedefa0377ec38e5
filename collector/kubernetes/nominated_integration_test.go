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
)

// TestIntegrationScheduleNominated: on the real kube-apiserver, a Pending
// Pod whose status names a nominated node (as kube-scheduler writes it
// while a preemption clears room) is sent by the nominated watch's field
// selector, which the API server accepts, and takes its room on that node
// from the fit; once it is no longer nominated, the room is back. No
// scheduler runs: the Pod names one that does not exist, so nothing binds
// it or clears its nomination.
func TestIntegrationScheduleNominated(t *testing.T) {
	cl := clusterFromEnv(t)
	admin := cl.clientset(t, cl.adminToken, nil)
	ctx := context.Background()
	ns := fmt.Sprintf("nominated-it-%08x", rand.Uint32())
	createNamespace(t, admin, ns)
	t.Cleanup(func() { _ = admin.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}) })
	prefix := ns + "-"
	// Only this test's Node takes the proxy: its nodeSelector.
	createSynthNode(t, admin, prefix, synthNode{name: "a", alloc: []string{"cpu", "4", "memory", "8Gi", "pods", "110"}, labels: map[string]string{"pool": ns}})
	t.Cleanup(func() { _ = admin.CoreV1().Nodes().Delete(ctx, prefix+"a", metav1.DeleteOptions{}) })

	c := scheduleChecker(t, cl, ns, podSpec(`cpu: "1"`, "  nodeSelector: {pool: "+ns+"}\n"), "")
	capacity := func() (int64, string) {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		v := c.Check(cctx, slog.New(slog.DiscardHandler), TargetName)
		return v.Capacity.Proxies, string(v.Reason) + ": " + v.Message
	}
	// Polled: the watch delivers an event when it does, however slow the
	// machine; only what holds once it has is asserted.
	waitCapacity := func(want int64, what string) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for {
			got, msg := capacity()
			if got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: capacity %d (%s), want %d", what, got, msg, want)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	waitCapacity(4, "nothing nominated")

	pending := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "preemptor"},
		Spec: corev1.PodSpec{SchedulerName: "no-such-scheduler", AutomountServiceAccountToken: new(bool),
			Containers: []corev1.Container{{Name: "big", Image: "registry.example/big:1",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")}}}}}}
	pending, err := admin.CoreV1().Pods(ns).Create(ctx, pending, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitCapacity(4, "a Pending Pod, not nominated")
	pending.Status.NominatedNodeName = prefix + "a"
	if pending, err = admin.CoreV1().Pods(ns).UpdateStatus(ctx, pending, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("nominate: %v", err)
	}
	waitCapacity(1, "a Pod of 3 CPUs nominated to the node")
	pending.Status.NominatedNodeName = ""
	if _, err = admin.CoreV1().Pods(ns).UpdateStatus(ctx, pending, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("clear the nomination: %v", err)
	}
	waitCapacity(4, "the nomination cleared")
}
