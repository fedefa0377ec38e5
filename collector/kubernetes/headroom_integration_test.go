//go:build integration

package kubernetes

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"

	"github.com/egress-proxies/provider_health_exporter/collector"
	"github.com/egress-proxies/provider_health_exporter/config"
)

// headroomNS is a namespace of this test's own: TestIntegration has the
// proxies' namespace. This file sorts before integration_test.go, so it
// runs before TestIntegration stops the API server.
const headroomNS = "headroom-it"

// TestIntegrationHeadroom runs the headroom requests against the real
// kube-apiserver with RBAC on: a ServiceAccount that may list but not
// create Pods is Forbidden with the message docs/configuration.md ("Kubernetes") shows; one that may do both
// is Ready; a ResourceQuota whose status (written through the status
// subresource: no controller-manager runs) shows pods used up gives
// QuotaExhausted, and freeing one gives Ready again.
func TestIntegrationHeadroom(t *testing.T) {
	cl := clusterFromEnv(t)
	ctx := context.Background()
	admin := cl.clientset(t, cl.adminToken, nil)
	createNamespace(t, admin, headroomNS)
	lister := headroomAccount(t, admin, "headroom-lister", []string{"list"})
	creator := headroomAccount(t, admin, "headroom-creator", []string{"list", "create", "delete"})

	canI := []CanI{{Verb: "create", Resource: "pods"}, {Verb: "delete", Resource: "pods"}}
	mins := map[corev1.ResourceName]Quantity{corev1.ResourcePods: mustQuantity("1")}
	run := func(t *testing.T, token string) (collector.Reason, string, Headroom) {
		t.Helper()
		c, err := New(&config.Kubernetes{Name: "integration", Kubeconfig: cl.kubeconfigFor(t, token, nil)}, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		logger := slog.New(slog.DiscardHandler)
		client, err := c.current(cctx, logger)
		if err != nil {
			t.Fatal(err)
		}
		h, reason, err := c.readHeadroom(cctx, logger, client, headroomNS, canI, mins)
		if err != nil {
			return reason, err.Error(), h
		}
		reason, msg := evaluateHeadroom(headroomNS, h, mins)
		return reason, msg, h
	}

	t.Run("Forbidden when the account may list but not create pods", func(t *testing.T) {
		reason, msg, _ := run(t, lister)
		if reason != collector.ReasonForbidden || !strings.HasPrefix(msg, "cannot create pods in namespace "+headroomNS) ||
			!strings.Contains(msg, "cannot delete pods in namespace "+headroomNS) {
			t.Errorf("got %s %q, want Forbidden: cannot create pods, cannot delete pods", reason, msg)
		}
	})
	t.Run("Ready when the account may create and delete pods, no quota", func(t *testing.T) {
		if reason, msg, h := run(t, creator); reason != collector.ReasonReady || msg != "" || len(h.CanI) != 2 || len(h.Quotas) != 0 {
			t.Errorf("got %s %q %+v, want Ready", reason, msg, h)
		}
	})

	hard := corev1.ResourceList{corev1.ResourcePods: resource.MustParse("3")}
	rq, err := admin.CoreV1().ResourceQuotas(headroomNS).Create(ctx, &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "proxies"},
		Spec:       corev1.ResourceQuotaSpec{Hard: hard},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create resource quota: %v", err)
	}
	setUsed := func(t *testing.T, pods string) {
		t.Helper()
		rq.Status = corev1.ResourceQuotaStatus{Hard: hard, Used: corev1.ResourceList{corev1.ResourcePods: resource.MustParse(pods)}}
		if rq, err = admin.CoreV1().ResourceQuotas(headroomNS).UpdateStatus(ctx, rq, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("update resource quota status: %v", err)
		}
	}

	t.Run("QuotaExhausted when the status shows pods used up", func(t *testing.T) {
		setUsed(t, "3")
		reason, msg, h := run(t, creator)
		want := "quota proxies in namespace " + headroomNS + ": pods used 3 of hard 3 leaves 0, 1 required"
		if reason != ReasonQuotaExhausted || msg != want {
			t.Errorf("got %s %q, want QuotaExhausted %q", reason, msg, want)
		}
		if len(h.Quotas) != 1 || h.Quotas[0].Hard.String() != "3" || h.Quotas[0].Used.String() != "3" {
			t.Errorf("quotas %+v, want proxies pods 3/3", h.Quotas)
		}
	})
	t.Run("Ready once one pod is freed", func(t *testing.T) {
		setUsed(t, "2")
		if reason, msg, _ := run(t, creator); reason != collector.ReasonReady || msg != "" {
			t.Errorf("got %s %q, want Ready", reason, msg)
		}
	})
	t.Run("Forbidden wins over QuotaExhausted", func(t *testing.T) {
		setUsed(t, "3")
		if reason, msg, _ := run(t, lister); reason != collector.ReasonForbidden {
			t.Errorf("got %s %q, want Forbidden", reason, msg)
		}
	})
}

// headroomAccount makes a ServiceAccount in headroomNS that may do verbs on
// pods and list resourcequotas there (what the headroom check needs on top
// of the cluster-wide pod list), and returns a token of it.
func headroomAccount(t *testing.T, admin *k8s.Clientset, name string, verbs []string) string {
	t.Helper()
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: headroomNS}}
	if _, err := admin.CoreV1().ServiceAccounts(headroomNS).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create service account %s: %v", name, err)
	}
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: headroomNS},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: verbs},
			{APIGroups: []string{""}, Resources: []string{"resourcequotas"}, Verbs: []string{"list"}},
		},
	}
	if _, err := admin.RbacV1().Roles(headroomNS).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create role %s: %v", name, err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: headroomNS},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: headroomNS}},
	}
	if _, err := admin.RbacV1().RoleBindings(headroomNS).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create role binding %s: %v", name, err)
	}
	return serviceAccountToken(t, admin, headroomNS, name)
}
