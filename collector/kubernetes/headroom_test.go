package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

const headroomNamespace = "egress-proxies"

func TestParseCanI(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want CanI
		err  string
	}{
		{"create pods", CanI{Verb: "create", Resource: "pods"}, ""},
		{"  delete   pods ", CanI{Verb: "delete", Resource: "pods"}, ""},
		{"create deployments.apps", CanI{Verb: "create", Group: "apps", Resource: "deployments"}, ""},
		{"create apps/deployments", CanI{Verb: "create", Group: "apps", Resource: "deployments"}, ""},
		{"create ingresses.networking.k8s.io", CanI{Verb: "create", Group: "networking.k8s.io", Resource: "ingresses"}, ""},
		{"create networking.k8s.io/ingresses", CanI{Verb: "create", Group: "networking.k8s.io", Resource: "ingresses"}, ""},
		{"* *", CanI{Verb: "*", Resource: "*"}, ""},
		{"", CanI{}, "want a verb and a resource"},
		{"create", CanI{}, `can_i entry "create": want a verb and a resource`},
		{"create pods now", CanI{}, "want a verb and a resource"},
		{"Create pods", CanI{}, `verb "Create" is not a lowercase name`},
		{"create Pods", CanI{}, `resource "Pods" is not a lowercase name`},
		{"create /pods", CanI{}, "want GROUP/RESOURCE"},
		{"create apps/deployments/scale", CanI{}, "want GROUP/RESOURCE"},
		{"create apps/", CanI{}, `resource "" is not a lowercase name`},
		{"create pods.", CanI{}, `group "" is not`},
		{"create pods._x", CanI{}, `group "_x" is not a lowercase name`},
	} {
		got, err := ParseCanI(tt.in)
		if tt.err == "" {
			if err != nil || got != tt.want {
				t.Errorf("ParseCanI(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("ParseCanI(%q) = %+v, %v; want an error with %q", tt.in, got, err, tt.err)
		}
	}
	if s := (CanI{Verb: "create", Group: "apps", Resource: "deployments"}).String(); s != "create deployments.apps" {
		t.Errorf("String() = %q", s)
	}
}

func TestParseQuotaMinimum(t *testing.T) {
	for _, tt := range []struct {
		name, value, want, err string
	}{
		{"pods", "1", "1", ""},
		{"requests.cpu", "2", "2", ""},
		{"requests.cpu", "500m", "500m", ""},
		{"requests.memory", "4Gi", "4Gi", ""},
		{"requests.memory", "-4Gi", "", `min_quota_headroom requests.memory: "-4Gi" is negative`},
		{"pods", "lots", "", `min_quota_headroom pods: quantity "lots": no digits`},
		{"pods", "", "", `min_quota_headroom pods: empty quantity`},
		{"pods", "1e-1000000000", "", `min_quota_headroom pods: quantity "1e-1000000000": magnitude beyond 10^±64`},
		{"pods", "1e40", "", `min_quota_headroom pods: "1e40" is larger than any quota can be`},
		{"", "1", "", "empty resource name"},
	} {
		got, err := ParseQuotaMinimum(tt.name, tt.value)
		if tt.err == "" {
			if err != nil || got.String() != tt.want {
				t.Errorf("ParseQuotaMinimum(%q, %q) = %s, %v; want %s", tt.name, tt.value, got.String(), err, tt.want)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("ParseQuotaMinimum(%q, %q) = %s, %v; want an error with %q", tt.name, tt.value, got.String(), err, tt.err)
		}
	}
}

var testMins = map[corev1.ResourceName]Quantity{
	corev1.ResourcePods:           mustQuantity("1"),
	corev1.ResourceRequestsCPU:    mustQuantity("2"),
	corev1.ResourceRequestsMemory: mustQuantity("4Gi"),
}

func mustQuantity(s string) Quantity {
	q, err := parseQuantity(s)
	if err != nil {
		panic(err)
	}
	return q
}

func usage(quota string, res corev1.ResourceName, hard, used string) QuotaUsage {
	return QuotaUsage{Quota: quota, Resource: res, Hard: mustQuantity(hard), Used: mustQuantity(used)}
}

func TestEvaluateHeadroom(t *testing.T) {
	yes := CanIAnswer{CanI: CanI{Verb: "create", Resource: "pods"}, Allowed: true}
	no := CanIAnswer{CanI: CanI{Verb: "create", Resource: "pods"}}
	noWhy := CanIAnswer{CanI: CanI{Verb: "delete", Group: "apps", Resource: "deployments"}, Reason: `RBAC: role "proxies" does not allow it`}
	for _, tc := range []struct {
		name    string
		h       Headroom
		want    provider.Reason
		message string
	}{
		{"nothing asked", Headroom{}, provider.ReasonReady, ""},
		{"allowed, room left", Headroom{CanI: []CanIAnswer{yes}, Quotas: []QuotaUsage{
			usage("compute", corev1.ResourcePods, "10", "9"), usage("compute", corev1.ResourceRequestsCPU, "8", "6"),
			usage("compute", corev1.ResourceRequestsMemory, "16Gi", "12Gi"),
		}}, provider.ReasonReady, ""},
		{"denied", Headroom{CanI: []CanIAnswer{yes, no}}, provider.ReasonForbidden, "cannot create pods in namespace egress-proxies"},
		{"denied with the review's reason", Headroom{CanI: []CanIAnswer{noWhy}}, provider.ReasonForbidden,
			`cannot delete deployments.apps in namespace egress-proxies: RBAC: role "proxies" does not allow it`},
		{"pods used up", Headroom{Quotas: []QuotaUsage{usage("compute", corev1.ResourcePods, "10", "10")}}, ReasonQuotaExhausted,
			"quota compute in namespace egress-proxies: pods used 10 of hard 10 leaves 0, 1 required"},
		{"cpu short in millicores", Headroom{Quotas: []QuotaUsage{usage("compute", corev1.ResourceRequestsCPU, "8", "6500m")}}, ReasonQuotaExhausted,
			"quota compute in namespace egress-proxies: requests.cpu used 6500m of hard 8 leaves 1500m, 2 required"},
		{"over the hard limit", Headroom{Quotas: []QuotaUsage{usage("mem", corev1.ResourceRequestsMemory, "16Gi", "20Gi")}}, ReasonQuotaExhausted,
			"quota mem in namespace egress-proxies: requests.memory used 20Gi of hard 16Gi leaves 0, 4Gi required"},
		{"denied wins over quota", Headroom{CanI: []CanIAnswer{no}, Quotas: []QuotaUsage{usage("compute", corev1.ResourcePods, "10", "10")}},
			provider.ReasonForbidden, "cannot create pods in namespace egress-proxies"},
		{"usage not counted yet is not exhaustion", Headroom{Quotas: []QuotaUsage{{Quota: "new", Resource: corev1.ResourcePods, Hard: mustQuantity("0"), NoUsage: true}}},
			provider.ReasonReady, "quota new in namespace egress-proxies has no usage of pods yet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reason, msg := evaluateHeadroom(headroomNamespace, tc.h, testMins)
			if reason != tc.want || msg != tc.message {
				t.Errorf("got %s %q, want %s %q", reason, msg, tc.want, tc.message)
			}
		})
	}
}

// headroomAPI answers SelfSubjectAccessReviews from allowed (key: the
// entry's String) and lists quotas. With barrier set, no answer is sent
// before want requests have arrived: requests made one after another would
// never be answered.
type headroomAPI struct {
	t       *testing.T
	allowed map[string]bool
	quotas  []corev1.ResourceQuota
	// quotaErr, when set, answers the quota list.
	quotaErr *apierrors.StatusError
	want     int

	mu      sync.Mutex
	asked   map[string]int
	arrived chan struct{}
}

func (a *headroomAPI) serve(w http.ResponseWriter, r *http.Request) {
	key := ""
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews":
		var rev authorizationv1.SelfSubjectAccessReview
		if err := json.NewDecoder(r.Body).Decode(&rev); err != nil || rev.Kind != "SelfSubjectAccessReview" ||
			rev.Spec.ResourceAttributes == nil || rev.Spec.ResourceAttributes.Namespace != headroomNamespace {
			a.t.Errorf("review %+v, %v", rev, err)
			return
		}
		ra := rev.Spec.ResourceAttributes
		key = CanI{Verb: ra.Verb, Group: ra.Group, Resource: ra.Resource}.String()
		defer func() {
			rev.Status.Allowed = a.allowed[key]
			if !rev.Status.Allowed {
				rev.Status.Reason = "no RBAC policy matched"
			}
			writeJSON(w, &rev)
		}()
	case r.Method == http.MethodGet && r.URL.Path == "/api/v1/namespaces/"+headroomNamespace+"/resourcequotas":
		key = "resourcequotas"
		defer func() {
			if a.quotaErr != nil {
				writeStatus(w, a.quotaErr, nil)
				return
			}
			writeJSON(w, &corev1.ResourceQuotaList{TypeMeta: metav1.TypeMeta{Kind: "ResourceQuotaList", APIVersion: "v1"}, Items: a.quotas})
		}()
	default:
		a.t.Errorf("unexpected request %s %s", r.Method, r.URL)
		http.NotFound(w, r)
		return
	}
	a.mu.Lock()
	a.asked[key]++
	n := 0
	for _, v := range a.asked {
		n += v
	}
	if n == a.want {
		close(a.arrived)
	}
	a.mu.Unlock()
	select {
	case <-a.arrived:
	case <-r.Context().Done():
	}
}

