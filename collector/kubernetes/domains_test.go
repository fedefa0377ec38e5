package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ktypes "k8s.io/apimachinery/pkg/types"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// domainCluster: six Nodes of 2 CPUs in zones zone-a, zone-b, zone-c,
// a1, b1 and c1 in rack-1, the others in rack-2 (4 proxies of 500m each when empty). Bound: on a1 two proxies (one with
// a label more), a Pod labelled app=proxy in another namespace and one of
// the proxies' namespace labelled app=other, 500m each: a1 is full; one
// proxy on a2, one on b1. Proxies: zone-a 3, zone-b 1, zone-c 0.
func domainCluster() ([]*corev1.Node, []*corev1.Pod) {
	var nodes []*corev1.Node
	for _, z := range []string{"a", "b", "c"} {
		for _, i := range []string{"1", "2"} {
			nodes = append(nodes, fitNode(z+i, func(n *corev1.Node) { n.Labels[corev1.LabelTopologyZone], n.Labels["rack"] = "zone-"+z, "rack-"+i },
				"cpu", "2", "memory", "8Gi", "pods", "110"))
		}
	}
	bound := func(name, node, ns string, labels map[string]string) *corev1.Pod {
		p := boundPod(node, "cpu", "500m", "memory", "256Mi")
		p.Name, p.Namespace, p.UID, p.Labels = name, ns, ktypes.UID("uid-"+name), labels
		return keepPod(p)
	}
	proxy := map[string]string{"app": "proxy"}
	pods := []*corev1.Pod{
		bound("p1", "a1", "egress-proxies", proxy),
		bound("p2", "a1", "egress-proxies", map[string]string{"app": "proxy", "extra": "x"}),
		bound("elsewhere", "a1", "other", proxy),
		bound("other-app", "a1", "egress-proxies", map[string]string{"app": "other"}),
		bound("p3", "a2", "egress-proxies", proxy),
		bound("p4", "b1", "egress-proxies", proxy),
	}
	return nodes, pods
}

// fitDomainsOn is the entry's fit and its domains on the cluster cache
// fed with nodes and pods, as schedule runs them.
func fitDomainsOn(ctx context.Context, t *testing.T, pod *corev1.Pod, nodes []*corev1.Node, pods []*corev1.Pod) (FitResult, domainFit, error) {
	t.Helper()
	return fitDomainsBy(ctx, t, corev1.LabelTopologyZone, pod, nodes, pods)
}

func fitDomainsBy(ctx context.Context, t *testing.T, key string, pod *corev1.Pod, nodes []*corev1.Node, pods []*corev1.Pod) (FitResult, domainFit, error) {
	t.Helper()
	cctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	fs, err := fedCache(cctx, nodes, pods).acquire()
	if err != nil {
		t.Fatal(err)
	}
	defer fs.release()
	use := nodeUsage(pods)
	snapNodes := fs.nodes()
	var reuse *ipaReuse
	r, err := fitOnWith(ctx, pod, fs, snapNodes, pods, use, nil, provider.MaxCapacity, fitOptions{keepIPA: &reuse})
	if err != nil {
		return r, domainFit{}, err
	}
	d, err := fitDomains(ctx, pod, fs, snapNodes, use, nil, key, "egress-proxies", reuse)
	return r, d, err
}

func withTaintsPolicy(policy corev1.NodeInclusionPolicy) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		zoneSpread(corev1.DoNotSchedule)(p)
		p.Spec.TopologySpreadConstraints[0].NodeTaintsPolicy = &policy
	}
}

