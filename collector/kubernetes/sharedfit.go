package kubernetes

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// Entries that reach one cluster with one identity and fit the same Pod
// (one template checked under two budgets, or by two names for two teams)
// share the fit of each state of the cluster cache: the first entry to fit
// it at that state computes it, the others take its result, waiting for it
// if it is running (docs/scaling.md: "schedule: watch caches and the node
// fit"). The fit is a function of the cache's state, the admitted Pod and
// the limit, nothing else, so a shared result is the one the entry would
// have computed.

// fitKey names one fit: the cache's state (the count of the watch events
// it has applied), the admitted Pod (what the fit reads of it: namespace,
// labels, spec), the limit of copies and the Node label of its failure
// domains ("" for none).
type fitKey struct {
	state  uint64
	pod    [sha256.Size]byte
	limit  int64
	domain string
}

// fitOutcome is what one fit gives: the copies, and the failure domains'
// figures when the entry asks for them (domains.go).
type fitOutcome struct {
	fit  FitResult
	doms domainFit
}

// sharedFit is one fit's outcome, ready when done is closed.
type sharedFit struct {
	done chan struct{}
	res  fitOutcome
	err  error
}

// maxSharedFits bounds the results kept per cluster: those of the current
// state only, one per distinct Pod and limit, as many as the entries.
// Past it the oldest are not kept, and their entries fit on their own.
const maxSharedFits = 64

// podFitKey is the part of fitKey the admitted Pod gives. ok is false for
// a Pod that does not encode (none does: it was decoded from JSON).
func podFitKey(pod *corev1.Pod) (key [sha256.Size]byte, ok bool) {
	b, err := json.Marshal(struct {
		Namespace string            `json:"n"`
		Labels    map[string]string `json:"l"`
		Spec      *corev1.PodSpec   `json:"s"`
	}{pod.Namespace, pod.Labels, &pod.Spec})
	if err != nil {
		return key, false
	}
	return sha256.Sum256(b), true
}

// fitShared is fit, shared with the other entries fitting the same Pod at
// the same state of cc (see above). acquire gives the fit its snapshot and
// is only called by the entry that computes it: a snapshot brought up to
// date is most of what eight entries fitting at once would cost. An entry
// that waits stops at its own deadline; a fit cut short by another
// entry's deadline is not shared, and the waiting entry fits on its own.
func (cc *clusterCache) fitShared(ctx context.Context, pod *corev1.Pod, limit int64, domain string, fit func(*fitSnapshot) (fitOutcome, error)) (fitOutcome, error) {
	own := func() (fitOutcome, error) { return cc.fitOwn(fit) }
	pk, ok := podFitKey(pod)
	if !ok {
		return own()
	}
	key := fitKey{state: cc.events.Load(), pod: pk, limit: limit, domain: domain}
	cc.fitsMu.Lock()
	sf, found := cc.fits[key]
	if !found {
		for k := range cc.fits {
			if k.state != key.state {
				delete(cc.fits, k)
			}
		}
		if cc.fits == nil {
			cc.fits = map[fitKey]*sharedFit{}
		}
		sf = &sharedFit{done: make(chan struct{})}
		if len(cc.fits) < maxSharedFits {
			cc.fits[key] = sf
		}
	}
	cc.fitsMu.Unlock()
	if !found {
		// The snapshot is taken after the state was read, so it holds at
		// least the events counted in the key: a result is never older
		// than the state it is shared under.
		sf.res, sf.err = own()
		if sf.err != nil {
			cc.fitsMu.Lock()
			if cc.fits[key] == sf {
				delete(cc.fits, key)
			}
			cc.fitsMu.Unlock()
		}
		close(sf.done)
		return sf.res, sf.err
	}
	select {
	case <-sf.done:
	case <-ctx.Done():
		return fitOutcome{}, fmt.Errorf("the fit was cut short by the deadline while another entry's fit of the same Pod ran: %w", ctx.Err())
	}
	if sf.err != nil {
		return own()
	}
	return sf.res, nil
}

// fitOwn is fit on a snapshot of its own, not shared.
func (cc *clusterCache) fitOwn(fit func(*fitSnapshot) (fitOutcome, error)) (fitOutcome, error) {
	fs, err := cc.acquire()
	if err != nil {
		return fitOutcome{}, err
	}
	defer fs.release()
	return fit(fs)
}
