package kubernetes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sync"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// watchHub shares the watch caches of schedule between the entries that
// reach the same API server with the same credentials: one Node and one
// Pod informer per cluster and identity, whatever the number of entries
// (one per proxy class). Each entry's watcher holds one reference to the
// set it reads; the set starts with the first reference (the first check
// that needs it) and stops when the last is released (its entries removed
// by a reload, or the exporter stopping). An entry that a reload
// rebuilds hands its reference to its successor (Checker.Adopt), so that a
// reload keeping the cluster keeps the caches: no relist.
//
// The kind's table holds one hub (Kind); a checker built alone by New has
// one of its own.
type watchHub struct {
	mu   sync.Mutex
	sets map[string]*sharedSet
}

type sharedSet struct {
	ws   *watchSet
	refs int
}

func newWatchHub() *watchHub { return &watchHub{sets: map[string]*sharedSet{}} }

// watchKey identifies an API server and the credentials a client reaches
// it with: what decides which Nodes and Pods the caches may hold. It is a
// digest, so the credentials themselves are not kept a second time.
func watchKey(cl *client) string {
	c := cl.watchCfg
	if c == nil {
		return "host\x00" + cl.host
	}
	h := sha256.New()
	for _, s := range []string{c.Host, c.APIPath, c.BearerToken, c.BearerTokenFile, c.Username, c.Password,
		c.CertFile, string(c.CertData), c.KeyFile, string(c.KeyData), c.CAFile, string(c.CAData),
		c.ServerName, fmt.Sprint(c.Insecure), c.Impersonate.UserName, c.Impersonate.UID,
		fmt.Sprint(c.Impersonate.Groups), fmt.Sprint(c.Impersonate.Extra), fmt.Sprint(c.ExecProvider), fmt.Sprint(c.AuthProvider)} {
		fmt.Fprintf(h, "%d:%s", len(s), s)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// acquire returns the set of key, starting it with cl when none runs, and
// counts one more reference to it.
func (h *watchHub) acquire(key string, logger *slog.Logger, cl *client) *watchSet {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.sets[key]
	if s == nil {
		s = &sharedSet{ws: startWatch(logger, cl)}
		h.sets[key] = s
	}
	s.refs++
	return s.ws
}

// release drops one reference to the set of key; the last stops it and
// returns it, for the caller to wait for (nil otherwise).
func (h *watchHub) release(key string) *watchSet {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.sets[key]
	if s == nil {
		return nil
	}
	s.refs--
	if s.refs > 0 {
		return nil
	}
	delete(h.sets, key)
	s.ws.cancel()
	return s.ws
}

// running is how many sets run, for tests.
func (h *watchHub) running() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.sets)
}

// waitStopped waits for the stopped sets' goroutines, at most until ctx
// ends.
func waitStopped(ctx context.Context, sets []*watchSet) error {
	for _, ws := range sets {
		select {
		case <-ws.done:
		case <-ctx.Done():
			return fmt.Errorf("watch of nodes and pods did not stop: %w", context.Cause(ctx))
		}
	}
	return nil
}

var _ provider.Adopter = (*Checker)(nil)

// Adopt takes over the watch caches' reference of the checker this one
// replaces on reload (its entry changed, its cluster may not have): the
// caches run on, and the first check finds them synced.
func (c *Checker) Adopt(old provider.Checker) {
	o, ok := old.(*Checker)
	if !ok || c.watch == nil || o.watch == nil {
		return
	}
	c.watch.adopt(o.watch)
}