// Each case's figures are worked out by hand from domainCluster: zone-a
// takes 0 + 3 copies, zone-b 3 + 4, zone-c 4 + 4; proxies a 3, b 1, c 0.
func TestFitDomains(t *testing.T) {
	t.Parallel()
	// fits is what fits once the domain is lost, its proxies included.
	dom := func(name string, capacity, proxies, fits int64) provider.Domain {
		return provider.Domain{Name: name, Capacity: capacity, Proxies: proxies, AfterLoss: fits - proxies, HasAfterLoss: true}
	}
	for _, tc := range []struct {
		name   string
		key    string
		pod    *corev1.Pod
		copies int64
		want   []provider.Domain
		note   string
	}{
		// One per zone: only zone-c has none. Losing rack-1 takes p4,
		// b1's proxy, with it: zone-b takes one on b2, and c one on c2;
		// zone-a keeps p3 on a2. Losing rack-2 takes p3, but a1 still
		// holds two: c1 only.
		{name: "anti-affinity per zone, domains per rack", key: "rack", pod: proxyPod(antiAffinity(corev1.LabelTopologyZone)), copies: 1,
			want: []provider.Domain{dom("rack-1", 1, 3, 2), dom("rack-2", 1, 1, 1)},
			note: "losing rack-1 leaves 1 proxy without a place"},
		// Losing a: b and c take 7 + 8, less a's 3 proxies.
		{name: "plain", pod: proxyPod(nil), copies: 18,
			want: []provider.Domain{dom("zone-a", 3, 3, 15), dom("zone-b", 7, 1, 11), dom("zone-c", 8, 0, 10)}},
		// One per node without a proxy: b2, c1, c2. Losing a frees no
		// node of b or c.
		{name: "anti-affinity per node", pod: proxyPod(antiAffinity(corev1.LabelHostname)), copies: 3,
			want: []provider.Domain{dom("zone-a", 0, 3, 3), dom("zone-b", 1, 1, 2), dom("zone-c", 2, 0, 1)}},
		// The entry: a 3 + 3, b 1 + 7, c 0 + 8: the least 6, each
		// domain up to 7: 3 + 6 + 7. Pinned, a domain is alone in its
		// spread. Lost with Ignore, the lost zone stays a domain at 0:
		// the others up to 1 (a: c takes 1, 3 proxies wait; b: c takes
		// 1; c: none).
		{name: "zone spread, nodeTaintsPolicy Ignore", pod: proxyPod(withTaintsPolicy(corev1.NodeInclusionPolicyIgnore)), copies: 16,
			want: []provider.Domain{dom("zone-a", 3, 3, 1), dom("zone-b", 7, 1, 1), dom("zone-c", 8, 0, 0)},
			note: "losing zone-a leaves 2 proxies without a place"},
		{name: "zone spread, nodeTaintsPolicy default", pod: proxyPod(zoneSpread(corev1.DoNotSchedule)), copies: 16,
			want: []provider.Domain{dom("zone-a", 3, 3, 1), dom("zone-b", 7, 1, 1), dom("zone-c", 8, 0, 0)},
			note: "losing zone-a leaves 2 proxies without a place"},
		// With Honor the lost zone is no domain: losing a, b 1 + 7 and
		// c 0 + 8 up to 9: 7 + 8; losing b, a 6 and c 8 up to 7: 3 + 7;
		// losing c, a 6 and b 8 up to 7: 3 + 6.
		{name: "zone spread, nodeTaintsPolicy Honor", pod: proxyPod(withTaintsPolicy(corev1.NodeInclusionPolicyHonor)), copies: 16,
			want: []provider.Domain{dom("zone-a", 3, 3, 15), dom("zone-b", 7, 1, 10), dom("zone-c", 8, 0, 9)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			nodes, pods := domainCluster()
			key := tc.key
			if key == "" {
				key = corev1.LabelTopologyZone
			}
			r, got, err := fitDomainsBy(context.Background(), t, key, tc.pod, nodes, pods)
			if err != nil {
				t.Fatal(err)
			}
			if r.Copies != tc.copies {
				t.Errorf("entry fit: %s, want %d copies", r.Message(), tc.copies)
			}
			if !reflect.DeepEqual(got.domains, tc.want) {
				t.Errorf("domains\n got: %+v\nwant: %+v", got.domains, tc.want)
			}
			if got.note != tc.note {
				t.Errorf("note %q, want %q", got.note, tc.note)
			}
		})
	}
}

// The domains' fits leave the snapshot as they found it: the entry's fit
// run again on it after them counts what it counted before, a host port's
// copies included (the ports a copy holds are in its NodeInfo's maps).
func TestFitDomainsRestoresTheSnapshot(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		pod    *corev1.Pod
		copies int64
	}{
		{"zone spread", proxyPod(zoneSpread(corev1.DoNotSchedule)), 16},
		{"host port", proxyPod(hostPort), 5}, // a1 is full
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			nodes, pods := domainCluster()
			cc := fedCache(ctx, nodes, pods)
			for round := range 2 {
				fs, err := cc.acquire()
				if err != nil {
					t.Fatal(err)
				}
				use := nodeUsage(pods)
				var reuse *ipaReuse
				r, err := fitOnWith(ctx, tc.pod, fs, fs.nodes(), pods, use, nil, provider.MaxCapacity, fitOptions{keepIPA: &reuse})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := fitDomains(ctx, tc.pod, fs, fs.nodes(), use, nil, corev1.LabelTopologyZone, "egress-proxies", reuse); err != nil {
					t.Fatal(err)
				}
				again, err := fitOn(ctx, tc.pod, fs, fs.nodes(), pods, use, nil, provider.MaxCapacity)
				if err != nil {
					t.Fatal(err)
				}
				if r.Copies != tc.copies || again.Copies != tc.copies {
					t.Errorf("round %d: %d copies, then %d after the domains' fits; want %d both", round, r.Copies, again.Copies, tc.copies)
				}
				for _, n := range fs.nodes() {
					if len(n.Spec.Taints) > 0 {
						t.Errorf("round %d: node %s kept the taints of a lost domain: %v", round, n.Name, n.Spec.Taints)
					}
				}
				fs.release()
			}
		})
	}
}

