package kvm

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// Call deadlines: an SSH channel has no deadlines, so a libvirt call is
// bounded by closing its session when the check's context ends (bound),
// and a check's call on a kept connection gets a short grace past the
// deadline before its connection is taken for wedged (call).

// bound runs fn, a call that takes no context, and closes the session when
// ctx ends first: an SSH channel has no deadlines (channelConn), so closing
// the session is what ends a call waiting for its reply. It returns ctx's error when ctx ended,
// whatever fn said, because the session is then gone.
func (s *session) bound(ctx context.Context, fn func() error) error {
	stop := context.AfterFunc(ctx, s.close)
	err := fn()
	if !stop() {
		s.close() // waits for the close started by AfterFunc
		if err == nil {
			err = errors.New("session closed")
		}
		return fmt.Errorf("%w: %w", context.Cause(ctx), err)
	}
	return err
}

// lateAnswerGrace is how long a check's libvirt call may go on past the
// check's deadline before its connection is closed. The verdict is Timeout
// at the deadline either way; the grace only decides whether the connection
// is kept. A libvirtd that answers a little late (a busy host, or the
// exporter itself busy dialing a fleet at a cold start) keeps its
// connection, instead of costing a redial; one that does not answer within
// the grace is taken for wedged. It is well within the engine's
// AbandonGrace, so the check still returns before it is abandoned.
const lateAnswerGrace = provider.AbandonGrace / 2

// call runs fn, a libvirt call for a check bound to ctx, on s (bound's
// counterpart for checks on a kept connection). When ctx has ended by the
// time fn returns, call returns ctx's error whatever fn said; the session is
// closed only if fn has not returned lateAnswerGrace after ctx's deadline
// (after its end, for a context without one). Callers tell the two apart
// with isDead.
func (s *session) call(ctx context.Context, fn func() error) error {
	w := &lateCall{s: s, grace: s.grace}
	if w.grace <= 0 {
		w.grace = lateAnswerGrace
	}
	var stop func() bool
	if d, ok := ctx.Deadline(); ok {
		// One timer at the deadline plus the grace: registering with the
		// context (context.AfterFunc) cost several times more, at one call
		// per host and scrape.
		w.timer = time.AfterFunc(time.Until(d)+w.grace, w.expire)
	} else {
		stop = context.AfterFunc(ctx, w.arm)
	}
	err := fn()
	if stop != nil {
		stop()
	}
	if w.finish() {
		s.close() // waits for the close the grace timer started
		if err == nil {
			err = errors.New("session closed")
		}
		return fmt.Errorf("%w: no answer within %s after it, connection closed: %w", endedCause(ctx), w.grace, err)
	}
	switch {
	case !provider.Ended(ctx):
		return err
	case err != nil:
		return fmt.Errorf("%w: %w", endedCause(ctx), err)
	}
	return fmt.Errorf("%w: libvirtd answered after it; the connection is kept", endedCause(ctx))
}

// endedCause is why ctx ended: its cause, or DeadlineExceeded when its
// deadline has passed but its timer has not fired yet, as happens on a
// loaded machine (provider.Ended).
func endedCause(ctx context.Context) error {
	if err := context.Cause(ctx); err != nil {
		return err
	}
	return context.DeadlineExceeded
}

// lateCall closes a session whose call goes on lateAnswerGrace past the
// deadline (or the end) of its context.
type lateCall struct {
	s      *session
	grace  time.Duration
	mu     sync.Mutex
	done   bool // the call returned
	closed bool // the grace ran out first
	timer  *time.Timer
}

// arm starts the grace; called when a context without a deadline ends.
func (w *lateCall) arm() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.timer = time.AfterFunc(w.grace, w.expire)
	}
}

func (w *lateCall) expire() {
	w.mu.Lock()
	expired := !w.done
	w.closed = expired
	w.mu.Unlock()
	if expired {
		w.s.close()
	}
}

// finish marks the call returned and tells whether the grace had run out.
func (w *lateCall) finish() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done = true
	if w.timer != nil && !w.closed {
		w.timer.Stop()
	}
	return w.closed
}
