package kubernetes

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/egress-proxies/provider_health_exporter/config"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

const dryRunPath = "/api/v1/namespaces/" + headroomNamespace + "/pods"

// testTemplate is a proxy Pod as an operator's template holds it.
const testTemplate = `apiVersion: v1
kind: Pod
metadata:
  generateName: egress-proxy-
  labels: {app.kubernetes.io/managed-by: egress-proxies-operator}
spec:
  containers:
    - name: proxy
      image: registry.example/egress-proxy:1
      resources: {limits: {cpu: "1"}}
`

// writeTemplate writes a template file and reads it as the loader does.
func writeTemplate(t testing.TB, data string) PodTemplate {
	t.Helper()
	path := filepath.Join(t.TempDir(), "pod.yaml")
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	pt, err := ReadPodTemplate(path)
	if err != nil {
		t.Fatal(err)
	}
	return pt
}

func testPlacement() *placement {
	return &placement{file: "/etc/provider_health/proxy-pod.yaml", namespace: headroomNamespace}
}

// TestJudge pins how an answer to the dry run becomes a verdict. The
// messages are the API server's (each is also produced by the real
// kube-apiserver in dryrun_integration_test.go); the webhook patterns are
// looked at first because a webhook picks its own status code.
func TestJudge(t *testing.T) {
	t.Parallel()
	pods := schema.GroupResource{Resource: "pods"}
	forbidden := func(name, msg string) error { return apierrors.NewForbidden(pods, name, errors.New(msg)) }
	status := func(code int32, reason metav1.StatusReason, msg string) error {
		return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: code, Reason: reason, Message: msg}}
	}
	const what = "dry-run create of pod_template in namespace egress-proxies"
	for _, tc := range []struct {
		name string
		err  error
		want provider.Reason
		msg  string // the whole message, or its start when it ends in "…"
	}{
		{"RBAC", forbidden("", `User "system:serviceaccount:provider-health:provider-health-exporter" cannot create resource "pods" in API group "" in the namespace "egress-proxies"`),
			provider.ReasonForbidden, `cannot create pods in namespace egress-proxies (` + what + `): pods is forbidden: User "system:serviceaccount:provider-health:provider-health-exporter" cannot create resource "pods" in API group "" in the namespace "egress-proxies"`},
		{"RBAC with the authorizer's reason", forbidden("", `User "u" cannot create resource "pods" in API group "" in the namespace "egress-proxies": RBAC: role.rbac.authorization.k8s.io "x" not found`),
			provider.ReasonForbidden, "cannot create pods in namespace egress-proxies…"},
		{"ResourceQuota", forbidden("egress-proxy-x7k2p", "exceeded quota: proxies, requested: pods=1, used: pods=3, limited: pods=3"),
			ReasonQuotaExhausted, what + ` refused by ResourceQuota: pods "egress-proxy-x7k2p" is forbidden: exceeded quota: proxies, requested: pods=1, used: pods=3, limited: pods=3`},
		{"ResourceQuota, no name yet", forbidden("", "exceeded quota: proxies, requested: pods=1, used: pods=3, limited: pods=3"), ReasonQuotaExhausted, what + " refused by ResourceQuota: pods is forbidden: exceeded quota…"},
		{"ResourceQuota without usage", forbidden("egress-proxy-lh8bf", "status unknown for quota: proxies, resources: pods"), ReasonAdmissionDenied, what + ` refused by ResourceQuota: pods "egress-proxy-lh8bf" is forbidden: status unknown for quota: proxies, resources: pods`},
		{"PodSecurity", forbidden("", `violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false (container "proxy" must set securityContext.allowPrivilegeEscalation=false), runAsNonRoot != true (pod or container "proxy" must set securityContext.runAsNonRoot=true)`),
			ReasonAdmissionDenied, what + ` refused by PodSecurity: pods is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false…`},
		{"LimitRanger maximum", forbidden("", "maximum cpu usage per Container is 500m, but limit is 1"), ReasonAdmissionDenied, what + " refused by LimitRanger: pods is forbidden: maximum cpu usage per Container is 500m, but limit is 1"},
		{"LimitRanger minimum per Pod", forbidden("", "minimum memory usage per Pod is 64Mi, but request is 32Mi"), ReasonAdmissionDenied, what + " refused by LimitRanger…"},
		{"LimitRanger ratio", forbidden("", "cpu max limit to request ratio per Container is 2, but provided ratio is 4.000000"), ReasonAdmissionDenied, what + " refused by LimitRanger…"},
		{"ServiceAccount", forbidden("", `error looking up service account egress-proxies/default: serviceaccount "default" not found`),
			ReasonAdmissionDenied, what + ` refused by ServiceAccount: pods is forbidden: error looking up service account egress-proxies/default: serviceaccount "default" not found`},
		{"NamespaceLifecycle", forbidden("", "unable to create new content in namespace egress-proxies because it is being terminated"), ReasonAdmissionDenied, what + " refused by NamespaceLifecycle…"},
		{"another plugin's 403", forbidden("", "node selector conflicts with its namespace node label selector"), ReasonAdmissionDenied,
			what + " refused by admission: pods is forbidden: node selector conflicts with its namespace node label selector"},
		{"webhook denial", status(403, metav1.StatusReasonForbidden, `admission webhook "registries.policy.example" denied the request: image registry.example/egress-proxy:1 is not from an allowed registry`),
			ReasonAdmissionDenied, what + ` refused by admission webhook "registries.policy.example": admission webhook "registries.policy.example" denied the request: image registry.example/egress-proxy:1 is not from an allowed registry`},
		{"webhook denial with its own 404", status(404, metav1.StatusReasonNotFound, `admission webhook "w.example" denied the request: no such tenant`), ReasonAdmissionDenied, what + ` refused by admission webhook "w.example"…`},
		{"webhook denial with its own 401", status(401, metav1.StatusReasonUnauthorized, `admission webhook "w.example" denied the request without explanation`), ReasonAdmissionDenied, what + ` refused by admission webhook "w.example"…`},
		{"webhook denial that quotes RBAC's words", status(403, metav1.StatusReasonForbidden, `admission webhook "w.example" denied the request: pods is forbidden: User "u" cannot create resource "pods" in API group "" in the namespace "egress-proxies"`),
			ReasonAdmissionDenied, what + ` refused by admission webhook "w.example"…`},
		{"webhook denial that quotes the quota's words", status(403, metav1.StatusReasonForbidden, `admission webhook "w.example" denied the request: pods is forbidden: exceeded quota: fake`), ReasonAdmissionDenied, what + ` refused by admission webhook "w.example"…`},
		{"webhook that cannot dry-run", apierrors.NewBadRequest(`admission webhook "audit.example" does not support dry run`), ReasonAdmissionDenied,
			what + `: admission webhook "audit.example" cannot take a dry run (its sideEffects is Unknown or Some), so the API server refuses every dry run it would see: set sideEffects: None (or NoneOnDryRun, if the webhook skips its side effects for dry runs) in its webhook configuration, or leave namespace egress-proxies out of its namespaceSelector`},
		{"webhook that cannot be called", apierrors.NewInternalError(errors.New(`failed calling webhook "registries.policy.example": failed to call webhook: Post "https://127.0.0.1:1/validate?timeout=10s": dial tcp 127.0.0.1:1: connect: connection refused`)),
			ReasonAdmissionDenied, what + ` refused: admission webhook "registries.policy.example" could not be called and fails closed: Internal error occurred: failed calling webhook…`},
		{"ValidatingAdmissionPolicy", status(422, metav1.StatusReasonInvalid, `pods "egress-proxy-sl7jz" is forbidden: ValidatingAdmissionPolicy 'registries' with binding 'registries' denied request: images must come from registry.allowed`),
			ReasonAdmissionDenied, what + ` refused by ValidatingAdmissionPolicy "registries": pods "egress-proxy-sl7jz" is forbidden: ValidatingAdmissionPolicy 'registries' with binding 'registries' denied request: images must come from registry.allowed`},
		{"ValidatingAdmissionPolicy, 403", status(403, metav1.StatusReasonForbidden, `pods "x" is forbidden: ValidatingAdmissionPolicy 'registries' with binding 'registries' denied request: image not allowed`),
			ReasonAdmissionDenied, what + ` refused by ValidatingAdmissionPolicy "registries"…`},
		{"invalid after mutation", apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "egress-proxy-x7k2p", field.ErrorList{field.Required(field.NewPath("spec", "containers").Index(0).Child("image"), "")}),
			ReasonAdmissionDenied, what + ` refused: the Pod is invalid as admission leaves it: Pod "egress-proxy-x7k2p" is invalid: spec.containers[0].image: Required value`},
		{"400 of another kind", apierrors.NewBadRequest("the server rejected our request for an unknown reason"), ReasonAdmissionDenied, what + " refused by admission: the server rejected our request for an unknown reason"},
		{"409", apierrors.NewConflict(pods, "x", errors.New("conflict")), ReasonAdmissionDenied, what + " refused by admission…"},
		{"401", apierrors.NewUnauthorized("Unauthorized"), provider.ReasonUnauthorized, what + ": Unauthorized"},
		{"namespace missing", apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, "egress-proxies"), provider.ReasonNotFound, what + `: namespaces "egress-proxies" not found`},
		{"429", apierrors.NewTooManyRequests("too many requests", 1), provider.ReasonRateLimited, what + ": too many requests"},
		{"503", apierrors.NewServiceUnavailable("the server is shutting down"), provider.ReasonServerError, what + ": the server is shutting down"},
		{"500", apierrors.NewInternalError(errors.New("etcdserver: request timed out")), provider.ReasonServerError, what + ": Internal error occurred: etcdserver: request timed out"},
		{"500 of another reason", status(500, metav1.StatusReasonUnknown, "the backend broke"), provider.ReasonServerError, what + ": the backend broke"},
		{"connection refused", &url.Error{Op: "Post", URL: "https://127.0.0.1:6443" + dryRunPath, Err: &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}}, provider.ReasonUnreachable, what + ": Post…"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tr := &trace{}
			tr.sent.Store(true)
			reason, msg := testPlacement().judge(context.Background(), tc.err, tr)
			if reason != tc.want {
				t.Errorf("reason %s, want %s (%s)", reason, tc.want, msg)
			}
			if prefix, ok := strings.CutSuffix(tc.msg, "…"); ok {
				if !strings.HasPrefix(msg, prefix) {
					t.Errorf("message\n %q\nwant it to start with\n %q", msg, prefix)
				}
			} else if msg != tc.msg {
				t.Errorf("message\n %q\nwant\n %q", msg, tc.msg)
			}
		})
	}

	t.Run("deadline", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		// Whatever the error says once the budget is spent.
		if reason, _ := testPlacement().judge(ctx, forbidden("", "exceeded quota: q"), &trace{}); reason != provider.ReasonTimeout {
			t.Errorf("reason %s, want Timeout", reason)
		}
	})
	t.Run("a huge message is cut", func(t *testing.T) {
		t.Parallel()
		huge := `admission webhook "w.example" denied the request: ` + strings.Repeat("no ", 1<<20)
		_, msg := testPlacement().judge(context.Background(), status(403, metav1.StatusReasonForbidden, huge), &trace{})
		if len(msg) > 2*provider.MaxProviderString || !strings.Contains(msg, "[cut: ") {
			t.Errorf("message of %d bytes for a %d-byte denial", len(msg), len(huge))
		}
	})
}