func TestWorstLoss(t *testing.T) {
	t.Parallel()
	d := func(name string, afterLoss int64) provider.Domain {
		return provider.Domain{Name: name, AfterLoss: afterLoss, HasAfterLoss: true}
	}
	for _, tc := range []struct {
		ds   []provider.Domain
		want string
	}{
		{[]provider.Domain{d("a", -1), d("b", -3), d("c", -3), d("d", 2)}, "losing b leaves 3 proxies without a place"},
		{[]provider.Domain{d("a", 0), d("b", -1)}, "losing b leaves 1 proxy without a place"},
		{[]provider.Domain{d("a", 0), d("b", 4)}, ""},
		{[]provider.Domain{{Name: "host", AfterLoss: -5}}, ""}, // no after-loss known
	} {
		if got := provider.WorstLoss(tc.ds); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.ds, got, tc.want)
		}
	}
}

// More values than provider.MaxDomains: no domain, the message names the
// count. Nodes without the label are in no domain.
func TestFitDomainsBounded(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		values  int
		domains int
		note    string
	}{
		{provider.MaxDomains, provider.MaxDomains, ""},
		{provider.MaxDomains + 1, 0, fmt.Sprintf("capacity_domain topology.kubernetes.io/zone: %d domains, more than the %d an entry exports: no domain figures", provider.MaxDomains+1, provider.MaxDomains)},
		{0, 0, "capacity_domain topology.kubernetes.io/zone: no Node has the label, no domain"},
	} {
		t.Run(fmt.Sprint(tc.values), func(t *testing.T) {
			t.Parallel()
			var nodes []*corev1.Node
			for i := range tc.values {
				nodes = append(nodes, fitNode(fmt.Sprintf("n%03d", i), func(n *corev1.Node) { n.Labels[corev1.LabelTopologyZone] = fmt.Sprintf("z%03d", i) }))
			}
			nodes = append(nodes, fitNode("unlabelled", nil))
			_, got, err := fitDomainsOn(context.Background(), t, proxyPod(nil), nodes, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(got.domains) != tc.domains || got.note != tc.note {
				t.Errorf("%d domains, note %q; want %d, %q", len(got.domains), got.note, tc.domains, tc.note)
			}
			for _, d := range got.domains {
				// 4 CPUs: 8 copies each; losing one leaves the others and
				// the unlabelled node.
				if d.Capacity != 8 || d.Proxies != 0 || d.AfterLoss != int64(8*tc.values) {
					t.Errorf("domain %+v, want capacity 8, no proxies, after loss %d", d, 8*tc.values)
					break
				}
			}
		})
	}
}

// A deadline that falls during the domains' fits gives no figure: an
// error the check reports as Timeout, or, past the end, the uncut
// figures.
func TestFitDomainsCutByTheDeadline(t *testing.T) {
	t.Parallel()
	pod := proxyPod(withTaintsPolicy(corev1.NodeInclusionPolicyIgnore))
	nodes, pods := domainCluster()
	_, want, err := fitDomainsOn(context.Background(), t, pod, nodes, pods)
	if err != nil {
		t.Fatal(err)
	}
	cut := 0
	for trip := int64(1); ; trip++ {
		ctx := newTripCtx(trip)
		nodes, pods := domainCluster()
		_, got, err := fitDomainsOn(ctx, t, pod, nodes, pods)
		if !ctx.tripped() {
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Errorf("untripped: %+v, %v; want %+v", got, err, want)
			}
			break
		}
		switch {
		case err != nil:
			if !errors.Is(err, context.DeadlineExceeded) || scheduleErrReason(context.Background(), err) != provider.ReasonTimeout {
				t.Errorf("deadline at call %d: %v, want an error the check reports as Timeout", trip, err)
			}
			if got.domains != nil {
				t.Errorf("deadline at call %d: domains %+v with the error", trip, got.domains)
			}
			cut++
		case !reflect.DeepEqual(got, want):
			t.Errorf("deadline at call %d: %+v, want Timeout or the uncut %+v", trip, got, want)
		}
		if trip > 20_000 {
			t.Fatal("the fits never ended untripped")
		}
	}
	if cut == 0 {
		t.Error("no deadline cut the fits")
	}
}

