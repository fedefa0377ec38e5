package kvm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// The kept connection of each host: found, dialed through the dial queue,
// dropped, and handed over on reload (Adopt) or closed (Close).

// session returns the kept connection of h, or the one the host's dial
// makes: it queues that dial, or joins the one queued or running. When ctx
// ends first the dial goes on without this check, and the next check finds
// its connection. kept tells whether the session existed before; transient
// that the checker is closed, so the caller must close the session when
// done.
func (c *Checker) session(ctx context.Context, logger *slog.Logger, h *host) (s *session, kept, transient bool, err error) {
	if err := h.faulted(logger); err != nil {
		return nil, false, false, err
	}
	if s := h.current(logger); s != nil {
		return s, true, false, nil
	}
	j := c.queueDial(h, logger)
	if j != nil {
		select {
		case <-j.done:
		case <-ctx.Done():
			if j.started.Load() {
				return nil, false, false, fmt.Errorf("dialing; the dial goes on after this check, for at most dial_timeout (%s): %w", c.dialTimeout, context.Cause(ctx))
			}
			return nil, false, false, fmt.Errorf("waiting for a dial slot (max_concurrent_dials); the dial stays queued: %w", context.Cause(ctx))
		}
		if !errors.Is(j.err, errClosed) {
			if j.err == nil && j.logger != logger {
				logger.Debug("connected by the dial of an earlier check", "libvirtVersion", j.sess.version)
			}
			return j.sess, false, false, j.err
		}
	}
	// The checker was closed (reload, shutdown) before the dial could
	// run: this check dials on its own, for itself only.
	s, err = c.dial(ctx, logger, h.set)
	if err != nil {
		return nil, false, false, err
	}
	h.mu.Lock()
	h.connects++
	h.version = s.version
	h.mu.Unlock()
	return s, false, true, nil
}

// queueDial returns the dial of h queued or running, queueing one if there
// is none; nil when the checker is closed.
func (c *Checker) queueDial(h *host, logger *slog.Logger) *dialJob {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.job != nil {
		return h.job
	}
	j := &dialJob{h: h, failing: h.failedDials > 0, logger: logger, done: make(chan struct{})}
	if !c.dials.push(j) {
		return nil
	}
	h.job = j
	return j
}

// runDial dials for j in a dial worker, bound to dial_timeout and the
// checker's life but not to the check that queued it, keeps the session,
// and keeps count of the host's failed dials for its backoff. It tells the
// dial queue how the dial went, for its window.
func (c *Checker) runDial(j *dialJob) dialOutcome {
	start := time.Now()
	outcome := dialOutcome{kind: dialNeutral}
	// A dial worker is a goroutine of its own: a panic in it (the SSH or
	// libvirt client on a peer's bytes) is the host's Unknown, not the
	// process's end.
	var s *session
	err := provider.CatchPanic(func() (err error) {
		s, err = c.dial(c.ctx, j.logger, j.h.set)
		return err
	})
	h := j.h
	h.mu.Lock()
	switch {
	case c.ctx.Err() != nil:
		// Closed while dialing: says nothing about the host.
		if s != nil {
			j.logger.Debug(dropLogged, "why", "the checker was closed (reload or shutdown) while the connection was made")
			defer s.close()
		}
		s, err = nil, errClosed
	case err != nil:
		if !j.failing && dialTimedOutErr(err) {
			outcome.kind = dialTimedOut
		}
		var de *dialError
		if errors.As(err, &de) && de.Stage != stageMaterial {
			// Only a dial that went to the network took a slot; a
			// broken key file is cheap to look at again.
			h.failedDials++
			if d := backoffDelay(h.failedDials); d > 0 {
				h.notBefore = time.Now().Add(d)
				j.logger.Debug("dials keep failing, backing off", "failedDials", h.failedDials, "retryIn", d)
			}
		}
	default:
		h.failedDials, h.notBefore = 0, time.Time{}
		h.connects++
		h.version = s.version
		h.keep(s)
		j.logger.Debug("connected", "libvirtVersion", s.version)
		outcome = dialOutcome{kind: dialEstablished, took: time.Since(start)}
	}
	h.mu.Unlock()
	c.endDial(j, s, err)
	return outcome
}

// dialTimedOutErr tells whether a dial ran out of time: dial_timeout, the
// server's silence, or a TCP connect that timed out.
func dialTimedOutErr(err error) bool {
	var silent *silentServerError
	return errors.Is(err, &dialTimeoutError{}) || errors.As(err, &silent) || errors.Is(err, os.ErrDeadlineExceeded)
}

// endDial hands j's outcome to the checks waiting for it.
func (c *Checker) endDial(j *dialJob, s *session, err error) {
	h := j.h
	h.mu.Lock()
	if h.job == j {
		h.job = nil
	}
	h.mu.Unlock()
	j.sess, j.err = s, err
	close(j.done)
}

