package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// capQuota is a ResourceQuota with hard and used as name → quantity pairs.
func capQuota(name string, hardUsed ...[3]string) corev1.ResourceQuota {
	q := corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: headroomNamespace},
		Spec:   corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{}},
		Status: corev1.ResourceQuotaStatus{Hard: corev1.ResourceList{}, Used: corev1.ResourceList{}}}
	for _, hu := range hardUsed {
		r := corev1.ResourceName(hu[0])
		q.Spec.Hard[r], q.Status.Hard[r] = resource.MustParse(hu[1]), resource.MustParse(hu[1])
		if hu[2] != "" {
			q.Status.Used[r] = resource.MustParse(hu[2])
		}
	}
	return q
}

// admitWithDefaults answers a dry run as the API server with a LimitRange
// defaulting requests to 250m CPU and 64Mi memory per container would: the
// Pod comes back with the defaults filled in.
func admitWithDefaults(w http.ResponseWriter, r *http.Request) {
	var pod corev1.Pod
	if err := json.NewDecoder(r.Body).Decode(&pod); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			if cs[i].Resources.Requests == nil {
				cs[i].Resources.Requests = corev1.ResourceList{}
			}
			// The API server's defaulting: a limit without a request is
			// the request too.
			for res, q := range cs[i].Resources.Limits {
				if _, ok := cs[i].Resources.Requests[res]; !ok {
					cs[i].Resources.Requests[res] = q
				}
			}
			for res, def := range map[corev1.ResourceName]string{corev1.ResourceCPU: "250m", corev1.ResourceMemory: "64Mi"} {
				if _, ok := cs[i].Resources.Requests[res]; !ok {
					cs[i].Resources.Requests[res] = resource.MustParse(def)
				}
			}
		}
	}
	pod.Name = pod.GenerateName + "x7k2p"
	writeJSONStatus(w, http.StatusCreated, &pod)
}

