//go:build integration

package kubernetes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// The deploy manifests, relative to this package.
const deployDir = "../../deploy/kubernetes"

const (
	exporterNamespace = "provider-health"
	exporterSA        = "provider-health-exporter"
	proxyNamespace    = "egress-proxies"
)

// cluster is the kube-apiserver started by testdata/kubernetes/run-integration.sh.
type cluster struct {
	server, caFile, state, ctl string
	caPEM                      []byte
	adminToken                 string
}

func clusterFromEnv(t testing.TB) *cluster {
	t.Helper()
	c := &cluster{
		server: os.Getenv("PHE_K8S_SERVER"),
		caFile: os.Getenv("PHE_K8S_CA"),
		state:  os.Getenv("PHE_K8S_STATE"),
		ctl:    os.Getenv("PHE_K8S_CTL"),
	}
	tokenFile := os.Getenv("PHE_K8S_ADMIN_TOKEN_FILE")
	if c.server == "" || c.caFile == "" || c.state == "" || c.ctl == "" || tokenFile == "" {
		t.Fatal("PHE_K8S_* not set: run the integration tests with testdata/kubernetes/run-integration.sh (make integration-kubernetes)")
	}
	var err error
	if c.caPEM, err = os.ReadFile(c.caFile); err != nil {
		t.Fatal(err)
	}
	tok, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	c.adminToken = strings.TrimSpace(string(tok))
	return c
}

// warnings collects the warnings the API server sends (PodSecurity,
// deprecations).
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) HandleWarningHeaderWithContext(_ context.Context, _ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, text)
}

func (w *warnings) list() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.msgs)
}

// restConfig is a client configuration for token. Its connections are
// closed when the test ends, so that goleak sees none left.
func (c *cluster) restConfig(t testing.TB, token string, w *warnings) *rest.Config {
	t.Helper()
	cfg := &rest.Config{
		Host:            c.server,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.caPEM},
		QPS:             -1,
	}
	if w != nil {
		cfg.WarningHandlerWithContext = w
	}
	return cfg
}

func (c *cluster) clientset(t testing.TB, token string, w *warnings) *k8s.Clientset {
	t.Helper()
	cfg := c.restConfig(t, token, w)
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { utilnet.CloseIdleConnectionsFor(hc.Transport) })
	cs, err := k8s.NewForConfigAndClient(cfg, hc)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// kubeconfigFor writes a kubeconfig for the cluster with token; mutate
// adjusts it first.
func (c *cluster) kubeconfigFor(t *testing.T, token string, mutate func(*clientcmdapi.Config)) string {
	t.Helper()
	return kubeconfig(t, c.server, c.caPEM, func(kc *clientcmdapi.Config) {
		kc.AuthInfos["exporter"] = &clientcmdapi.AuthInfo{Token: token}
		if mutate != nil {
			mutate(kc)
		}
	})
}

