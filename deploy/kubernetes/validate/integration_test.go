//go:build integration

package validate

// Against the real kube-apiserver + etcd of testdata/kubernetes/ctl.sh,
// started by testdata/kubernetes/run-integration.sh (make
// integration-kubernetes), which runs these tests before the kubernetes
// provider's. Each test works in a namespace of its own and leaves the
// provider's (provider-health) alone. The API server has no Prometheus
// Operator CRDs: ServiceMonitor, PrometheusRule and ScrapeConfig are decoded
// strictly into the operator's types by the unit tests instead.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/dynamic"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/egress-proxies/provider_health_exporter/deploy/kubernetes/validate/chart"
)

// kube-prometheus's Prometheus, as the API server sees its ServiceAccount.
const prometheusUser = "system:serviceaccount:monitoring:prometheus-k8s"

var prometheusGroups = []string{"system:serviceaccounts", "system:serviceaccounts:monitoring", "system:authenticated"}

// apiserver is an admin client of the test API server, collecting the
// warnings it sends (PodSecurity, deprecations).
type apiserver struct {
	cs     *k8s.Clientset
	dyn    *dynamic.DynamicClient
	mapper meta.RESTMapper

	mu       sync.Mutex
	warnings []string
}

func (a *apiserver) HandleWarningHeaderWithContext(_ context.Context, _ int, _ string, text string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.warnings = append(a.warnings, text)
}

func (a *apiserver) takeWarnings() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	w := a.warnings
	a.warnings = nil
	return w
}

func connect(t *testing.T) *apiserver {
	t.Helper()
	server, caFile, tokenFile := os.Getenv("PHE_K8S_SERVER"), os.Getenv("PHE_K8S_CA"), os.Getenv("PHE_K8S_ADMIN_TOKEN_FILE")
	if server == "" || caFile == "" || tokenFile == "" {
		t.Fatal("PHE_K8S_SERVER, PHE_K8S_CA, PHE_K8S_ADMIN_TOKEN_FILE not set: run with testdata/kubernetes/run-integration.sh (make integration-kubernetes)")
	}
	ca, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	token, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	a := &apiserver{}
	cfg := &rest.Config{
		Host:                      server,
		BearerToken:               strings.TrimSpace(string(token)),
		TLSClientConfig:           rest.TLSClientConfig{CAData: ca},
		QPS:                       -1,
		WarningHandlerWithContext: a,
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { utilnet.CloseIdleConnectionsFor(hc.Transport) })
	if a.cs, err = k8s.NewForConfigAndClient(cfg, hc); err != nil {
		t.Fatal(err)
	}
	if a.dyn, err = dynamic.NewForConfigAndClient(cfg, hc); err != nil {
		t.Fatal(err)
	}
	groups, err := restmapper.GetAPIGroupResources(a.cs.Discovery())
	if err != nil {
		t.Fatal(err)
	}
	a.mapper = restmapper.NewDiscoveryRESTMapper(groups)
	return a
}

// uniqueNamespace is a fresh namespace name, so that a second run against
// the same API server starts from no Role either.
func uniqueNamespace(prefix string) string {
	return fmt.Sprintf("%s-%08x", prefix, rand.Uint32())
}

// namespace creates ns held to the restricted Pod Security Standard, as
// deploy/kubernetes/namespace.yaml holds the exporter's.
func (a *apiserver) namespace(t *testing.T, ns string) {
	t.Helper()
	obj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}}
	if _, err := a.cs.CoreV1().Namespaces().Create(context.Background(), obj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create namespace %s: %v", ns, err)
	}
	// A cluster's ServiceAccount controller gives every namespace its
	// "default" ServiceAccount, which the ServiceAccount admission of a Pod
	// without serviceAccountName (the chart's helm test) looks up; no
	// controller runs beside the test's kube-apiserver.
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns}}
	if _, err := a.cs.CoreV1().ServiceAccounts(ns).Create(context.Background(), sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create the default ServiceAccount of %s: %v", ns, err)
	}
}