func TestPinPod(t *testing.T) {
	t.Parallel()
	pod := proxyPod(func(p *corev1.Pod) {
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{
				{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "pool", Operator: corev1.NodeSelectorOpIn, Values: []string{"proxies"}}}},
				{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "pool", Operator: corev1.NodeSelectorOpIn, Values: []string{"spare"}}}},
			}}}}
	})
	pinned := pinPod(pod, "zone", "a")
	terms := pinned.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	for i, term := range terms {
		if len(term.MatchExpressions) != 2 || term.MatchExpressions[1].Key != "zone" || term.MatchExpressions[1].Values[0] != "a" {
			t.Errorf("term %d: %+v, want its own requirement and zone In [a]", i, term)
		}
	}
	if len(pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions) != 1 {
		t.Error("pinPod changed the Pod it copied")
	}
	if s := pinPod(proxyPod(nil), "zone", "a").Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.String(); !strings.Contains(s, "zone") {
		t.Errorf("pinned Pod without affinity: %s", s)
	}
}

// TestScheduleDomains: through the check's schedule step, capacity_domain
// sets the verdict's Domains from the watch caches, and the message names
// the worst loss. Nodes z1-n (2 CPUs, one proxy bound) and z2-n (1 CPU),
// the template 1 CPU with a zone spread (DoNotSchedule): pinned, z1
// takes 1, z2 1. Losing z1: z2 takes 1 (z1 stays a domain at 0 under
// nodeTaintsPolicy Ignore, but z2 is at 0 too), less z1's proxy: 0.
// Losing z2: z1 at 1 over z2's 0 takes none, z2's proxies none: 0.
func TestScheduleDomains(t *testing.T) {
	w := wire{}
	h := newHostileAPI(t, w)
	for _, n := range []*corev1.Node{
		fitNode("z1-n", func(n *corev1.Node) { n.Labels[corev1.LabelTopologyZone] = "z1" }, "cpu", "2", "memory", "8Gi", "pods", "110"),
		fitNode("z2-n", func(n *corev1.Node) { n.Labels[corev1.LabelTopologyZone] = "z2" }, "cpu", "1", "memory", "8Gi", "pods", "110"),
	} {
		n.TypeMeta = metav1.TypeMeta{Kind: "Node", APIVersion: "v1"}
		n.ResourceVersion = "5"
		h.items["nodes"] = append(h.items["nodes"], w.item(t, n))
	}
	running := boundPod("z1-n", "cpu", "1")
	running.TypeMeta = metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"}
	running.Name, running.UID, running.ResourceVersion, running.Labels = "proxy-running", "uid-running", "6", map[string]string{"app": "proxy"}
	h.items["pods"] = [][]byte{w.item(t, running)}
	c := &Checker{cfg: &Entry{Namespace: "egress-proxies", Schedule: true, CapacityDomain: corev1.LabelTopologyZone},
		watch: &watcher{logger: slog.New(slog.DiscardHandler)}}
	t.Cleanup(func() { _ = c.watch.Close(context.Background()) })
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	pod := fitPod(func(p *corev1.Pod) { p.Labels = map[string]string{"app": "proxy"}; zoneSpread(corev1.DoNotSchedule)(p) }, "cpu", "1")
	v := c.schedule(ctx, slog.New(slog.DiscardHandler), h.client(), pod, provider.Verdict{Reason: provider.ReasonReady, Message: "listed"})
	want := []provider.Domain{
		{Name: "z1", Capacity: 1, Proxies: 1, AfterLoss: 0, HasAfterLoss: true}, // 1 fits, for 1 proxy
		{Name: "z2", Capacity: 1, Proxies: 0, AfterLoss: 0, HasAfterLoss: true},
	}
	if v.Reason != provider.ReasonReady || !reflect.DeepEqual(v.Domains, want) {
		t.Errorf("%s %q, domains %+v; want Ready, %+v", v.Reason, v.Message, v.Domains, want)
	}
	// A second proxy in z1 that lost finds no place: the message names it.
	second := running.DeepCopy()
	second.Name, second.UID = "proxy-second", "uid-second"
	second.Spec.NodeName = "z1-n"
	second.Spec.Containers[0].Resources.Requests = fitResources("cpu", "500m")
	h.items["pods"] = append(h.items["pods"], w.item(t, second))
	c2 := &Checker{cfg: c.cfg, watch: &watcher{logger: slog.New(slog.DiscardHandler)}}
	t.Cleanup(func() { _ = c2.watch.Close(context.Background()) })
	v = c2.schedule(ctx, slog.New(slog.DiscardHandler), h.client(), pod, provider.Verdict{Reason: provider.ReasonReady, Message: "listed"})
	if len(v.Domains) != 2 || v.Domains[0].AfterLoss != 1-2 || !strings.HasSuffix(v.Message, "; losing z1 leaves 1 proxy without a place") {
		t.Errorf("%s %q, domains %+v; want z1's loss at -1 named", v.Reason, v.Message, v.Domains)
	}
}
