package kvm

import (
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// dialJob is one dial of one host (docs/configuration.md: "KVM"). The first check that
// needs a connection queues it; every check of the host joins it until it
// ends. It runs in a dial worker, not in the check, so a dial that a scrape
// started goes on after that scrape's deadline, bounded by dial_timeout,
// and the next scrape finds the connection up instead of starting over:
// that is what lets a large fleet's cold start converge.
type dialJob struct {
	h *host
	// failing marks a host whose last dial failed: it waits behind the
	// others and may hold only some of the slots (dialQueue).
	failing bool
	// logger is that of the check that queued the job, so the stages show
	// in its debug log; checks that joined log only the outcome.
	logger *slog.Logger

	started atomic.Bool   // a worker is dialing it
	done    chan struct{} // closed once sess or err is set
	sess    *session
	err     error
}

// errClosed ends the jobs of a checker that was closed (reload, shutdown)
// before they could dial; a check still waiting dials on its own.
var errClosed = errors.New("checker closed")

// dialOutcome is what a finished dial says about how many dials may run at
// once (dialQueue's window).
type dialOutcome struct {
	kind dialKind
	took time.Duration // of an established dial
}

type dialKind int

const (
	dialNeutral     dialKind = iota // failed for a reason of the host's (refused, key, auth...), or closed
	dialEstablished                 // the connection is up
	dialTimedOut                    // a fresh host's dial ran out of time
)

// The dial window (docs/scaling.md: "Cold start"): how many dials may run at
// once, between startWindow (or max_concurrent_dials, if lower) and
// max_concurrent_dials. It starts there and moves with what dials take:
//   - a dial established quickly, within slowFactor/2 times the quickest
//     dial this entry has made (and within a quarter of dial_timeout),
//     widens it by one: the network, the hosts and the exporter keep up;
//   - a dial established slowly, beyond slowFactor times the quickest,
//     narrows it by one: more dials at once would only make each slower
//     (an exporter short of CPU, a congested link), and would take the CPU
//     the first checks of the hosts already connected need;
//   - a dial of a host not known to fail that times out halves it: the
//     network or the hosts may not keep up, or hosts hang, which the window
//     at its start has always coped with.
//
// It never goes below where it started.
const (
	startWindow = 16
	slowFactor  = 4
	// fastDialShare: a dial is never quick beyond dial_timeout/fastDialShare,
	// the quarter a server has to send its identification.
	fastDialShare = 4
)

// dialQueue runs the dials of one kvm entry, at most window at a time, and
// never more than max_concurrent_dials. Hosts whose last dial failed go
// after every other waiting host and hold at most half the window together,
// so hosts that keep failing (a host that accepts TCP and never speaks
// holds its slot for a quarter of dial_timeout) can never take every slot
// from the healthy ones. Workers exist only while there is work: an idle
// entry has no dial goroutine.
type dialQueue struct {
	most, floor int                        // max_concurrent_dials; the window's least
	quickLimit  time.Duration              // dial_timeout/fastDialShare
	run         func(*dialJob) dialOutcome // dials and ends the job

	mu               sync.Mutex
	window           int
	quickest         time.Duration // of the dials established so far
	fresh, failing   []*dialJob    // waiting, oldest first
	running          int           // workers, each dialing one job
	runningFailing   int           // of which for failing hosts
	closed           bool
	workers          sync.WaitGroup
	queuedTotal      atomic.Int64 // jobs ever queued, for tests
	maxRunning       int          // the most workers at once, for tests and the benchmark
	maxFailingAtOnce int          // the most failing jobs at once, for tests
	maxWindow        int          // the widest the window was, for the benchmark
	shrinks          int          // times the window was halved, for the benchmark
}

func newDialQueue(most int, dialTimeout time.Duration, run func(*dialJob) dialOutcome) *dialQueue {
	floor := min(startWindow, most)
	return &dialQueue{most: most, floor: floor, quickLimit: dialTimeout / fastDialShare, window: floor, maxWindow: floor, run: run}
}

// failingMax is how many slots hosts whose last dial failed may hold: half
// the window, but at least one, so a failing host still gets a slot when
// nobody else waits. Called with mu held.
func (q *dialQueue) failingMax() int { return max(1, q.window/2) }

// adapt moves the window after a dial. Called with mu held.
func (q *dialQueue) adapt(o dialOutcome) {
	switch o.kind {
	case dialEstablished:
		if q.quickest == 0 || o.took < q.quickest {
			q.quickest = o.took
		}
		switch {
		case o.took <= q.quickest*slowFactor/2 && o.took < q.quickLimit:
			q.window = min(q.most, q.window+1)
			q.maxWindow = max(q.maxWindow, q.window)
		case o.took > q.quickest*slowFactor:
			q.window = max(q.floor, q.window-1)
		}
	case dialTimedOut:
		if w := max(q.floor, q.window/2); w < q.window {
			q.window = w
			q.shrinks++
		}
	}
}

// push queues j; it is started at once when a slot is free. It reports
// false, and leaves j alone, when the queue is closed.
func (q *dialQueue) push(j *dialJob) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return false
	}
	q.queuedTotal.Add(1)
	if j.failing {
		q.failing = append(q.failing, j)
	} else {
		q.fresh = append(q.fresh, j)
	}
	q.fill()
	return true
}

// take removes the next job a free slot may run: the oldest fresh one, else
// the oldest failing one while failing hosts hold fewer than failingMax()
// slots. Called with mu held.
func (q *dialQueue) take() *dialJob {
	var j *dialJob
	switch {
	// The taken slot is cleared: the queue's backing array would
	// otherwise keep the job, and through it the session its dial made,
	// after the session is dropped.
	case len(q.fresh) > 0:
		j, q.fresh[0], q.fresh = q.fresh[0], nil, q.fresh[1:]
	case len(q.failing) > 0 && q.runningFailing < q.failingMax():
		j, q.failing[0], q.failing = q.failing[0], nil, q.failing[1:]
		q.runningFailing++
		q.maxFailingAtOnce = max(q.maxFailingAtOnce, q.runningFailing)
	}
	return j
}

// fill starts workers while slots are free and jobs may run. Called with mu
// held.
func (q *dialQueue) fill() {
	for q.running < q.window {
		j := q.take()
		if j == nil {
			return
		}
		q.running++
		q.maxRunning = max(q.maxRunning, q.running)
		q.workers.Add(1)
		go q.work(j)
	}
}

// work runs jobs until none may run, then ends; a worker beyond a window
// that shrank ends too.
func (q *dialQueue) work(j *dialJob) {
	defer q.workers.Done()
	for j != nil {
		j.started.Store(true)
		o := q.run(j)
		q.mu.Lock()
		q.adapt(o)
		if j.failing {
			q.runningFailing--
		}
		j = nil
		if q.running <= q.window {
			j = q.take()
		}
		if j == nil {
			q.running--
		}
		q.fill() // the window may have grown, or a failing slot come free
		q.mu.Unlock()
	}
}

// close ends the waiting jobs with errClosed and waits for the running
// ones, which the caller has told to stop (the checker's context).
func (q *dialQueue) close(end func(*dialJob, error)) {
	q.mu.Lock()
	q.closed = true
	waiting := make([]*dialJob, 0, len(q.fresh)+len(q.failing))
	waiting = append(append(waiting, q.fresh...), q.failing...)
	q.fresh, q.failing = nil, nil
	q.mu.Unlock()
	for _, j := range waiting {
		end(j, errClosed)
	}
	q.workers.Wait()
}
