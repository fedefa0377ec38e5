package kvm

import (
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
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

// dialQueue runs the dials of one kvm entry, at most slots at a time
// (max_concurrent_dials). Hosts whose last dial failed go after every other
// waiting host and hold at most failingMax slots together, so hosts that
// keep failing (a host that accepts TCP and never speaks holds its slot for
// dial_timeout) can never take every slot from the healthy ones. Workers
// exist only while there is work: an idle entry has no dial goroutine.
type dialQueue struct {
	slots      int
	failingMax int
	run        func(*dialJob) // dials and ends the job

	mu               sync.Mutex
	fresh, failing   []*dialJob // waiting, oldest first
	running          int        // workers, each dialing one job
	runningFailing   int        // of which for failing hosts
	closed           bool
	workers          sync.WaitGroup
	queuedTotal      atomic.Int64 // jobs ever queued, for tests
	maxRunning       int          // the most workers at once, for tests
	maxFailingAtOnce int          // the most failing jobs at once, for tests
}

func newDialQueue(slots int, run func(*dialJob)) *dialQueue {
	// Half the slots, but at least one: with a single slot a failing host
	// still gets it when nobody else waits.
	return &dialQueue{slots: slots, failingMax: max(1, slots/2), run: run}
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
// the oldest failing one while failing hosts hold fewer than failingMax
// slots. Called with mu held.
func (q *dialQueue) take() *dialJob {
	var j *dialJob
	switch {
	case len(q.fresh) > 0:
		j, q.fresh = q.fresh[0], q.fresh[1:]
	case len(q.failing) > 0 && q.runningFailing < q.failingMax:
		j, q.failing = q.failing[0], q.failing[1:]
		q.runningFailing++
		q.maxFailingAtOnce = max(q.maxFailingAtOnce, q.runningFailing)
	}
	return j
}

// fill starts workers while slots are free and jobs may run. Called with mu
// held.
func (q *dialQueue) fill() {
	for q.running < q.slots {
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

// work runs jobs until none may run, then ends.
func (q *dialQueue) work(j *dialJob) {
	defer q.workers.Done()
	for j != nil {
		j.started.Store(true)
		q.run(j)
		q.mu.Lock()
		if j.failing {
			q.runningFailing--
		}
		if j = q.take(); j == nil {
			q.running--
		}
		q.fill() // a failing slot may have come free for another worker
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