// checkWith runs one check the way the exporter does: New, then Check.
func checkWith(t *testing.T, kubeconfigPath, selector string) provider.Verdict {
	t.Helper()
	c, err := New(&Entry{Name: "integration", Kubeconfig: kubeconfigPath, LabelSelector: selector}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.Check(ctx, slog.New(slog.DiscardHandler), TargetName)
}

func wantReason(t *testing.T, v provider.Verdict, want provider.Reason) {
	t.Helper()
	if v.Reason != want {
		t.Fatalf("reason = %s (%s), want %s", v.Reason, v.Message, want)
	}
}

func TestIntegration(t *testing.T) {
	cl := clusterFromEnv(t)
	ctx := context.Background()
	var warned warnings
	admin := cl.clientset(t, cl.adminToken, &warned)

	applyDeployManifests(t, cl, &warned)
	if w := warned.list(); len(w) > 0 {
		t.Errorf("the API server warned about the deploy manifests: %q", w)
	}

	saToken := serviceAccountToken(t, admin, exporterNamespace, exporterSA)
	waitAccess(t, cl.clientset(t, saToken, nil), true, access{verb: "list", resource: "pods"})
	// A service account no binding mentions: what any authenticated
	// identity may do, the baseline the exporter's rights are measured from.
	unbound := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "unbound", Namespace: exporterNamespace}}
	if _, err := admin.CoreV1().ServiceAccounts(exporterNamespace).Create(ctx, unbound, metav1.CreateOptions{}); ignoreExists(err) != nil {
		t.Fatalf("create service account: %v", err)
	}
	unboundToken := serviceAccountToken(t, admin, exporterNamespace, "unbound")
	createNamespace(t, admin, proxyNamespace)

	t.Run("service account may list pods cluster-wide and nothing else", func(t *testing.T) {
		checkPermissions(t, cl.clientset(t, saToken, nil), cl.clientset(t, unboundToken, nil))
	})

	// Pods in the proxies' namespace, not the exporter's: the list is
	// cluster-wide. Without a kubelet they stay Pending, which a list does
	// not care about.
	unmanaged := testPod("unrelated", map[string]string{"app": "something-else"})
	if _, err := admin.CoreV1().Pods(proxyNamespace).Create(ctx, unmanaged, metav1.CreateOptions{}); ignoreExists(err) != nil {
		t.Fatalf("create pod: %v", err)
	}
	saKubeconfig := cl.kubeconfigFor(t, saToken, nil)

	t.Run("Ready without a managed pod", func(t *testing.T) {
		v := checkWith(t, saKubeconfig, DefaultLabelSelector)
		wantReason(t, v, provider.ReasonReady)
		if !strings.Contains(v.Message, "no managed pods") {
			t.Errorf("message = %q; the unrelated pod must not match the selector", v.Message)
		}
	})

	t.Run("Ready with a managed pod", func(t *testing.T) {
		managed := testPod("proxy-0", map[string]string{"app.kubernetes.io/managed-by": "egress-proxies-operator"})
		if _, err := admin.CoreV1().Pods(proxyNamespace).Create(ctx, managed, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create pod: %v", err)
		}
		// Gone at once (no node, no kubelet): a later run starts without it.
		t.Cleanup(func() {
			if err := admin.CoreV1().Pods(proxyNamespace).Delete(ctx, managed.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))}); err != nil {
				t.Errorf("delete pod %s: %v", managed.Name, err)
			}
		})
		v := checkWith(t, saKubeconfig, DefaultLabelSelector)
		wantReason(t, v, provider.ReasonReady)
		if !strings.Contains(v.Message, "managed pods present") {
			t.Errorf("message = %q, want the managed pod found", v.Message)
		}
	})

	t.Run("Forbidden for a service account without the binding", func(t *testing.T) {
		wantReason(t, checkWith(t, cl.kubeconfigFor(t, unboundToken, nil), DefaultLabelSelector), provider.ReasonForbidden)
	})

	t.Run("Unauthorized for a bad token", func(t *testing.T) {
		wantReason(t, checkWith(t, cl.kubeconfigFor(t, "not-a-token-this-cluster-issued", nil), DefaultLabelSelector), provider.ReasonUnauthorized)
	})

	t.Run("InvalidRequest for a bad selector", func(t *testing.T) {
		wantReason(t, checkWith(t, saKubeconfig, "app.kubernetes.io/managed-by in (egress-proxies-operator"), provider.ReasonInvalidRequest)
	})

	t.Run("TLSError for the wrong CA", func(t *testing.T) {
		path := kubeconfig(t, cl.server, selfSignedPEM(t), func(kc *clientcmdapi.Config) {
			kc.AuthInfos["exporter"] = &clientcmdapi.AuthInfo{Token: saToken}
		})
		wantReason(t, checkWith(t, path, DefaultLabelSelector), provider.ReasonTLSError)
	})

	t.Run("TLSError for a name the certificate does not cover", func(t *testing.T) {
		path := cl.kubeconfigFor(t, saToken, func(kc *clientcmdapi.Config) {
			kc.Clusters["test"].TLSServerName = "apiserver.example.net"
		})
		wantReason(t, checkWith(t, path, DefaultLabelSelector), provider.ReasonTLSError)
	})

	t.Run("headroom: Forbidden without components/headroom, Ready with it", func(t *testing.T) {
		wantReason(t, headroomCheckWith(t, saKubeconfig), provider.ReasonForbidden)
		sa := cl.clientset(t, saToken, nil)
		quotas := access{verb: "list", resource: "resourcequotas", namespace: proxyNamespace}
		applyRoleComponent(t, admin, "headroom")
		// A later run starts without the component again.
		t.Cleanup(func() {
			deleteRoleComponent(t, admin, "headroom")
			waitAccess(t, sa, false, quotas)
		})
		waitAccess(t, sa, true, quotas)
		checkHeadroomPermissions(t, sa, cl.clientset(t, unboundToken, nil))
		wantReason(t, headroomCheckWith(t, saKubeconfig), provider.ReasonReady)
	})

	t.Run("placement: Forbidden without components/placement, Ready with it, and only dry runs", func(t *testing.T) {
		since := auditOffset(t, os.Getenv("PHE_K8S_AUDIT_LOG"))
		wantReason(t, placementCheckWith(t, saKubeconfig), provider.ReasonForbidden)
		sa := cl.clientset(t, saToken, nil)
		create := access{verb: "create", resource: "pods", namespace: proxyNamespace}
		applyRoleComponent(t, admin, "placement")
		// A later run starts without the component again.
		t.Cleanup(func() {
			deleteRoleComponent(t, admin, "placement")
			waitAccess(t, sa, false, create)
		})
		waitAccess(t, sa, true, create)
		checkPlacementPermissions(t, sa, cl.clientset(t, unboundToken, nil))
		wantReason(t, placementCheckWith(t, saKubeconfig), provider.ReasonReady)
		checkPodCreatesWereDryRuns(t, admin, "system:serviceaccount:"+exporterNamespace+":"+exporterSA, since, 2)
	})

	// The apiserver is started again after it, on the same port, so that
	// the tests that run next (-shuffle, -count) find it.
	t.Run("Unreachable when the apiserver is stopped", func(t *testing.T) {
		out, err := exec.Command(cl.ctl, "stop-apiserver", cl.state).CombinedOutput()
		if err != nil {
			t.Fatalf("stop-apiserver: %v: %s", err, out)
		}
		t.Cleanup(func() {
			if out, err := exec.Command(cl.ctl, "start-apiserver", cl.state).CombinedOutput(); err != nil {
				t.Fatalf("start-apiserver: %v: %s", err, out)
			}
		})
		wantReason(t, checkWith(t, saKubeconfig, DefaultLabelSelector), provider.ReasonUnreachable)
	})
}

