//go:build integration

package kubernetes

import (
	"context"
	"log/slog"
	"path/filepath"
	"slices"
	"sort"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8s "k8s.io/client-go/kubernetes"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// applyRoleComponent creates what deploy/kubernetes/components/<component>
// (headroom, placement) adds to the base: its Role and RoleBinding, named
// provider-health-exporter-<component>, rendered as an overlay of the base
// would render them, with strict field validation.
func applyRoleComponent(t *testing.T, admin *k8s.Clientset, component string) {
	t.Helper()
	ctx := context.Background()
	base := map[string]bool{}
	for _, obj := range renderKustomization(t, deployDir) {
		base[obj.GetKind()+"/"+obj.GetNamespace()+"/"+obj.GetName()] = true
	}
	opts := metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict}
	var added []string
	for _, obj := range renderKustomization(t, deployDir, filepath.Join(deployDir, "components", component)) {
		key := obj.GetKind() + "/" + obj.GetNamespace() + "/" + obj.GetName()
		if base[key] {
			continue
		}
		added = append(added, key)
		var err error
		switch obj.GetKind() {
		case "Role":
			var r rbacv1.Role
			if err = runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(obj.Object, &r, true); err == nil {
				_, err = admin.RbacV1().Roles(r.Namespace).Create(ctx, &r, opts)
			}
		case "RoleBinding":
			var rb rbacv1.RoleBinding
			if err = runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(obj.Object, &rb, true); err == nil {
				_, err = admin.RbacV1().RoleBindings(rb.Namespace).Create(ctx, &rb, opts)
			}
		default:
			t.Fatalf("components/%s adds %s; want only a Role and a RoleBinding", component, key)
		}
		if err != nil {
			t.Fatalf("create %s: %v", key, err)
		}
	}
	sort.Strings(added)
	name := "provider-health-exporter-" + component
	want := []string{"Role/" + proxyNamespace + "/" + name, "RoleBinding/" + proxyNamespace + "/" + name}
	if !slices.Equal(added, want) {
		t.Errorf("components/%s adds %v, want %v", component, added, want)
	}
}

// deleteRoleComponent deletes what applyRoleComponent created.
func deleteRoleComponent(t *testing.T, admin *k8s.Clientset, component string) {
	t.Helper()
	ctx := context.Background()
	name := "provider-health-exporter-" + component
	if err := admin.RbacV1().RoleBindings(proxyNamespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Errorf("delete RoleBinding %s: %v", name, err)
	}
	if err := admin.RbacV1().Roles(proxyNamespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Errorf("delete Role %s: %v", name, err)
	}
}

// checkHeadroomPermissions: with components/headroom the exporter's account
// may list the ResourceQuotas of the proxies' namespace and nothing more
// there than the base grants; elsewhere nothing changes.
func checkHeadroomPermissions(t *testing.T, sa, baseline *k8s.Clientset) {
	t.Helper()
	ctx := context.Background()
	for _, ns := range []string{"", exporterNamespace, proxyNamespace, "kube-system"} {
		for _, verb := range []string{"get", "list", "watch", "create", "update", "delete"} {
			want := ns == proxyNamespace && verb == "list"
			review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
				ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Resource: "resourcequotas"},
			}}
			got, err := sa.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got.Status.Allowed != want {
				t.Errorf("%s resourcequotas in %q: allowed = %v, want %v", verb, ns, got.Status.Allowed, want)
			}
		}
	}
	got, base := resourceRules(t, sa, proxyNamespace), resourceRules(t, baseline, proxyNamespace)
	var extra []string
	for p := range got {
		if !base[p] {
			extra = append(extra, p)
		}
	}
	sort.Strings(extra)
	if !slices.Equal(extra, []string{"list pods", "list resourcequotas"}) {
		t.Errorf("%s: beyond the baseline the account may %q, want [list pods list resourcequotas]", proxyNamespace, extra)
	}
}

// headroomCheckWith runs a check with the headroom keys against the
// proxies' namespace.
func headroomCheckWith(t *testing.T, kubeconfigPath string) provider.Verdict {
	t.Helper()
	c, err := New(&Entry{
		Name: "integration", Kubeconfig: kubeconfigPath, LabelSelector: DefaultLabelSelector,
		Namespace: proxyNamespace, CanI: []string{"list pods"}, MinQuotaHeadroom: map[string]string{"pods": "1"},
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.Check(ctx, slog.New(slog.DiscardHandler), TargetName)
}
