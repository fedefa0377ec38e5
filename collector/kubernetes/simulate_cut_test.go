package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// tripCtx is a context whose deadline passes at the trip-th call of its
// Done: what the fit's plugins see when the scrape's deadline falls in
// the middle of a fit, at a chosen point and without a clock. Its
// AfterFunc spares the contexts derived from it a goroutine, so every
// call of Done is the fit's own, in the fit's order.
type tripCtx struct {
	context.Context
	trip  int64
	calls atomic.Int64
	mu    sync.Mutex
	done  chan struct{}
	after []func()
}

func newTripCtx(trip int64) *tripCtx {
	return &tripCtx{Context: context.Background(), trip: trip, done: make(chan struct{})}
}

func (c *tripCtx) Done() <-chan struct{} {
	if c.calls.Add(1) == c.trip {
		c.mu.Lock()
		close(c.done)
		after := c.after
		c.after = nil
		c.mu.Unlock()
		for _, f := range after {
			f()
		}
	}
	return c.done
}

func (c *tripCtx) tripped() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

func (c *tripCtx) Err() error {
	if c.tripped() {
		return context.DeadlineExceeded
	}
	return nil
}

func (c *tripCtx) AfterFunc(f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.done:
		go f()
	default:
		c.after = append(c.after, f)
	}
	return func() bool { return false }
}

// A fit the deadline cuts short is never a verdict: for every point at
// which the deadline can fall, the fit either says the deadline cut it
// (the check's Timeout) or gives what the uncut fit gives. The issue's
// case: every bound Pod repels the proxy, so that nothing fits; past the
// deadline InterPodAffinity's PreFilter counts nothing and every node
// would take copies.
func TestFitCutByTheDeadline(t *testing.T) {
	t.Parallel()
	repelling := func(nodes []*corev1.Node, pods []*corev1.Pod) []*corev1.Pod {
		for _, n := range nodes {
			g := boundPod(n.Name)
			g.Name, g.Labels = "guard-"+n.Name, map[string]string{"app": "guard"}
			g.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "proxy"}}, TopologyKey: corev1.LabelHostname}}}}
			pods = append(pods, stripPod(g))
		}
		return pods
	}
	for _, tc := range []struct {
		name  string
		pod   *corev1.Pod
		guard bool
	}{
		{"nothing fits: repelled everywhere", proxyPod(nil), true},
		{"nothing fits, zone spread", proxyPod(zoneSpread(corev1.DoNotSchedule)), true},
		{"zone spread", proxyPod(zoneSpread(corev1.DoNotSchedule)), false},
		{"anti-affinity per zone", proxyPod(antiAffinity(corev1.LabelTopologyZone)), false},
		{"host port and zone spread", proxyPod(func(p *corev1.Pod) { hostPort(p); zoneSpread(corev1.DoNotSchedule)(p) }), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cluster := func() ([]*corev1.Node, []*corev1.Pod) {
				nodes, pods := proxyCluster()
				if tc.guard {
					pods = repelling(nodes, pods)
				}
				return nodes, pods
			}
			nodes, pods := cluster()
			want, err := fitWithPlugins(context.Background(), tc.pod, nodes, pods, nil, 1000)
			if err != nil {
				t.Fatal(err)
			}
			if tc.guard && want.Copies != 0 {
				t.Fatalf("uncut fit: %s, want none", want.Message())
			}
			cut := 0
			for trip := int64(1); ; trip++ {
				ctx := newTripCtx(trip)
				nodes, pods := cluster()
				got, err := fitWithPlugins(ctx, tc.pod, nodes, pods, nil, 1000)
				if !ctx.tripped() {
					// The deadline fell after the fit: the uncut fit.
					if err != nil || !reflect.DeepEqual(got, want) {
						t.Errorf("untripped fit: %s, %v; want %s", got.Message(), err, want.Message())
					}
					break
				}
				switch {
				case err != nil:
					if !errors.Is(err, context.DeadlineExceeded) || scheduleErrReason(context.Background(), err) != provider.ReasonTimeout {
						t.Errorf("deadline at call %d: %v, want an error the check reports as Timeout", trip, err)
					}
					cut++
				case !reflect.DeepEqual(got, want):
					t.Errorf("deadline at call %d: %s, want Timeout or the uncut fit's %s", trip, got.Message(), want.Message())
				}
				if trip > 10_000 {
					t.Fatal("the fit never ended untripped")
				}
			}
			if cut == 0 {
				t.Error("no deadline cut the fit")
			}
		})
	}
}

// A fit that ended cleanly but after its deadline (provider.Ended) is
// Timeout as well, and so is any error while the context is over.
func TestScheduleErrReason(t *testing.T) {
	t.Parallel()
	ended, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	for _, tc := range []struct {
		ctx  context.Context
		err  error
		want provider.Reason
	}{
		{context.Background(), errors.New("scheduler framework: broken"), provider.ReasonUnknown},
		{context.Background(), fmt.Errorf("cut: %w", context.DeadlineExceeded), provider.ReasonTimeout},
		{context.Background(), fmt.Errorf("cut: %w", context.Canceled), provider.ReasonTimeout},
		{ended, errors.New("list namespaces: connection reset"), provider.ReasonTimeout},
	} {
		if got := scheduleErrReason(tc.ctx, tc.err); got != tc.want {
			t.Errorf("%v: %s, want %s", tc.err, got, tc.want)
		}
	}
}