func testPod(name string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: new(false),
			Containers:                   []corev1.Container{{Name: "proxy", Image: "registry.invalid/egress-proxy:1"}},
		},
	}
}

// ignoreExists is err, or nil when it says the object exists: the objects
// of the fixed namespaces the deploy manifests name stay from an earlier
// run against the same apiserver (-count; a namespace cannot be deleted
// without the controller manager).
func ignoreExists(err error) error {
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// waitAccess waits until every question a is answered allowed (or, with
// allowed false, denied) for cs. The RBAC authorizer reads Roles,
// ClusterRoles and their bindings from informers, so a review right after
// one is created or deleted can still answer the old way; the reviews are
// asked again for as long as the test's deadline allows, which holds
// however slow the machine is.
func waitAccess(t *testing.T, cs *k8s.Clientset, allowed bool, as ...access) {
	t.Helper()
	for {
		var pending []string
		for _, a := range as {
			review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
				ResourceAttributes: &authorizationv1.ResourceAttributes{
					Namespace: a.namespace, Verb: a.verb, Group: a.group, Resource: a.resource, Subresource: a.subresource,
				},
			}}
			got, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(context.Background(), review, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("%s: %v", a, err)
			}
			if got.Status.Allowed != allowed {
				pending = append(pending, a.String())
			}
		}
		if len(pending) == 0 {
			return
		}
		if d, ok := t.Deadline(); ok && time.Until(d) < time.Minute {
			t.Fatalf("the RBAC authorizer still answers allowed=%v for %q", !allowed, pending)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// createNamespace creates a namespace and the "default" ServiceAccount the
// ServiceAccount admission plugin wants for Pods (there is no controller
// manager to create it).
func createNamespace(t testing.TB, admin *k8s.Clientset, name string) {
	t.Helper()
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := admin.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); ignoreExists(err) != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: name}}
	if _, err := admin.CoreV1().ServiceAccounts(name).Create(ctx, sa, metav1.CreateOptions{}); ignoreExists(err) != nil {
		t.Fatalf("create default service account in %s: %v", name, err)
	}
}