func writeJSONStatus(w http.ResponseWriter, code int, obj any) {
	body, _ := json.Marshal(obj)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

// TestCapacity: the capacity of a cluster entry from the namespace's
// quotas: divided by min_quota_headroom without pod_template, and by the
// Pod the dry run returned (LimitRange defaults, init containers and one
// pod for pods) with it; 0 bound by the reason when a check refuses; the
// verdict agrees with it (ready ⇔ capacity ≥ 1).
func TestCapacity(t *testing.T) {
	t.Parallel()
	compute := capQuota("compute", [3]string{"requests.cpu", "2", "500m"}, [3]string{"requests.memory", "1Gi", "256Mi"},
		[3]string{"pods", "10", "3"}, [3]string{"services", "5", "5"})
	scoped := capQuota("best-effort", [3]string{"pods", "1", "1"})
	scoped.Spec.Scopes = []corev1.ResourceQuotaScope{corev1.ResourceQuotaScopeBestEffort}
	known := func(n int64, binding string) provider.Capacity {
		return provider.Capacity{Known: true, Proxies: n, Binding: binding}
	}
	const initTemplate = testTemplate + `  initContainers:
    - name: warm
      image: registry.example/warm:1
      resources: {requests: {cpu: "1200m"}}
`
	refuse := func(w http.ResponseWriter, _ *http.Request) {
		writeStatus(w, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "egress-proxy-x",
			errors.New("exceeded quota: compute, requested: requests.cpu=1, used: requests.cpu=2, limited: requests.cpu=2")), nil)
	}
	for _, tc := range []struct {
		name     string
		quotas   []corev1.ResourceQuota
		template string // "" = none
		mins     map[string]string
		allowed  bool
		post     http.HandlerFunc
		want     provider.Reason
		cap      provider.Capacity
	}{
		{"pod_template: defaults bind", []corev1.ResourceQuota{compute, scoped}, testTemplate, nil, true, admitWithDefaults,
			// cpu: the limit of 1 is the request (1500m / 1000m); memory
			// 768Mi / 64Mi = 12; pods 7; services are not a Pod's.
			provider.ReasonReady, known(1, "quota compute requests.cpu")},
		{"pod_template: init container", []corev1.ResourceQuota{capQuota("compute", [3]string{"requests.cpu", "10", "0"}, [3]string{"pods", "10", "3"})},
			initTemplate, nil, true, admitWithDefaults, provider.ReasonReady, known(7, "quota compute pods")},
		{"pod_template: the init container's request is the Pod's", []corev1.ResourceQuota{capQuota("compute", [3]string{"requests.cpu", "5", "0"})},
			initTemplate, nil, true, admitWithDefaults, provider.ReasonReady, known(4, "quota compute requests.cpu")}, // 5 / max(1, 1.2)
		{"pod_template: memory", []corev1.ResourceQuota{capQuota("mem", [3]string{"memory", "1Gi", "256Mi"})}, testTemplate, nil, true, admitWithDefaults,
			provider.ReasonReady, known(12, "quota mem memory")},
		{"pod_template: no quota", nil, testTemplate, nil, true, admitWithDefaults, provider.ReasonReady, provider.Capacity{}},
		{"pod_template: only a scoped quota", []corev1.ResourceQuota{scoped}, testTemplate, nil, true, admitWithDefaults, provider.ReasonReady, provider.Capacity{}},
		{"pod_template: refused by quota", []corev1.ResourceQuota{compute}, testTemplate, nil, true, refuse,
			ReasonQuotaExhausted, known(0, string(ReasonQuotaExhausted))},
		{"min_quota_headroom alone", []corev1.ResourceQuota{compute}, "", map[string]string{"requests.cpu": "500m", "pods": "1"}, true, nil,
			provider.ReasonReady, known(3, "quota compute requests.cpu")},
		{"min_quota_headroom at the boundary", []corev1.ResourceQuota{compute}, "", map[string]string{"requests.cpu": "1500m"}, true, nil,
			provider.ReasonReady, known(1, "quota compute requests.cpu")},
		{"min_quota_headroom one short", []corev1.ResourceQuota{compute}, "", map[string]string{"requests.cpu": "1501m"}, true, nil,
			ReasonQuotaExhausted, known(0, "quota compute requests.cpu")},
		// 7 pods / 4 and 1500m / 1 CPU tie: the configured key, checked
		// first, names the binding.
		{"both: the least", []corev1.ResourceQuota{compute}, testTemplate, map[string]string{"pods": "4"}, true, admitWithDefaults,
			provider.ReasonReady, known(1, "quota compute pods")},
		{"both: the Pod binds", []corev1.ResourceQuota{compute}, testTemplate, map[string]string{"pods": "2"}, true, admitWithDefaults,
			provider.ReasonReady, known(1, "quota compute requests.cpu")},
		{"can_i says no", []corev1.ResourceQuota{compute}, "", map[string]string{"pods": "1"}, false, nil,
			provider.ReasonForbidden, known(0, string(provider.ReasonForbidden))},
		{"can_i alone names no need", []corev1.ResourceQuota{compute}, "", nil, false, nil,
			provider.ReasonForbidden, provider.Capacity{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// The review and the quota list, when there is one, arrive
			// together.
			want := 1
			if tc.mins != nil || tc.template != "" {
				want = 2
			}
			api := &dryRunAPI{t: t, post: tc.post, headroom: &headroomAPI{t: t, quotas: tc.quotas,
				allowed: map[string]bool{"create pods": tc.allowed}, want: want, asked: map[string]int{}, arrived: make(chan struct{})}}
			srv := newAPIServer(t, true, api.serve)
			c := dryRunChecker(t, srv, func(k *Entry) {
				k.PodTemplate = PodTemplate{}
				if tc.template != "" {
					k.PodTemplate = writeTemplate(t, tc.template)
				}
				k.MinQuotaHeadroom = tc.mins
				k.CanI = []string{"create pods"}
			})
			v := c.Check(context.Background(), slog.New(slog.DiscardHandler), TargetName)
			if v.Reason != tc.want || v.Capacity != tc.cap {
				t.Errorf("%s (%s), capacity %+v; want %s, capacity %+v", v.Reason, v.Message, v.Capacity, tc.want, tc.cap)
			}
			if v.Capacity.Contradicts(v.Reason) {
				t.Errorf("capacity %s contradicts %s", v.Capacity, v.Reason)
			}
		})
	}
}

// TestCapacityQuotaListRefused: an entry that lists quotas only for its
// pod_template's capacity keeps its verdict when the list is refused; the
// capacity is unknown and the message says why.
func TestCapacityQuotaListRefused(t *testing.T) {
	t.Parallel()
	api := &dryRunAPI{t: t, post: admitWithDefaults, headroom: &headroomAPI{t: t, want: 1, asked: map[string]int{}, arrived: make(chan struct{}),
		quotaErr: apierrors.NewForbidden(schema.GroupResource{Resource: "resourcequotas"}, "", errors.New("RBAC"))}}
	srv := newAPIServer(t, true, api.serve)
	v := dryRunChecker(t, srv, nil).Check(context.Background(), slog.New(slog.DiscardHandler), TargetName)
	if v.Reason != provider.ReasonReady || v.Capacity.Known {
		t.Errorf("%s (%s), capacity %s; want Ready without a capacity", v.Reason, v.Message, v.Capacity)
	}
	if want := "; capacity unknown: list resource quotas of namespace egress-proxies: "; !strings.Contains(v.Message, want) {
		t.Errorf("message %q, want it to say %q", v.Message, want)
	}
}