// TestDryRunPod: the Pod sent is the template with its name traded for a
// generateName and without what only the API server sets.
func TestDryRunPod(t *testing.T) {
	t.Parallel()
	now := metav1.Now()
	full := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "egress-proxy-0", Namespace: headroomNamespace, ResourceVersion: "42", UID: types.UID("1f0c"), Generation: 3,
			CreationTimestamp: now, DeletionTimestamp: &now, DeletionGracePeriodSeconds: new(int64(30)),
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
			Labels:        map[string]string{"app": "proxy"}, Annotations: map[string]string{"a": "b"},
		},
		Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "proxy", Image: "registry.example/proxy:1"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	got := dryRunPod(full, headroomNamespace)
	if got.Name != "" || got.GenerateName != "egress-proxy-0-" || got.Namespace != headroomNamespace || got.ResourceVersion != "" || got.UID != "" ||
		got.Generation != 0 || !got.CreationTimestamp.IsZero() || got.DeletionTimestamp != nil || got.DeletionGracePeriodSeconds != nil ||
		got.ManagedFields != nil || got.Status.Phase != "" || got.Kind != "Pod" || got.APIVersion != "v1" {
		t.Errorf("dry-run pod %+v", got)
	}
	if got.Labels["app"] != "proxy" || got.Annotations["a"] != "b" || got.Spec.Containers[0].Image != "registry.example/proxy:1" {
		t.Errorf("the template's own fields were not kept: %+v", got)
	}
	if full.Name != "egress-proxy-0" || full.ResourceVersion != "42" {
		t.Error("the template itself was changed")
	}
	if g := dryRunPod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "proxy-"}}, "ns").GenerateName; g != "proxy-" {
		t.Errorf("generateName %q, want the template's", g)
	}
	if g := dryRunPod(&corev1.Pod{}, "ns").GenerateName; g != DefaultGenerateName {
		t.Errorf("generateName %q, want %q", g, DefaultGenerateName)
	}
}