// serviceAccountToken asks the API server for a token of the service
// account, as the kubelet does for a Pod.
func serviceAccountToken(t *testing.T, admin *k8s.Clientset, ns, name string) string {
	t.Helper()
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: new(int64(3600))}}
	got, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), name, tr, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s/%s: %v", ns, name, err)
	}
	return got.Status.Token
}

// renderKustomization renders a kustomization directory, with components an
// overlay of it adding them, with the kustomize Go API
// (deploy/kubernetes/validate, a module of its own to keep kustomize out of
// the exporter's dependencies), as `kubectl kustomize` would.
func renderKustomization(t *testing.T, dir string, components ...string) []*unstructured.Unstructured {
	t.Helper()
	args := []string{"run", "./kustomize-build"}
	for _, d := range append([]string{dir}, components...) {
		abs, err := filepath.Abs(d)
		if err != nil {
			t.Fatal(err)
		}
		args = append(args, abs)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = filepath.Join(deployDir, "validate")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("render %s: %v\n%s", dir, err, stderr.String())
	}
	return decodeManifestData(t, dir, out)
}

// applyDeployManifests renders deploy/kubernetes with and without its
// Prometheus Operator component, server-side dry-runs every object of a
// built-in kind of the rendering with the component (this API server has no
// CRDs, so the ServiceMonitor and the PrometheusRule are only decoded, by
// deploy/kubernetes/validate's tests), then creates the base's objects, all
// with strict field validation: an unknown or duplicate field fails, as does
// anything admission rejects.
func applyDeployManifests(t *testing.T, cl *cluster, w *warnings) {
	t.Helper()
	ctx := context.Background()
	cfg := cl.restConfig(t, cl.adminToken, w)
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { utilnet.CloseIdleConnectionsFor(hc.Transport) })
	dyn, err := dynamic.NewForConfigAndClient(cfg, hc)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := k8s.NewForConfigAndClient(cfg, hc)
	if err != nil {
		t.Fatal(err)
	}
	groups, err := restmapper.GetAPIGroupResources(cs.Discovery())
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDiscoveryRESTMapper(groups)
	apply := func(obj *unstructured.Unstructured, dryRun bool) error {
		gvk := obj.GroupVersionKind()
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return fmt.Errorf("%s: %w", gvk, err)
		}
		var ri dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			if obj.GetNamespace() == "" {
				return fmt.Errorf("%s %s has no namespace", gvk.Kind, obj.GetName())
			}
			ri = dyn.Resource(mapping.Resource).Namespace(obj.GetNamespace())
		}
		opts := metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict}
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		_, err = ri.Create(ctx, obj, opts)
		return ignoreExists(err)
	}

	// The namespace must exist for the dry-run of the namespaced objects.
	base := renderKustomization(t, deployDir)
	for _, obj := range base {
		if obj.GetKind() == "Namespace" {
			if err := apply(obj, false); err != nil {
				t.Fatalf("create Namespace %s: %v", obj.GetName(), err)
			}
		}
	}
	var operatorKinds []string
	for _, obj := range renderKustomization(t, deployDir, filepath.Join(deployDir, "components", "prometheus-operator")) {
		if obj.GroupVersionKind().Group == "monitoring.coreos.com" {
			operatorKinds = append(operatorKinds, obj.GetKind())
			continue
		}
		if obj.GetKind() == "Namespace" {
			continue
		}
		if err := apply(obj, true); err != nil {
			t.Fatalf("with components/prometheus-operator: dry-run %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
		t.Logf("dry-run created %s %s/%s", obj.GetKind(), obj.GetNamespace(), obj.GetName())
	}
	sort.Strings(operatorKinds)
	if fmt.Sprint(operatorKinds) != "[PrometheusRule ScrapeConfig ServiceMonitor]" {
		t.Errorf("components/prometheus-operator renders operator kinds %v, want PrometheusRule, ScrapeConfig and ServiceMonitor", operatorKinds)
	}
	for _, obj := range base {
		if obj.GetKind() == "Namespace" {
			continue
		}
		if err := apply(obj, false); err != nil {
			t.Fatalf("create %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
		t.Logf("created %s %s/%s", obj.GetKind(), obj.GetNamespace(), obj.GetName())
	}
}

func decodeManifestData(t *testing.T, what string, data []byte) []*unstructured.Unstructured {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var objs []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatalf("%s: %v", what, err)
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
	if len(objs) == 0 {
		t.Fatalf("%s: no objects", what)
	}
	return objs
}

// access is one question for SelfSubjectAccessReview.
type access struct {
	verb, group, resource, subresource, namespace string
}

func (a access) String() string {
	r := a.resource
	if a.group != "" {
		r += "." + a.group
	}
	if a.subresource != "" {
		r += "/" + a.subresource
	}
	ns := a.namespace
	if ns == "" {
		ns = "<all namespaces>"
	}
	return a.verb + " " + r + " in " + ns
}

// checkPermissions proves the exporter's service account can list pods
// cluster-wide and can do nothing else: every question of a verb x resource
// matrix is asked, and the rules the API server reports for the account are
// those of an unbound account (baseline) plus list pods.
func checkPermissions(t *testing.T, sa, baseline *k8s.Clientset) {
	ctx := context.Background()
	verbs := []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection", "impersonate", "escalate", "bind"}
	resources := []struct{ group, resource, sub string }{
		{"", "pods", ""},
		{"", "pods", "log"},
		{"", "pods", "exec"},
		{"", "pods", "status"},
		{"", "secrets", ""},
		{"", "configmaps", ""},
		{"", "services", ""},
		{"", "serviceaccounts", ""},
		{"", "serviceaccounts", "token"},
		{"", "namespaces", ""},
		{"", "nodes", ""},
		{"", "events", ""},
		{"apps", "deployments", ""},
		{"rbac.authorization.k8s.io", "clusterroles", ""},
		{"rbac.authorization.k8s.io", "clusterrolebindings", ""},
		{"coordination.k8s.io", "leases", ""},
		{"*", "*", ""},
	}
	for _, ns := range []string{"", exporterNamespace, proxyNamespace, "kube-system"} {
		for _, r := range resources {
			for _, verb := range verbs {
				a := access{verb, r.group, r.resource, r.sub, ns}
				want := verb == "list" && r.group == "" && r.resource == "pods" && r.sub == ""
				review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
					ResourceAttributes: &authorizationv1.ResourceAttributes{
						Namespace: ns, Verb: verb, Group: r.group, Resource: r.resource, Subresource: r.sub,
					},
				}}
				got, err := sa.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
				if err != nil {
					t.Fatalf("%s: %v", a, err)
				}
				if got.Status.Allowed != want {
					t.Errorf("%s: allowed = %v, want %v", a, got.Status.Allowed, want)
				}
			}
		}
	}

	// The rules the API server reports for the account, per namespace, are
	// the baseline's plus exactly one.
	for _, ns := range []string{exporterNamespace, proxyNamespace} {
		got := resourceRules(t, sa, ns)
		base := resourceRules(t, baseline, ns)
		var extra []string
		for p := range got {
			if !base[p] {
				extra = append(extra, p)
			}
		}
		for p := range base {
			if !got[p] {
				t.Errorf("%s: the exporter's account lacks %q, which any authenticated identity has", ns, p)
			}
		}
		sort.Strings(extra)
		if !slices.Equal(extra, []string{"list pods"}) {
			t.Errorf("%s: beyond the baseline the exporter's account may %q, want exactly [list pods]", ns, extra)
		}
	}
}

// resourceRules flattens what SelfSubjectRulesReview reports into
// "verb resource.group" strings.
func resourceRules(t *testing.T, cs *k8s.Clientset, ns string) map[string]bool {
	t.Helper()
	rr := &authorizationv1.SelfSubjectRulesReview{Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: ns}}
	got, err := cs.AuthorizationV1().SelfSubjectRulesReviews().Create(context.Background(), rr, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("rules review in %s: %v", ns, err)
	}
	if got.Status.Incomplete {
		t.Fatalf("rules review in %s is incomplete: %s", ns, got.Status.EvaluationError)
	}
	perms := map[string]bool{}
	for _, rule := range got.Status.ResourceRules {
		for _, g := range rule.APIGroups {
			for _, res := range rule.Resources {
				for _, v := range rule.Verbs {
					name := res
					if g != "" {
						name += "." + g
					}
					if len(rule.ResourceNames) > 0 {
						name += fmt.Sprintf(" %v", rule.ResourceNames)
					}
					perms[v+" "+name] = true
				}
			}
		}
	}
	return perms
}