// current returns the kept session of h, dropping it when its transport is
// already known to be gone.
func (h *host) current(logger *slog.Logger) *session {
	h.mu.Lock()
	s := h.sess
	h.mu.Unlock()
	if s == nil {
		return nil
	}
	if s.isDead() {
		h.drop(logger, s, "the connection ended since the last check (closed by the host, sshd or the network)", nil)
		return nil
	}
	return s
}

// faulted returns, once, why the peer closed h's kept connection between
// checks by sending what no call asked for (drainedChannel): that check
// reports the lost connection, the next one redials. The session was let go
// when it happened (host.keep); a session flooded before it was kept is
// dropped here.
func (h *host) faulted(logger *slog.Logger) error {
	h.mu.Lock()
	s, err := h.sess, h.fault
	h.fault = nil
	h.mu.Unlock()
	if err == nil && s != nil && s.isDead() {
		err = s.faultErr()
		if err != nil {
			h.drop(logger, s, "the host sent what no libvirt call asked for", err)
		}
	}
	if err == nil {
		return nil
	}
	logger.Info(dropLogged, "why", "the host sent what no libvirt call asked for", "err", err)
	return fmt.Errorf("kept connection lost: %w", err)
}

// dropLogged is the message of every dropped connection: each connection
// the exporter establishes is either kept or dropped with this line and its
// reason (docs/scaling.md: "Performance").
const dropLogged = "kept connection dropped"

// drop forgets s if it is still the kept session of h, closes it, and logs
// why: at info, or at debug when the host's last connection went the same
// way and no connection has outlived a check since.
func (h *host) drop(logger *slog.Logger, s *session, why string, err error) {
	h.mu.Lock()
	if h.sess == s {
		h.sess = nil
	}
	repeat := h.lastDrop == why
	h.lastDrop = why
	connects := h.connects
	h.mu.Unlock()
	s.close()
	level := slog.LevelInfo
	if repeat {
		level = slog.LevelDebug
	}
	attrs := []any{"why", why, "connects", connects}
	if err != nil {
		attrs = append(attrs, "err", err)
	}
	logger.Log(context.Background(), level, dropLogged, attrs...)
}

// callFailed classifies the failure of a call on s that libvirt did not
// answer with an error the caller knows: the end of ctx is Timeout (the
// connection is dropped only when the call outlived its grace, see call),
// another libvirt error keeps the connection (Unknown), and anything else
// is a lost connection, which is dropped so that the next check redials.
func (h *host) callFailed(ctx context.Context, logger *slog.Logger, s *session, err error) (provider.Reason, error) {
	if provider.Ended(ctx) {
		if s.isDead() {
			h.drop(logger, s, "a libvirt call was still unanswered after the check's deadline and its grace", err)
		}
		return provider.ReasonTimeout, err
	}
	if libvirtError(err) {
		// libvirtd answered: the connection is fine.
		return provider.ReasonUnknown, err
	}
	h.drop(logger, s, "the connection broke during a libvirt call", err)
	return ReasonLibvirtConnectionLost, err
}

// Close closes every kept connection. Checks still running finish on their
// sessions, which they then close themselves.
func (c *Checker) Close() error {
	// The dials in flight stop, the queued ones end unstarted; only then
	// are the sessions final.
	c.cancel()
	c.dials.close(func(j *dialJob, err error) { c.endDial(j, nil, err) })
	var wg sync.WaitGroup
	closed := 0
	for _, h := range c.liveHosts() {
		h.mu.Lock()
		s := h.sess
		h.sess = nil
		h.mu.Unlock()
		if s != nil {
			closed++
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.goodbye(c.logger.With("target", h.name))
			}()
		}
	}
	wg.Wait()
	if closed > 0 {
		// One line for the whole entry: every kept connection of a reload
		// or a shutdown ends here, on purpose.
		c.logger.Debug("kept connections closed: the checker was closed (reload or shutdown)", "connections", closed)
	}
	return nil
}

// Adopt takes over the kept connections of hosts whose connection settings
// did not change (the pool may have), and carries every same-named host's
// connects counter and libvirt version over so the counter does not reset on
// reload.
func (c *Checker) Adopt(old provider.Checker) {
	o, ok := old.(*Checker)
	if !ok || o == nil || o == c {
		return
	}
	// Only the old hosts whose state was made have anything to hand over.
	for _, oh := range o.liveHosts() {
		i := c.find(oh.name)
		if i < 0 {
			continue
		}
		h := c.hostAt(i)
		oh.mu.Lock()
		var s *session
		if oh.set == h.set {
			s, oh.sess = oh.sess, nil
		}
		connects, version := oh.connects, oh.version
		oh.mu.Unlock()

		h.mu.Lock()
		h.connects += connects
		if h.version == "" && oh.set == h.set {
			h.version = version
		}
		if h.sess == nil && s != nil {
			h.keep(s)
			s = nil
		}
		h.mu.Unlock()
		if s != nil {
			logger := c.logger.With("target", h.name)
			logger.Info(dropLogged, "why", "its connection settings changed on reload")
			s.goodbye(logger)
		}
	}
}
