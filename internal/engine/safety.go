package engine

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/egress-proxies/provider_health_exporter/internal/exposition"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

// What a provider sends must not take the process down: a panic while
// building a verdict or its metrics becomes that target's Unknown, a value
// the client library would refuse as a label is left out, and every
// provider-supplied string is cut where it enters a verdict, details or a
// log line (docs/security.md: "Strings, labels and pages"). The framework
// does all three itself, so that a kind that forgets is still covered.

// MaxDetails is the most entries of a target's details a status page
// shows; beyond it the rest are counted under one key.
const MaxDetails = 256

// Details returns the details of f for /api/v1/status and the status
// page: keys and values cut like every provider string, at most
// MaxDetails of them (the first by key), and a panic in f.Details as the
// "error" entry instead of a failed page. nil for nil Facts.
func Details(f provider.Facts) (out map[string]string) {
	if f == nil {
		return nil
	}
	defer func() {
		if rec := recover(); rec != nil {
			out = map[string]string{"error": provider.BoundString(fmt.Sprintf("the provider's details panicked: %v", rec))}
		}
	}()
	d := f.Details()
	if d == nil {
		return nil
	}
	keys := slices.Sorted(maps.Keys(d))
	out = make(map[string]string, min(len(keys), MaxDetails+1))
	for i, k := range keys {
		if i == MaxDetails {
			out["…"] = strconv.Itoa(len(keys)-MaxDetails) + " more details left out"
			break
		}
		out[provider.BoundLabelString(k)] = provider.BoundString(d[k])
	}
	return out
}

// keptFacts asks a FactKeeper for a target's facts; a panic in it leaves
// the target without facts rather than failing the page or scrape.
func keptFacts(k provider.FactKeeper, target string) (f provider.Facts) {
	defer func() {
		if recover() != nil {
			f = nil
		}
	}()
	return k.Facts(target)
}

// settleFacts collects the metrics of a fresh verdict's Facts into memo,
// where the exposition finds them, in the check's own goroutine
// (exposition.CollectFacts): a Collect that panics turns the verdict into
// Unknown with the panic's text, for the status page and every scrape
// alike, instead of a verdict whose metrics cannot be built.
func settleFacts(v provider.Verdict, memo *exposition.FactsMemo, name, target string, logger *slog.Logger) provider.Verdict {
	if v.Facts == nil {
		return v
	}
	panicked := exposition.CollectFacts(memo, name, target, v)
	if panicked == "" {
		return v
	}
	logger.Error("building the verdict's metrics panicked", "panic", panicked, "verdict", v.Reason)
	return exposition.PanicVerdict(v, "building the metrics of the verdict", panicked)
}

// boundAttr cuts the provider text a log attribute may carry: strings,
// errors and byte slices, in groups too. Other values are formatted by the
// handler as they are.
func boundAttr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		if s := v.String(); needsBound(s) {
			return slog.String(a.Key, provider.BoundString(s))
		}
	case slog.KindGroup:
		g := v.Group()
		out := make([]slog.Attr, len(g))
		for i, ga := range g {
			out[i] = boundAttr(ga)
		}
		return slog.Attr{Key: a.Key, Value: slog.GroupValue(out...)}
	case slog.KindAny:
		switch x := v.Any().(type) {
		case error:
			if x != nil {
				return slog.String(a.Key, provider.BoundString(x.Error()))
			}
		case []byte:
			if needsBound(string(x)) {
				return slog.String(a.Key, provider.BoundString(string(x)))
			}
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}

func needsBound(s string) bool {
	return len(s) > provider.MaxProviderString || !utf8.ValidString(s)
}

// boundRecord is r with its message and attributes cut (boundAttr). A
// record that needs nothing cut is returned as it is.
func boundRecord(r slog.Record) slog.Record {
	need := needsBound(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		switch a.Value.Kind() {
		case slog.KindString:
			need = need || needsBound(a.Value.String())
		case slog.KindAny:
			switch a.Value.Any().(type) {
			case error, []byte:
				need = true
			}
		case slog.KindGroup, slog.KindLogValuer:
			need = true
		}
		return !need
	})
	if !need {
		return r
	}
	out := slog.NewRecord(r.Time, r.Level, provider.BoundString(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(boundAttr(a))
		return true
	})
	return out
}
