package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

var _ provider.Closer = (*Checker)(nil)

// ScheduleOutcome is what the last fit of the admitted Pod on the nodes
// gave, for the status page.
type ScheduleOutcome struct {
	Time    time.Time
	Reason  provider.Reason
	Message string
	// Fit is the fit itself; nil when the caches could not be fitted on
	// (not synced, watch refused).
	Fit *FitResult
}

// schedule runs the schedule part of a check (docs/configuration.md:
// "Scheduling: schedule"): after an admitted dry run (v Ready, pod the Pod
// admission returned), the fit of pod on the watch caches' Nodes, less
// what the Pods bound to them request. No request is made: the caches are
// kept by the watches, which the first check starts.
func (c *Checker) schedule(ctx context.Context, logger *slog.Logger, cl *client, pod *corev1.Pod, v provider.Verdict) provider.Verdict {
	f, _ := v.Facts.(*Facts)
	if f == nil {
		f = &Facts{}
		v.Facts = f
	}
	f.scheduled = true
	defer func() { f.Schedule = c.lastFit.Load() }()
	if v.Reason != provider.ReasonReady {
		return v
	}
	if pod == nil {
		// Admitted, but the answer could not be read as a Pod: no fit,
		// and no Ready that would claim one.
		v.Reason, v.Message = provider.ReasonBadResponse, "schedule: the Pod the dry run admitted could not be read: "+f.needsErr
		return v
	}
	ws := c.watch.ensure(cl)
	if ws == nil {
		v.Reason, v.Message = provider.ReasonUnknown, "the checker was closed by a reload"
		return v
	}
	// The first check of a fresh watch waits for the caches to fill, for
	// at most half of what is left of its budget: the rest is its own.
	wctx := ctx
	if d, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		wctx, cancel = context.WithDeadline(ctx, time.Now().Add(time.Until(d)/2))
		defer cancel()
	}
	ws.waitSynced(wctx)
	out := &ScheduleOutcome{Time: time.Now()}
	if reason, msg, ok := ws.verdict(out.Time); !ok {
		logger.Debug("watch caches not usable", "reason", reason, "msg", msg)
		out.Reason, out.Message = reason, msg
		c.lastFit.Store(out)
		v.Reason, v.Message = reason, msg
		return v
	}
	// The fit reads the cluster cache's snapshot, not the watch caches'
	// lists: no list of every Pod is built at a check.
	// The copies are placed up to the quota's capacity, past which the
	// capacity is the quota's whatever the nodes take.
	limit := int64(provider.MaxCapacity)
	if q := quotaCapacity(f.Headroom, c.headroomSet.mins, f.needs); q.Known {
		// At least one: a quota with no room is the quota's verdict,
		// not the nodes'.
		limit = max(q.Proxies, 1)
	}
	var namespaces []*corev1.Namespace
	var err error
	if needsNamespaces(pod, ws.sched) {
		namespaces, err = ws.namespaceList(ctx)
	}
	var (
		res  FitResult
		doms domainFit
	)
	if err == nil {
		// The fit runs on its own snapshot of the cluster's scheduler
		// cache, brought up to date incrementally, restored and kept for
		// the next fit; entries fitting the same Pod at the same state
		// share it (sharedfit.go), with its domains' figures when they ask
		// for the same ones. One that reads namespaces fits on its own:
		// their watch is not part of the cache's state.
		nominated := ws.nominatedList()
		domainKey := ""
		if c.cfg != nil {
			domainKey = c.cfg.CapacityDomain
		}
		fit := func(fs *fitSnapshot) (fitOutcome, error) {
			fs.nominated = nominated
			nodes := fs.nodes()
			// The bound Pods' requests per node and InterPodAffinity's
			// state as the fit's PreFilter left it, which the domains'
			// fits start from.
			var (
				use   map[string]*nodeUse
				reuse *ipaReuse
			)
			r, err := fitOnWith(ctx, pod, fs, nodes, nil, nil, namespaces, limit, fitOptions{keepIPA: &reuse, keepUse: &use})
			if err != nil || domainKey == "" {
				return fitOutcome{fit: r}, err
			}
			// From the same snapshot, with no request (docs/configuration.md:
			// "Capacity per failure domain: capacity_domain"); node-fit
			// figures, which no quota bounds.
			d, err := fitDomains(ctx, pod, fs, nodes, use, namespaces, domainKey, pod.Namespace, reuse)
			return fitOutcome{fit: r, doms: d}, err
		}
		var o fitOutcome
		if namespaces != nil {
			o, err = ws.sched.fitOwn(fit)
		} else {
			o, err = ws.sched.fitShared(ctx, pod, limit, domainKey, fit)
		}
		res, doms = o.fit, o.doms
	}
	if err == nil && provider.Ended(ctx) {
		// The deadline passed as the fit ended: what it counted is no
		// verdict (docs/configuration.md: "Timeouts"). The domains' fits
		// included: a verdict's figures are all of one uncut fit, or none.
		err = fmt.Errorf("the deadline passed as the fit of the Pod on %d nodes ended: %w", res.Nodes, context.DeadlineExceeded)
	}
	if err != nil {
		out.Reason, out.Message = scheduleErrReason(ctx, err), "schedule: "+boundedErr(err)
		if apierrors.IsForbidden(err) {
			out.Reason = provider.ReasonForbidden
			out.Message += " (list and watch on namespaces: deploy/kubernetes/components/schedule, Helm value rbac.schedule)"
		}
		c.lastFit.Store(out)
		v.Reason, v.Message = out.Reason, out.Message
		return v
	}
	out.Fit, out.Message, out.Reason = &res, res.Message(), provider.ReasonReady
	if doms.note != "" {
		out.Message += "; " + doms.note
	}
	v.Domains = doms.domains
	f.fit = &res
	logger.Debug("fitted the admitted pod on the nodes", "nodes", res.Nodes, "fitting", res.Fitting, "copies", res.Copies)
	if res.Copies == 0 {
		out.Reason = ReasonUnschedulable
		v.Reason, v.Message = ReasonUnschedulable, out.Message
	} else {
		v.Message += "; " + out.Message
	}
	c.lastFit.Store(out)
	return v
}

// scheduleErrReason is the reason of a fit that returned err: Timeout
// when the deadline cut it (fitCut) or the namespaces' list, whatever the
// error says, as for every request of a check; Unknown otherwise.
func scheduleErrReason(ctx context.Context, err error) provider.Reason {
	if provider.Ended(ctx) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return provider.ReasonTimeout
	}
	return provider.ReasonUnknown
}

// Close stops the watches of schedule; a checker without schedule holds
// nothing to release.
func (c *Checker) Close() error {
	if c.watch == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), provider.CloseBound)
	defer cancel()
	return c.watch.Close(ctx)
}

// scheduleDetails adds the last fit's outcome to the status details.
func scheduleDetails(d map[string]string, last *ScheduleOutcome) {
	if last == nil {
		d["schedule"] = "not run yet: the list call, the headroom checks and the dry run must pass first"
		return
	}
	d["schedule"] = string(last.Reason) + ": " + last.Message
	d["scheduleTime"] = last.Time.UTC().Format(time.RFC3339)
}

// lastFit is declared here to keep the Checker's fields about schedule
// together with the code that uses them.
type lastFit = atomic.Pointer[ScheduleOutcome]
