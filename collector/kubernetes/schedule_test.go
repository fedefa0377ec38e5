package kubernetes

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// scheduleAPI is an API server for whole checks with schedule: the list
// call, the dry run (admitWithDefaults: the template's limit cpu 1 becomes
// its request), the namespace's quotas (none), and the watches' lists of
// nodes and pods.
func scheduleAPI(nodes []corev1.Node, pods []corev1.Pod, forbidNodes bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		switch {
		case r.Method == http.MethodPost:
			admitWithDefaults(w, r)
		case strings.HasSuffix(r.URL.Path, "/resourcequotas"):
			writeJSONStatus(w, http.StatusOK, &corev1.ResourceQuotaList{TypeMeta: metav1.TypeMeta{Kind: "ResourceQuotaList", APIVersion: "v1"}})
		case r.URL.Path == "/api/v1/nodes" && forbidNodes:
			writeJSONStatus(w, http.StatusForbidden, &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
				Reason: metav1.StatusReasonForbidden, Code: http.StatusForbidden, Message: `nodes is forbidden: User "exporter" cannot list resource "nodes" in API group "" at the cluster scope`})
		case q.Get("watch") == "true" && r.URL.Path == "/api/v1/nodes":
			var items []runtime.Object
			for i := range nodes {
				n := nodes[i]
				n.TypeMeta = metav1.TypeMeta{Kind: "Node", APIVersion: "v1"}
				items = append(items, &n)
			}
			serveWatch(w, r, items)
		case q.Get("watch") == "true":
			var items []runtime.Object
			for i := range pods {
				p := pods[i]
				p.TypeMeta = metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"}
				items = append(items, &p)
			}
			serveWatch(w, r, items)
		case r.URL.Path == "/api/v1/nodes":
			writeJSONStatus(w, http.StatusOK, &corev1.NodeList{TypeMeta: metav1.TypeMeta{Kind: "NodeList", APIVersion: "v1"}, ListMeta: metav1.ListMeta{ResourceVersion: "9"}, Items: nodes})
		case r.URL.Path == "/api/v1/pods" && q.Get("fieldSelector") != "":
			body, _ := json.Marshal(&corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}, ListMeta: metav1.ListMeta{ResourceVersion: "9"}, Items: pods})
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(body)
		default:
			writePodList(w)
		}
	}
}

// TestCheckSchedule runs whole checks with schedule: the Pod the dry run
// admitted is fitted on the watched nodes; its copies bound the capacity
// (binding nodes), none is Unschedulable, a refused watch Forbidden.
func TestCheckSchedule(t *testing.T) {
	cordoned := func(n *corev1.Node) { n.Spec.Unschedulable = true }
	for _, tc := range []struct {
		name        string
		nodes       []*corev1.Node
		pods        []*corev1.Pod
		forbidNodes bool
		reason      provider.Reason
		capacity    int64
		binding     string
		message     string
	}{
		{name: "room on two nodes", nodes: []*corev1.Node{fitNode("n1", nil), fitNode("n2", nil)}, pods: []*corev1.Pod{boundPod("n1", "cpu", "3")},
			reason: provider.ReasonReady, capacity: 5, binding: "nodes", message: "5 copies of the Pod fit on 2/2 nodes"},
		{name: "all cordoned", nodes: []*corev1.Node{fitNode("n1", cordoned), fitNode("n2", cordoned)},
			reason: ReasonUnschedulable, capacity: 0, binding: "nodes", message: "0/2 nodes are available: 2 node(s) were unschedulable"},
		{name: "watch refused", nodes: []*corev1.Node{fitNode("n1", nil)}, forbidNodes: true,
			reason: provider.ReasonForbidden, capacity: 0, binding: "Forbidden", message: "cannot list/watch nodes cluster-wide"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var nodes []corev1.Node
			for _, n := range tc.nodes {
				nodes = append(nodes, *n)
			}
			var pods []corev1.Pod
			for _, p := range tc.pods {
				pods = append(pods, *p)
			}
			srv := newAPIServer(t, true, scheduleAPI(nodes, pods, tc.forbidNodes))
			c, err := New(&Entry{Name: "sched", Kubeconfig: kubeconfig(t, srv.URL, srv.caPEM(), nil), LabelSelector: testSelector,
				Namespace: headroomNamespace, PodTemplate: writeTemplate(t, testTemplate), Schedule: true}, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := c.Close(); err != nil {
					t.Error(err)
				}
			}()
			var v provider.Verdict
			// A refused watch is known once its first list was refused:
			// check until it is, however slow the machine.
			for {
				ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
				v = c.Check(ctx, slog.New(slog.DiscardHandler), TargetName)
				cancel()
				if v.Reason != provider.ReasonUnknown || t.Context().Err() != nil {
					break
				}
			}
			if v.Reason != tc.reason || !strings.Contains(v.Message, tc.message) {
				t.Errorf("verdict %s %q, want %s with %q", v.Reason, v.Message, tc.reason, tc.message)
			}
			if !v.Capacity.Known || v.Capacity.Proxies != tc.capacity || v.Capacity.Binding != tc.binding {
				t.Errorf("capacity %s, want %d (%s)", v.Capacity, tc.capacity, tc.binding)
			}
			if v.Capacity.Contradicts(v.Reason) {
				t.Errorf("capacity %s contradicts %s", v.Capacity, v.Reason)
			}
			f, _ := v.Facts.(*Facts)
			if f == nil || !strings.HasPrefix(f.Details()["schedule"], string(tc.reason)+": ") {
				t.Errorf("status details without the fit: %v", v.Facts)
			}
		})
	}
}

// Without schedule there is no Unschedulable series and no watch.
func TestEntryReasonsSchedule(t *testing.T) {
	t.Parallel()
	k := &Entry{PodTemplate: PodTemplate{Path: "p"}}
	if EntryReasons(k).Contains(ReasonUnschedulable) {
		t.Error("Unschedulable in the set of an entry without schedule")
	}
	k.Schedule = true
	if !EntryReasons(k).Contains(ReasonUnschedulable) {
		t.Error("Unschedulable not in the set of an entry with schedule")
	}
	c, err := New(&Entry{Name: "x"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.watch != nil || c.Close() != nil {
		t.Error("a checker without schedule holds watches")
	}
}