func writeJSON(w http.ResponseWriter, obj any) {
	b, _ := json.Marshal(obj)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

func quota(name string, hard, used corev1.ResourceList) corev1.ResourceQuota {
	return corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: headroomNamespace},
		Spec:       corev1.ResourceQuotaSpec{Hard: hard},
		Status:     corev1.ResourceQuotaStatus{Hard: hard, Used: used},
	}
}

// TestReadHeadroom: every review and the quota list are in flight at once,
// each asked exactly once, through the package's client; their answers
// make the verdict; a failed request is classified like the list call.
func TestReadHeadroom(t *testing.T) {
	t.Parallel()
	canI := []CanI{{Verb: "create", Resource: "pods"}, {Verb: "delete", Resource: "pods"}, {Verb: "create", Group: "apps", Resource: "deployments"}}
	rl := func(pods, cpu string) corev1.ResourceList {
		return corev1.ResourceList{corev1.ResourcePods: resource.MustParse(pods), corev1.ResourceRequestsCPU: resource.MustParse(cpu)}
	}
	for _, tc := range []struct {
		name     string
		allowed  map[string]bool
		quotas   []corev1.ResourceQuota
		quotaErr *apierrors.StatusError
		want     provider.Reason
		message  string
	}{
		{"all allowed, room left", map[string]bool{"create pods": true, "delete pods": true, "create deployments.apps": true},
			[]corev1.ResourceQuota{quota("compute", rl("10", "8"), rl("3", "2")), quota("other", corev1.ResourceList{"services": resource.MustParse("1")}, nil)},
			nil, provider.ReasonReady, ""},
		{"create pods denied", map[string]bool{"delete pods": true, "create deployments.apps": true}, nil, nil,
			provider.ReasonForbidden, "cannot create pods in namespace egress-proxies: no RBAC policy matched"},
		{"pods used up", map[string]bool{"create pods": true, "delete pods": true, "create deployments.apps": true},
			[]corev1.ResourceQuota{quota("compute", rl("10", "8"), rl("10", "2"))}, nil,
			ReasonQuotaExhausted, "quota compute in namespace egress-proxies: pods used 10 of hard 10 leaves 0, 1 required"},
		{"quota list forbidden", map[string]bool{"create pods": true, "delete pods": true, "create deployments.apps": true}, nil,
			apierrors.NewForbidden(schema.GroupResource{Resource: "resourcequotas"}, "", errors.New("RBAC")),
			provider.ReasonForbidden, "list resource quotas of namespace egress-proxies"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			api := &headroomAPI{t: t, allowed: tc.allowed, quotas: tc.quotas, quotaErr: tc.quotaErr, want: len(canI) + 1,
				asked: map[string]int{}, arrived: make(chan struct{})}
			srv := newAPIServer(t, true, api.serve)
			c := newTestChecker(t, kubeconfig(t, srv.URL, srv.caPEM(), nil))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			logger := slog.New(slog.DiscardHandler)
			cl, err := c.current(ctx, logger)
			if err != nil {
				t.Fatal(err)
			}
			h, reason, err := c.readHeadroom(ctx, logger, cl, headroomNamespace, canI, testMins, false)
			msg := ""
			if err != nil {
				msg = err.Error()
			} else {
				reason, msg = evaluateHeadroom(headroomNamespace, h, testMins)
			}
			if reason != tc.want || (tc.message == "") != (msg == "") || !strings.Contains(msg, tc.message) {
				t.Errorf("got %s %q, want %s with %q", reason, msg, tc.want, tc.message)
			}
			api.mu.Lock()
			defer api.mu.Unlock()
			for _, k := range []string{"create pods", "delete pods", "create deployments.apps", "resourcequotas"} {
				if n := api.asked[k]; n != 1 {
					t.Errorf("%s asked %d times, want 1", k, n)
				}
			}
		})
	}
}