// dryRunAPI is an API server for the wired check: the list, the headroom
// requests (headroomAPI) and the dry run, which post answers.
type dryRunAPI struct {
	t        *testing.T
	headroom *headroomAPI
	listErr  *apierrors.StatusError

	mu    sync.Mutex
	posts []*http.Request
	// bodies are the bodies of posts.
	bodies [][]byte
	post   http.HandlerFunc
	// quotaLists counts the quota lists served without a headroomAPI.
	quotaLists int
}

func (a *dryRunAPI) serve(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/api/v1/pods":
		a.mu.Lock()
		listErr := a.listErr
		a.mu.Unlock()
		if listErr != nil {
			writeStatus(w, listErr, nil)
			return
		}
		writePodList(w)
	case r.URL.Path == dryRunPath:
		body, _ := io.ReadAll(r.Body)
		a.mu.Lock()
		a.posts = append(a.posts, r.Clone(context.Background()))
		a.bodies = append(a.bodies, body)
		post := a.post
		a.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		post(w, r)
	case a.headroom != nil:
		a.headroom.serve(w, r)
	case r.Method == http.MethodGet && r.URL.Path == "/api/v1/namespaces/"+headroomNamespace+"/resourcequotas":
		// A pod_template's capacity weighs the namespace's quotas: none
		// here.
		a.mu.Lock()
		a.quotaLists++
		a.mu.Unlock()
		writeJSON(w, &corev1.ResourceQuotaList{TypeMeta: metav1.TypeMeta{Kind: "ResourceQuotaList", APIVersion: "v1"}})
	default:
		a.t.Errorf("unexpected request %s %s", r.Method, r.URL)
		http.NotFound(w, r)
	}
}