// create creates o with strict field validation (an unknown or duplicate
// field fails, as does anything admission rejects), only as a server-side
// dry-run when dryRun.
func (a *apiserver) create(t *testing.T, o object, dryRun bool) {
	t.Helper()
	var u unstructured.Unstructured
	data, err := yaml.YAMLToJSON(o.doc)
	if err == nil {
		err = u.UnmarshalJSON(data)
	}
	if err != nil {
		t.Fatalf("%s %s: %v", o.Kind, o.Metadata.Name, err)
	}
	gvk := u.GroupVersionKind()
	mapping, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		t.Fatalf("%s: %v", gvk, err)
	}
	var ri dynamic.ResourceInterface = a.dyn.Resource(mapping.Resource)
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		if u.GetNamespace() == "" {
			t.Fatalf("%s %s has no namespace", o.Kind, o.Metadata.Name)
		}
		ri = a.dyn.Resource(mapping.Resource).Namespace(u.GetNamespace())
	}
	opts := metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict}
	what := "create"
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
		what = "dry-run"
	}
	if _, err := ri.Create(context.Background(), &u, opts); err != nil {
		t.Fatalf("%s %s %s/%s: %v", what, o.Kind, u.GetNamespace(), u.GetName(), err)
	}
	if w := a.takeWarnings(); len(w) > 0 {
		t.Errorf("%s %s %s: the API server warned %q", what, o.Kind, u.GetName(), w)
	}
	t.Logf("%s %s %s/%s", what, o.Kind, u.GetNamespace(), u.GetName())
}

// prometheusMay asks the API server whether kube-prometheus's Prometheus
// may do verb on resource (resource.group) in ns.
func (a *apiserver) prometheusMay(t *testing.T, verb, resource, ns string) bool {
	t.Helper()
	return a.may(t, prometheusUser, prometheusGroups, verb, resource, ns)
}

// may asks the API server whether user in groups may do verb on resource
// (resource.group) in ns.
func (a *apiserver) may(t *testing.T, user string, groups []string, verb, resource, ns string) bool {
	t.Helper()
	res, group, _ := strings.Cut(resource, ".")
	review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   user,
		Groups: groups,
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: ns, Verb: verb, Group: group, Resource: res,
		},
	}}
	got, err := a.cs.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), review, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SubjectAccessReview %s: %s %s in %s: %v", user, verb, resource, ns, err)
	}
	return got.Status.Allowed
}

// discoveryResources is what the Prometheus Operator's Service discovery reads.
var discoveryResources = []string{"services", "endpoints", "pods", "endpointslices.discovery.k8s.io"}

