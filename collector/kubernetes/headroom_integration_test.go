//go:build integration

package kubernetes

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// TestIntegrationHeadroom runs checks with the headroom keys (Check, as
// the exporter does) against the real kube-apiserver with RBAC on, in a
// namespace of its own, new at every run, so that it depends on no other
// test and no earlier run: a ServiceAccount that may list but not create
// Pods is Forbidden with the message docs/configuration.md ("Kubernetes")
// shows; one that may do both is Ready; a ResourceQuota whose status
// (written through the status subresource: no controller-manager runs)
// shows pods used up gives QuotaExhausted, and freeing one gives Ready
// again.
func TestIntegrationHeadroom(t *testing.T) {
	cl := clusterFromEnv(t)
	ctx := context.Background()
	admin := cl.clientset(t, cl.adminToken, nil)
	ns := fmt.Sprintf("headroom-it-%08x", rand.Uint32())
	createNamespace(t, admin, ns)
	lister := headroomAccount(t, cl, admin, ns, "headroom-lister", []string{"list"})
	creator := headroomAccount(t, cl, admin, ns, "headroom-creator", []string{"list", "create", "delete"})

	run := func(t *testing.T, token string) (provider.Reason, string, Headroom) {
		t.Helper()
		c, err := New(&Entry{
			Name: "integration", Kubeconfig: cl.kubeconfigFor(t, token, nil), LabelSelector: DefaultLabelSelector,
			Namespace: ns, CanI: []string{"create pods", "delete pods"}, MinQuotaHeadroom: map[string]string{"pods": "1"},
		}, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		v := c.Check(cctx, slog.New(slog.DiscardHandler), TargetName)
		var h Headroom
		if f, ok := v.Facts.(*Facts); ok {
			h = f.Headroom
		}
		return v.Reason, v.Message, h
	}

	t.Run("Forbidden when the account may list but not create pods", func(t *testing.T) {
		reason, msg, _ := run(t, lister)
		if reason != provider.ReasonForbidden || !strings.HasPrefix(msg, "cannot create pods in namespace "+ns) ||
			!strings.Contains(msg, "cannot delete pods in namespace "+ns) {
			t.Errorf("got %s %q, want Forbidden: cannot create pods, cannot delete pods", reason, msg)
		}
	})
	t.Run("Ready when the account may create and delete pods, no quota", func(t *testing.T) {
		if reason, msg, h := run(t, creator); reason != provider.ReasonReady || len(h.CanI) != 2 || len(h.Quotas) != 0 {
			t.Errorf("got %s %q %+v, want Ready", reason, msg, h)
		}
	})

	hard := corev1.ResourceList{corev1.ResourcePods: resource.MustParse("3")}
	rq, err := admin.CoreV1().ResourceQuotas(ns).Create(ctx, &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "proxies"},
		Spec:       corev1.ResourceQuotaSpec{Hard: hard},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create resource quota: %v", err)
	}
	setUsed := func(t *testing.T, pods string) {
		t.Helper()
		rq.Status = corev1.ResourceQuotaStatus{Hard: hard, Used: corev1.ResourceList{corev1.ResourcePods: resource.MustParse(pods)}}
		if rq, err = admin.CoreV1().ResourceQuotas(ns).UpdateStatus(ctx, rq, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("update resource quota status: %v", err)
		}
	}

	t.Run("QuotaExhausted when the status shows pods used up", func(t *testing.T) {
		setUsed(t, "3")
		reason, msg, h := run(t, creator)
		want := "quota proxies in namespace " + ns + ": pods used 3 of hard 3 leaves 0, 1 required"
		if reason != ReasonQuotaExhausted || msg != want {
			t.Errorf("got %s %q, want QuotaExhausted %q", reason, msg, want)
		}
		if len(h.Quotas) != 1 || h.Quotas[0].Hard.String() != "3" || h.Quotas[0].Used.String() != "3" {
			t.Errorf("quotas %+v, want proxies pods 3/3", h.Quotas)
		}
	})
	t.Run("Ready once one pod is freed", func(t *testing.T) {
		setUsed(t, "2")
		if reason, msg, _ := run(t, creator); reason != provider.ReasonReady {
			t.Errorf("got %s %q, want Ready", reason, msg)
		}
	})
	t.Run("Forbidden wins over QuotaExhausted", func(t *testing.T) {
		setUsed(t, "3")
		if reason, msg, _ := run(t, lister); reason != provider.ReasonForbidden {
			t.Errorf("got %s %q, want Forbidden", reason, msg)
		}
	})
}

// headroomAccount makes a ServiceAccount in ns that may list pods
// cluster-wide (the check's list call), do verbs on pods in ns and list
// resourcequotas there (what the headroom keys need), waits until the
// RBAC authorizer says so, and returns a token of it.
func headroomAccount(t *testing.T, cl *cluster, admin *k8s.Clientset, ns, name string, verbs []string) string {
	t.Helper()
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create service account %s: %v", name, err)
	}
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: verbs},
			{APIGroups: []string{""}, Resources: []string{"resourcequotas"}, Verbs: []string{"list"}},
		},
	}
	if _, err := admin.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create role %s: %v", name, err)
	}
	subjects := []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name},
		Subjects:   subjects,
	}
	if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create role binding %s: %v", name, err)
	}
	const listPods = "headroom-it-list-pods"
	cr := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: listPods},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}}},
	}
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, cr, metav1.CreateOptions{}); ignoreExists(err) != nil {
		t.Fatalf("create cluster role %s: %v", listPods, err)
	}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: listPods},
		Subjects:   subjects,
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create cluster role binding %s: %v", crb.Name, err)
	}
	token := serviceAccountToken(t, admin, ns, name)
	waitAccess(t, cl.clientset(t, token, nil), true,
		access{verb: "list", resource: "pods"}, access{verb: "list", resource: "resourcequotas", namespace: ns})
	return token
}