func (a *dryRunAPI) set(f func(a *dryRunAPI)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	f(a)
}

func (a *dryRunAPI) postCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.posts)
}

// admit answers a dry run as the API server does: the Pod as it would be
// created, with a generated name, 201.
func admit(warning string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var pod corev1.Pod
		if err := json.NewDecoder(r.Body).Decode(&pod); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		pod.Name = pod.GenerateName + "x7k2p"
		pod.UID = "0d4c7a44-dry-run"
		body, _ := json.Marshal(pod)
		w.Header().Set("Content-Type", "application/json")
		if warning != "" {
			w.Header().Set("Warning", `299 - "`+warning+`"`)
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(body)
	}
}

func dryRunChecker(t *testing.T, srv *apiServer, mutate func(*Entry)) *Checker {
	t.Helper()
	cfg := &Entry{Name: "test", Kubeconfig: kubeconfig(t, srv.URL, srv.caPEM(), nil), LabelSelector: testSelector,
		Namespace: headroomNamespace, PodTemplate: writeTemplate(t, testTemplate)}
	if mutate != nil {
		mutate(cfg)
	}
	c, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestDryRunRequest pins the one request the dry run makes: POST to the
// namespace's pods with dryRun=All and nothing else in the query, the
// template as JSON with its name cleared, once per check; an admission
// gives Ready with the server's warnings, and /api/v1/status's details
// name the template and the outcome.
func TestDryRunRequest(t *testing.T) {
	t.Parallel()
	api := &dryRunAPI{t: t, post: admit("would violate PodSecurity \\\"restricted:latest\\\": runAsNonRoot != true")}
	srv := newAPIServer(t, true, api.serve)
	c := dryRunChecker(t, srv, nil)
	var logBuf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logBuf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	v := c.Check(context.Background(), logger, TargetName)
	if v.Reason != provider.ReasonReady {
		t.Fatalf("reason %s (%s), want Ready", v.Reason, v.Message)
	}
	wantMsg := `pods listed cluster-wide: no managed pods; dry-run create of pod_template in namespace egress-proxies admitted with warnings: would violate PodSecurity "restricted:latest": runAsNonRoot != true`
	if v.Message != wantMsg {
		t.Errorf("message\n %q\nwant\n %q", v.Message, wantMsg)
	}
	if n := api.postCount(); n != 1 {
		t.Fatalf("%d dry runs, want 1", n)
	}
	// The capacity weighs the namespace's quotas: one quota list beside
	// the dry run (none here, so no capacity).
	if api.quotaLists != 1 || v.Capacity.Known {
		t.Errorf("%d quota lists, capacity %s; want 1 and none", api.quotaLists, v.Capacity)
	}
	r, body := api.posts[0], api.bodies[0]
	if r.Method != http.MethodPost || r.URL.RawQuery != "dryRun=All" || r.Header.Get("Content-Type") != "application/json" ||
		r.Header.Get("Authorization") != "Bearer "+testToken {
		t.Errorf("request %s %s?%s Content-Type %q", r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Get("Content-Type"))
	}
	var sent corev1.Pod
	if err := json.Unmarshal(body, &sent); err != nil {
		t.Fatal(err)
	}
	if sent.Kind != "Pod" || sent.Name != "" || sent.GenerateName != "egress-proxy-" || sent.Namespace != headroomNamespace ||
		sent.Labels["app.kubernetes.io/managed-by"] != "egress-proxies-operator" || len(sent.Spec.Containers) != 1 ||
		!sent.Spec.Containers[0].Resources.Limits.Cpu().Equal(resource.MustParse("1")) {
		t.Errorf("sent %s", body)
	}
	d := v.Facts.Details()
	if d["podTemplate"] != c.cfg.PodTemplate.Path || d["namespace"] != headroomNamespace || !strings.HasPrefix(d["dryRun"], "Ready: dry-run create of pod_template in namespace egress-proxies admitted") {
		t.Errorf("details %v", d)
	}
	if _, err := time.Parse(time.RFC3339, d["dryRunTime"]); err != nil {
		t.Errorf("dryRunTime %q: %v", d["dryRunTime"], err)
	}
	for _, want := range []string{`request="POST /api/v1/namespaces/egress-proxies/pods?dryRun=All"`, "status=201"} {
		if !strings.Contains(logBuf.String(), want) {
			t.Errorf("debug log lacks %s:\n%s", want, logBuf.String())
		}
	}
	if strings.Contains(logBuf.String(), testToken) {
		t.Error("debug log leaks the token")
	}

	// A list that fails sends no dry run; the details still show the
	// template and the last outcome.
	api.set(func(a *dryRunAPI) {
		a.listErr = apierrors.NewForbidden(podsResource, "", errors.New(`User "u" cannot list resource "pods" in API group "" at the cluster scope`))
	})
	v = check(c)
	if v.Reason != provider.ReasonForbidden || api.postCount() != 1 {
		t.Errorf("list forbidden: %s (%s) after %d dry runs; want Forbidden, no more dry runs", v.Reason, v.Message, api.postCount())
	}
	if d2 := v.Facts.Details(); d2["dryRun"] != d["dryRun"] || d2["dryRunTime"] != d["dryRunTime"] || d2["podTemplate"] != d["podTemplate"] {
		t.Errorf("details after a failed list %v, want the last dry run's %v", d2, d)
	}
}

// TestDryRunNotRunYet: before any dry run, the details say why.
func TestDryRunNotRunYet(t *testing.T) {
	t.Parallel()
	api := &dryRunAPI{t: t, listErr: apierrors.NewUnauthorized("Unauthorized"), post: admit("")}
	srv := newAPIServer(t, true, api.serve)
	v := check(dryRunChecker(t, srv, nil))
	if v.Reason != provider.ReasonUnauthorized || api.postCount() != 0 {
		t.Fatalf("%s (%s) after %d dry runs", v.Reason, v.Message, api.postCount())
	}
	if d := v.Facts.Details(); !strings.HasPrefix(d["dryRun"], "not run yet") || d["dryRunTime"] != "" {
		t.Errorf("details %v", d)
	}
}

// TestDryRunAfterHeadroom: the dry run comes after can_i and
// min_quota_headroom and only when they pass (docs/configuration.md:
// "Placement: pod_template"); its own refusal is the verdict then.
func TestDryRunAfterHeadroom(t *testing.T) {
	t.Parallel()
	quotas := func(used string) []corev1.ResourceQuota {
		return []corev1.ResourceQuota{quota("compute", corev1.ResourceList{"pods": resource.MustParse("3")}, corev1.ResourceList{"pods": resource.MustParse(used)})}
	}
	for _, tc := range []struct {
		name    string
		allowed bool
		used    string
		post    http.HandlerFunc
		want    provider.Reason
		posts   int
	}{
		{"can_i says no", false, "0", admit(""), provider.ReasonForbidden, 0},
		{"quota used up", true, "3", admit(""), ReasonQuotaExhausted, 0},
		{"headroom passes, admitted", true, "2", admit(""), provider.ReasonReady, 1},
		{"headroom passes, PodSecurity refuses", true, "2", func(w http.ResponseWriter, _ *http.Request) {
			writeStatus(w, apierrors.NewForbidden(podsResource, "", errors.New(`violates PodSecurity "restricted:latest": runAsNonRoot != true`)), nil)
		}, ReasonAdmissionDenied, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			hr := &headroomAPI{t: t, want: 2, asked: map[string]int{}, arrived: make(chan struct{}),
				allowed: map[string]bool{"create pods": tc.allowed}, quotas: quotas(tc.used)}
			api := &dryRunAPI{t: t, headroom: hr, post: tc.post}
			srv := newAPIServer(t, true, api.serve)
			c := dryRunChecker(t, srv, func(k *Entry) {
				k.CanI, k.MinQuotaHeadroom = []string{"create pods"}, map[string]string{"pods": "1"}
			})
			v := check(c)
			if v.Reason != tc.want || api.postCount() != tc.posts {
				t.Errorf("%s (%s) after %d dry runs; want %s after %d", v.Reason, v.Message, api.postCount(), tc.want, tc.posts)
			}
			d := v.Facts.Details()
			if d["podTemplate"] == "" || (tc.want == ReasonQuotaExhausted && d["quota compute pods"] != tc.used+" of 3") {
				t.Errorf("details %v: want the template's and the headroom's together", d)
			}
		})
	}
}

