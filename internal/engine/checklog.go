package engine

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"time"
)

// CheckLog is the debug log of one check, what /probe?debug=true shows: the
// lines a slog.TextHandler at debug level writes of what the check logged.
// The records are kept as they were logged and formatted only when String
// is called: most checks' logs are never read, and formatting every
// check's lines cost more than the check itself on a kept connection.
// Values are formatted when the log is read, so what a check logs must not
// change after it logged it (strings, numbers, errors do not).
type CheckLog struct {
	mu     sync.Mutex
	recs   []logRecord
	closed bool // the check is done: later records are not its log
	text   *string
}

type logRecord struct {
	h *captureHandler
	r slog.Record
}

// String formats the log; "" for a nil CheckLog (a made-up verdict).
func (l *CheckLog) String() string {
	if l == nil {
		return ""
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.text != nil {
		return *l.text
	}
	var buf bytes.Buffer
	base := slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})
	made := map[*captureHandler]slog.Handler{}
	var handlerOf func(h *captureHandler) slog.Handler
	handlerOf = func(h *captureHandler) slog.Handler {
		if h == nil {
			return base
		}
		if th, ok := made[h]; ok {
			return th
		}
		th := handlerOf(h.parent)
		if h.group != "" {
			th = th.WithGroup(h.group)
		} else {
			th = th.WithAttrs(h.attrs)
		}
		made[h] = th
		return th
	}
	for _, rec := range l.recs {
		_ = handlerOf(rec.h).Handle(context.Background(), rec.r)
	}
	text := buf.String()
	if l.closed {
		l.text = &text
	}
	return text
}

func (l *CheckLog) add(h *captureHandler, r slog.Record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.recs = append(l.recs, logRecord{h, r})
	}
}

func (l *CheckLog) close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
}

// handler returns the handler of a check's logger: records go to main
// (the engine's logger) as main decides, and every record at debug level
// or above to the log.
func (l *CheckLog) handler(main slog.Handler, attrs ...any) *captureHandler {
	root := &captureHandler{main: main, dst: l, attrs: make([]slog.Attr, 0, len(attrs)/2)}
	// Key and value pairs, converted as slog would, without a Record: this
	// runs once per check, a thousand times in a scrape of a large fleet.
	for i := 0; i < len(attrs); i += 2 {
		k, ok := attrs[i].(string)
		if !ok || i+1 == len(attrs) {
			root.attrs = append(root.attrs, slog.Any("!BADKEY", attrs[i]))
			i--
			continue
		}
		root.attrs = append(root.attrs, slog.Any(k, attrs[i+1]))
	}
	return root
}

// captureHandler is one node of a check logger's With and WithGroup
// chain: attrs or group, applied on top of parent's when the log is
// formatted. main already has them.
type captureHandler struct {
	main   slog.Handler
	dst    *CheckLog
	parent *captureHandler
	attrs  []slog.Attr
	group  string
}

func (h *captureHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return level >= slog.LevelDebug || h.main.Enabled(ctx, level)
}

func (h *captureHandler) Handle(ctx context.Context, r slog.Record) error {
	// What a check logs is cut here, for every kind: an error or answer
	// of several megabytes would otherwise be kept in the check's log and
	// written to the engine's at every change (provider.BoundString).
	r = boundRecord(r)
	if r.Level >= slog.LevelDebug {
		h.dst.add(h, r.Clone())
	}
	if h.main.Enabled(ctx, r.Level) {
		if err := h.main.Handle(ctx, r); err != nil {
			return fmt.Errorf("engine log: %w", err)
		}
	}
	return nil
}

func (h *captureHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	if len(attrs) == 0 {
		return h
	}
	return &captureHandler{main: h.main.WithAttrs(attrs), dst: h.dst, parent: h, attrs: attrs}
}

func (h *captureHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return &captureHandler{main: h.main.WithGroup(name), dst: h.dst, parent: h, group: name}
}

// log is slog.Logger.Log for the engine's own lines, without the cost of
// finding the caller when only the check's log, which does not show it,
// takes the record.
func (h *captureHandler) log(ctx context.Context, level slog.Level, msg string, args ...any) {
	var pc uintptr
	if h.main.Enabled(ctx, level) {
		var pcs [1]uintptr
		runtime.Callers(2, pcs[:])
		pc = pcs[0]
	}
	r := slog.NewRecord(time.Now(), level, msg, pc)
	r.Add(args...)
	_ = h.Handle(ctx, r)
}
