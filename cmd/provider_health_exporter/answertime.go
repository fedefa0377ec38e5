package main

import (
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/egress-proxies/provider_health_exporter/internal/engine"
)

// answer serves the results and remembers how long that took for the
// next request of its shape.
func (x *exporter) answer(w http.ResponseWriter, r *http.Request, results []engine.ProviderResult, self prometheus.Gatherer, shape string) {
	begin := time.Now()
	x.serveResults(w, r, results, self)
	x.answers.observe(shape, time.Since(begin))
}

// answerTimes remembers, per request shape, how long the last answer took
// to build and write after the checks: the next request of that shape
// has its checks end that much earlier (twice that, for the jitter of a
// loaded machine; the engine takes at most a quarter of the budget), so
// that its answer, and not only its checks, is done within the budget
// (docs/configuration.md: "Timeouts").
type answerTimes struct {
	mu   sync.Mutex
	last map[string]time.Duration
}

// maxAnswerShapes bounds what clients can make the exporter remember: a
// query string is theirs to vary.
const maxAnswerShapes = 1024

// answerShape is what decides the cost of an answer: what is checked
// (path and query) and how it is encoded (Accept, Accept-Encoding).
func answerShape(r *http.Request) string {
	return r.URL.Path + "?" + r.URL.RawQuery + "\n" + r.Header.Get("Accept") + "\n" + r.Header.Get("Accept-Encoding")
}

func (a *answerTimes) reserve(shape string) time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	return 2 * a.last[shape]
}

func (a *answerTimes) observe(shape string, d time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.last[shape]; !ok && len(a.last) >= maxAnswerShapes {
		a.last = nil // forget them all: the shapes in use come back at their next request
	}
	if a.last == nil {
		a.last = map[string]time.Duration{}
	}
	a.last[shape] = d
}