// TestDryRunOneRequest: whatever the answer, one request per check:
// client-go's retries (429 and 5xx with Retry-After) stay off.
func TestDryRunOneRequest(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		post http.HandlerFunc
		want provider.Reason
	}{
		{"429 with Retry-After", func(w http.ResponseWriter, _ *http.Request) {
			writeStatus(w, apierrors.NewTooManyRequests("too many requests", 1), map[string]string{"Retry-After": "1"})
		}, provider.ReasonRateLimited},
		{"503 with Retry-After", func(w http.ResponseWriter, _ *http.Request) {
			writeStatus(w, apierrors.NewServiceUnavailable("shutting down"), map[string]string{"Retry-After": "1"})
		}, provider.ReasonServerError},
		{"a plain 500, not a Status", func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "upstream connect error or disconnect/reset before headers", http.StatusInternalServerError)
		}, provider.ReasonServerError},
		{"connection closed before an answer", func(w http.ResponseWriter, _ *http.Request) {
			if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
				conn.Close()
			}
		}, provider.ReasonUnreachable},
		{"200 of another kind", func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, &corev1.Namespace{TypeMeta: metav1.TypeMeta{Kind: "Namespace", APIVersion: "v1"}})
		}, provider.ReasonBadResponse},
		{"201 of a Pod without a name", func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, &corev1.Pod{TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"}})
		}, provider.ReasonBadResponse},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			api := &dryRunAPI{t: t, post: tc.post}
			srv := newAPIServer(t, true, api.serve)
			if v := check(dryRunChecker(t, srv, nil)); v.Reason != tc.want || api.postCount() != 1 {
				t.Errorf("%s (%s) after %d dry runs; want %s after 1", v.Reason, v.Message, api.postCount(), tc.want)
			}
		})
	}
}