// TestQuotaUsagesAreTheConfiguredOnes: the series are made of the
// configured resources of every quota that limits them, and nothing else.
func TestQuotaUsagesAreTheConfiguredOnes(t *testing.T) {
	t.Parallel()
	api := &headroomAPI{t: t, want: 1, asked: map[string]int{}, arrived: make(chan struct{}), quotas: []corev1.ResourceQuota{
		quota("b-compute", corev1.ResourceList{"pods": resource.MustParse("10"), "requests.cpu": resource.MustParse("8"), "services": resource.MustParse("2")},
			corev1.ResourceList{"pods": resource.MustParse("4"), "requests.cpu": resource.MustParse("1500m"), "services": resource.MustParse("1")}),
		quota("a-pods", corev1.ResourceList{"pods": resource.MustParse("5")}, nil),
	}}
	srv := newAPIServer(t, true, api.serve)
	c := newTestChecker(t, kubeconfig(t, srv.URL, srv.caPEM(), nil))
	logger := slog.New(slog.DiscardHandler)
	cl, err := c.current(context.Background(), logger)
	if err != nil {
		t.Fatal(err)
	}
	h, _, err := c.readHeadroom(context.Background(), logger, cl, headroomNamespace, nil, testMins, false)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, u := range h.Quotas {
		s := u.Quota + " " + string(u.Resource) + " " + u.Hard.String() + " " + u.Used.String()
		if u.NoUsage {
			s = u.Quota + " " + string(u.Resource) + " " + u.Hard.String() + " no-usage"
		}
		got = append(got, s)
	}
	want := []string{"a-pods pods 5 no-usage", "b-compute pods 10 4", "b-compute requests.cpu 8 1500m"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestCheckHeadroom: the wired check. Without the headroom keys a check is
// the list call alone and has no facts; with them the reviews and the
// quota list follow a Ready list, their verdict is the check's, and the
// configured resources become the quota series; a failed list asks
// nothing more.
func TestCheckHeadroom(t *testing.T) {
	t.Parallel()
	api := &headroomAPI{t: t, want: 2, asked: map[string]int{}, arrived: make(chan struct{}),
		allowed: map[string]bool{"create pods": true},
		quotas: []corev1.ResourceQuota{quota("compute", corev1.ResourceList{"pods": resource.MustParse("10"), "services": resource.MustParse("2")},
			corev1.ResourceList{"pods": resource.MustParse("10"), "services": resource.MustParse("1")})}}
	var lists atomic.Int32
	var listFails atomic.Bool
	srv := newAPIServer(t, true, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/v1/pods" {
			lists.Add(1)
			if listFails.Load() {
				writeStatus(w, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("RBAC")), nil)
				return
			}
			writePodList(w)
			return
		}
		api.serve(w, r)
	})
	path := kubeconfig(t, srv.URL, srv.caPEM(), nil)
	newChecker := func(cfg Entry) *Checker {
		cfg.Name, cfg.Kubeconfig, cfg.LabelSelector = "test", path, testSelector
		c, err := New(&cfg, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	asked := func() int {
		api.mu.Lock()
		defer api.mu.Unlock()
		n := 0
		for _, v := range api.asked {
			n += v
		}
		return n
	}

	if v := check(newChecker(Entry{Namespace: headroomNamespace})); v.Reason != provider.ReasonReady || v.Facts != nil || asked() != 0 || v.Capacity.Known {
		t.Errorf("namespace alone: %s %q, facts %v, %d headroom requests, capacity %s; want Ready, none, 0, none", v.Reason, v.Message, v.Facts, asked(), v.Capacity)
	}
	c := newChecker(Entry{Namespace: headroomNamespace, CanI: []string{"create pods"}, MinQuotaHeadroom: map[string]string{"pods": "1"}})
	v := check(c)
	if v.Reason != ReasonQuotaExhausted || !strings.Contains(v.Message, "quota compute in namespace egress-proxies: pods used 10 of hard 10") || asked() != 2 {
		t.Errorf("pods used up: %s %q after %d headroom requests; want QuotaExhausted after 2", v.Reason, v.Message, asked())
	}
	if want := (provider.Capacity{Known: true, Binding: "quota compute pods"}); v.Capacity != want {
		t.Errorf("pods used up: capacity %+v, want %+v", v.Capacity, want)
	}
	want := `
# HELP provider_health_kubernetes_quota_hard A ResourceQuota's hard limit of a resource named in min_quota_headroom.
# TYPE provider_health_kubernetes_quota_hard gauge
provider_health_kubernetes_quota_hard{name="test",namespace="egress-proxies",quota="compute",resource="pods"} 10
# HELP provider_health_kubernetes_quota_used A ResourceQuota's usage of a resource named in min_quota_headroom.
# TYPE provider_health_kubernetes_quota_used gauge
provider_health_kubernetes_quota_used{name="test",namespace="egress-proxies",quota="compute",resource="pods"} 10
`
	if err := testutil.CollectAndCompare(factsCollector{v.Facts}, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if d := v.Facts.Details(); d["canI create pods"] != "true" || d["quota compute pods"] != "10 of 10" || d["namespace"] != headroomNamespace {
		t.Errorf("details %v", d)
	}
	listFails.Store(true)
	before, beforeLists := asked(), lists.Load()
	if v := check(c); v.Reason != provider.ReasonForbidden || asked() != before || lists.Load() != beforeLists+1 {
		t.Errorf("list forbidden: %s %q, %d more headroom requests; want Forbidden, none", v.Reason, v.Message, asked()-before)
	}
}

// factsCollector emits one cluster's facts, as the framework does.
type factsCollector struct{ f provider.Facts }

func (c factsCollector) Describe(chan<- *prometheus.Desc) {}
func (c factsCollector) Collect(ch chan<- prometheus.Metric) {
	c.f.Collect(ch, "test", TargetName)
}