// checkPrometheusAccess: kube-prometheus's Prometheus may get, list and
// watch what discovery reads in ns, and nothing more there or elsewhere.
//
// The RBAC authorizer reads Roles and RoleBindings from informers, so a
// review right after their creation can still see neither. Until one grant
// shows (the Role and its binding have both reached the authorizer: it sees
// a Role's rules all at once), the reviews are asked again, for as long as
// the test's deadline allows, which holds however slow the machine is; then
// every grant must hold.
func checkPrometheusAccess(t *testing.T, a *apiserver, ns string) {
	t.Helper()
	for {
		var allowed, missing []string
		for _, res := range discoveryResources {
			for _, verb := range []string{"get", "list", "watch"} {
				if a.prometheusMay(t, verb, res, ns) {
					allowed = append(allowed, verb+" "+res)
				} else {
					missing = append(missing, verb+" "+res)
				}
			}
		}
		if len(allowed) > 0 {
			if len(missing) > 0 {
				t.Errorf("%s may %q but not %q in %s", prometheusUser, allowed, missing, ns)
			}
			break
		}
		if d, ok := t.Deadline(); ok && time.Until(d) < time.Minute {
			t.Fatalf("%s may still not %q in %s", prometheusUser, missing, ns)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, res := range discoveryResources {
		if a.prometheusMay(t, "list", res, "kube-system") {
			t.Errorf("%s may list %s in kube-system: the Role leaks out of %s", prometheusUser, res, ns)
		}
	}
	for _, denied := range []struct{ verb, res string }{{"list", "secrets"}, {"get", "configmaps"}, {"create", "pods"}, {"delete", "services"}} {
		if a.prometheusMay(t, denied.verb, denied.res, ns) {
			t.Errorf("%s may %s %s in %s", prometheusUser, denied.verb, denied.res, ns)
		}
	}
}

// TestIntegrationKubePrometheusComponent: with the base and the
// prometheus-operator component only, kube-prometheus's Prometheus may not
// list the EndpointSlices of the exporter's namespace (its ServiceMonitor
// would be ignored); with the kube-prometheus component applied it may.
// Every built-in object of the overlay passes a server-side dry-run.
func TestIntegrationKubePrometheusComponent(t *testing.T) {
	ns := uniqueNamespace("phe-kube-prometheus")
	a := connect(t)
	a.namespace(t, ns)

	without, err := RenderInNamespace(ns, base, operator)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range splitObjects(t, "without kube-prometheus", without) {
		if o.Kind == "Role" || o.Kind == "RoleBinding" {
			t.Fatalf("the base and prometheus-operator already render a %s", o.Kind)
		}
	}
	if a.prometheusMay(t, "list", "endpointslices.discovery.k8s.io", ns) {
		t.Fatalf("%s may list endpointslices in %s before the component: the test proves nothing", prometheusUser, ns)
	}

	with, err := RenderInNamespace(ns, base, operator, kubePrometheus)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range splitObjects(t, "with kube-prometheus", with) {
		group, _, _ := strings.Cut(o.APIVersion, "/")
		switch {
		case o.Kind == "Namespace" || group == operatorGroup:
		case o.Kind == "Role" || o.Kind == "RoleBinding":
			a.create(t, o, false)
		default:
			a.create(t, o, true)
		}
	}
	checkPrometheusAccess(t, a, ns)
}

// TestIntegrationHelmChart: every built-in object the chart renders, with
// the default values and with every toggle on (the NetworkPolicy, the
// PodDisruptionBudget, the headroom and placement Roles, the Pod's env,
// volumes, priority and spread included), passes a server-side dry-run with
// strict field validation and without a warning (PodSecurity restricted
// included). Created, the kube-prometheus Role gives kube-prometheus's
// Prometheus what discovery needs, and the headroom and placement Roles
// give the exporter's ServiceAccount list of ResourceQuotas and create of
// Pods in the proxies' namespace, and nothing more.
func TestIntegrationHelmChart(t *testing.T) {
	ns := uniqueNamespace("phe-helm")
	proxies := uniqueNamespace("phe-proxies")
	a := connect(t)
	a.namespace(t, ns)
	a.namespace(t, proxies)
	for name, values := range map[string]map[string]any{"defaults": nil, "every toggle on": allToggles(proxies)} {
		out, err := chart.Template(t.Context(), chartDir, chartRelease, ns, values)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range splitObjects(t, name, out) {
			if group, _, _ := strings.Cut(o.APIVersion, "/"); group != operatorGroup {
				a.create(t, o, true)
			}
		}
	}
	if a.prometheusMay(t, "list", "endpointslices.discovery.k8s.io", ns) {
		t.Fatalf("%s may list endpointslices in %s before the Role: the test proves nothing", prometheusUser, ns)
	}
	exporter := "system:serviceaccount:" + ns + ":" + chartRelease + "-provider-health-exporter"
	exporterGroups := []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}
	if a.may(t, exporter, exporterGroups, "create", "pods", proxies) {
		t.Fatalf("%s may create pods in %s before the placement Role: the test proves nothing", exporter, proxies)
	}
	out, err := chart.Template(t.Context(), chartDir, chartRelease, ns, allToggles(proxies))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range splitObjects(t, "every toggle on", out) {
		if o.Kind == "Role" || o.Kind == "RoleBinding" {
			a.create(t, o, false)
		}
	}
	checkPrometheusAccess(t, a, ns)

	// The authorizer's informers may not have the new Roles yet: ask until
	// the first grant shows, as checkPrometheusAccess does.
	for !a.may(t, exporter, exporterGroups, "list", "resourcequotas", proxies) {
		if d, ok := t.Deadline(); ok && time.Until(d) < time.Minute {
			t.Fatalf("%s may still not list resourcequotas in %s", exporter, proxies)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, c := range []struct {
		verb, res, ns string
		want          bool
	}{
		{"list", "resourcequotas", proxies, true},
		{"create", "pods", proxies, true},
		{"list", "resourcequotas", "kube-system", false},
		{"create", "pods", ns, false},
		{"delete", "pods", proxies, false},
		{"get", "secrets", proxies, false},
		{"create", "deployments.apps", proxies, false},
	} {
		if got := a.may(t, exporter, exporterGroups, c.verb, c.res, c.ns); got != c.want {
			t.Errorf("%s may %s %s in %s: %v, want %v", exporter, c.verb, c.res, c.ns, got, c.want)
		}
	}
}