// TestDryRunDeadline: a dry run the server never answers ends with the
// check's deadline as Timeout.
func TestDryRunDeadline(t *testing.T) {
	t.Parallel()
	api := &dryRunAPI{t: t, post: func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() }}
	srv := newAPIServer(t, true, api.serve)
	c := dryRunChecker(t, srv, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if v := c.Check(ctx, slog.New(slog.DiscardHandler), TargetName); v.Reason != provider.ReasonTimeout || api.postCount() > 1 {
		t.Errorf("%s (%s) after %d dry runs; want Timeout", v.Reason, v.Message, api.postCount())
	}
}

// TestEntryReasons: AdmissionDenied is in an entry's state set only with
// pod_template, QuotaExhausted with min_quota_headroom or pod_template
// (the ResourceQuota admission): a configuration without them exports the
// series it did before.
func TestEntryReasons(t *testing.T) {
	t.Parallel()
	pt := PodTemplate{Path: "/pod.yaml"}
	for _, tc := range []struct {
		name         string
		k            *Entry
		quota, admit bool
	}{
		{"plain", &Entry{}, false, false},
		{"namespace and can_i", &Entry{Namespace: "ns", CanI: []string{"create pods"}}, false, false},
		{"min_quota_headroom", &Entry{Namespace: "ns", MinQuotaHeadroom: map[string]string{"pods": "1"}}, true, false},
		{"pod_template", &Entry{Namespace: "ns", PodTemplate: pt}, true, true},
		{"both", &Entry{Namespace: "ns", PodTemplate: pt, MinQuotaHeadroom: map[string]string{"pods": "1"}}, true, true},
	} {
		set := Kind().EntryReasons(tc.k)
		if set.Contains(ReasonQuotaExhausted) != tc.quota || set.Contains(ReasonAdmissionDenied) != tc.admit {
			t.Errorf("%s: %v", tc.name, set.Reasons())
		}
		if err := set.Validate(); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
		if !set.Up(ReasonAdmissionDenied) && tc.admit {
			t.Errorf("%s: AdmissionDenied is not up = 1", tc.name)
		}
	}
	if !Reasons().Contains(ReasonAdmissionDenied) {
		t.Error("the kind's set lacks AdmissionDenied")
	}
}

