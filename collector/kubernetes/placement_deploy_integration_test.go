//go:build integration

package kubernetes

import (
	"context"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// checkPlacementPermissions: with components/placement the exporter's
// account may create Pods in the proxies' namespace, and nothing more
// there than the base grants; elsewhere nothing changes.
func checkPlacementPermissions(t *testing.T, sa, baseline *k8s.Clientset) {
	t.Helper()
	ctx := context.Background()
	for _, ns := range []string{"", exporterNamespace, proxyNamespace, "kube-system"} {
		for _, verb := range []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"} {
			for _, sub := range []string{"", "exec", "eviction", "status"} {
				want := (verb == "list" && sub == "") || (ns == proxyNamespace && verb == "create" && sub == "")
				review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
					ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Resource: "pods", Subresource: sub},
				}}
				got, err := sa.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if got.Status.Allowed != want {
					t.Errorf("%s pods/%s in %q: allowed = %v, want %v", verb, sub, ns, got.Status.Allowed, want)
				}
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
	if !slices.Equal(extra, []string{"create pods", "list pods"}) {
		t.Errorf("%s: beyond the baseline the account may %q, want [create pods list pods]", proxyNamespace, extra)
	}
}

// placementCheckWith runs a check with pod_template (the restricted proxy
// Pod) against the proxies' namespace.
func placementCheckWith(t *testing.T, kubeconfigPath string) provider.Verdict {
	t.Helper()
	path := filepath.Join(t.TempDir(), "pod.yaml")
	if err := os.WriteFile(path, []byte(restrictedTemplate), 0o600); err != nil {
		t.Fatal(err)
	}
	pt, err := ReadPodTemplate(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(&Entry{
		Name: "integration", Kubeconfig: kubeconfigPath, LabelSelector: DefaultLabelSelector,
		Namespace: proxyNamespace, PodTemplate: pt,
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return c.Check(ctx, slog.New(slog.DiscardHandler), TargetName)
}

// checkPodCreatesWereDryRuns: every create of pods in the audit log by
// user after offset since carried dryRun=All, there are want of them, and
// no Pod of the template exists in the proxies' namespace.
func checkPodCreatesWereDryRuns(t *testing.T, admin *k8s.Clientset, user string, since int64, want int) {
	t.Helper()
	n := 0
	for _, e := range auditedCreates(t, os.Getenv("PHE_K8S_AUDIT_LOG"), since, []string{user}) {
		if e.ObjectRef.Resource != "pods" {
			continue // the SelfSubjectAccessReviews of can_i: reviews, not objects
		}
		n++
		u, err := url.Parse(e.RequestURI)
		if err != nil {
			t.Fatal(err)
		}
		if q := u.Query()["dryRun"]; len(q) != 1 || q[0] != "All" {
			t.Errorf("%s created %s without dryRun=All", user, e.RequestURI)
		}
	}
	if n != want {
		t.Errorf("the audit log has %d pod creates by %s, want %d: one per check", n, user, want)
	}
	pods, err := admin.CoreV1().Pods(proxyNamespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.GenerateName != "" {
			t.Errorf("pod %s/%s exists after the dry runs", p.Namespace, p.Name)
		}
	}
}