// TestNewWithoutReadTemplate: a pod_template that was not read is the
// caller's error, never a check that sends nothing.
func TestNewWithoutReadTemplate(t *testing.T) {
	t.Parallel()
	_, err := New(&Entry{Name: "x", Namespace: "ns", PodTemplate: PodTemplate{Path: "/pod.yaml"}}, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "was not read") {
		t.Errorf("New: %v", err)
	}
}

// TestPodTemplateWarnings: --config.check reads the template again and
// warns about what the API server refuses for certain.
func TestPodTemplateWarnings(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, data string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.yaml", testTemplate)
	empty := write("empty.yaml", "metadata: {generateName: p-}\n")
	noImage := write("noimage.yaml", "spec: {containers: [{name: proxy}]}\n")
	cfgFile := write("provider_health.yml", "kubernetes:\n"+
		"  - {name: good, namespace: ns, pod_template: good.yaml}\n"+
		"  - {name: empty, namespace: ns, pod_template: empty.yaml}\n"+
		"  - {name: noimage, namespace: ns, pod_template: noimage.yaml}\n")
	cfg, err := config.Load(cfgFile, provider.Sections([]provider.Kind{Kind()}))
	if err != nil {
		t.Fatal(err)
	}
	warnings := func() string { return strings.Join(provider.FileWarnings([]provider.Kind{Kind()}, cfg), "\n") }
	want := `kubernetes "empty": pod_template: ` + empty + `: the Pod has no containers: the API server refuses it as invalid, so every check would be AdmissionDenied
kubernetes "noimage": pod_template: ` + noImage + `: spec.containers[0] has no name or no image: the API server refuses it as invalid, so every check would be AdmissionDenied`
	if got := warnings(); got != want {
		t.Errorf("warnings\n%s\nwant\n%s", got, want)
	}
	if err := os.WriteFile(good, []byte(strings.Replace(testTemplate, "egress-proxy:1", "egress-proxy:2", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(empty); err != nil {
		t.Fatal(err)
	}
	got := warnings()
	for _, w := range []string{
		`kubernetes "good": pod_template: ` + good + ` changed since the configuration was loaded`,
		`kubernetes "empty": pod_template: open ` + empty + `: no such file or directory`,
	} {
		if !strings.Contains(got, w) {
			t.Errorf("warnings\n%s\nlack\n%s", got, w)
		}
	}
}
