package provider

import (
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// What a provider runs must not take the process down: the engine
// recovers a panic in Check, and a checker recovers those of the
// goroutines it starts with CatchPanic; the metrics a Facts makes go
// through ConstMetric, which refuses what the client library would panic
// on (docs/security.md: "Strings, labels and pages").

// PanicError is a panic recovered by CatchPanic.
type PanicError struct {
	// Value is the panic's value as text, bounded (BoundString).
	Value string
	// Stack is where it panicked, for the log.
	Stack string
}

func (e *PanicError) Error() string { return "panic: " + e.Value }

// CatchPanic runs f and returns a panic in it as a *PanicError. A
// checker's own goroutines (concurrent requests of one check) run their
// work through it: the engine recovers a panic in Check itself, but not in
// a goroutine Check started, and an unrecovered panic ends the process.
func CatchPanic(f func() error) (err error) {
	defer func() {
		if rec := recover(); rec != nil {
			err = &PanicError{Value: BoundString(fmt.Sprint(rec)), Stack: string(debug.Stack())}
		}
	}()
	return f()
}

// ConstMetric is prometheus.NewConstMetric for metrics made of provider
// data, never MustNewConstMetric: a metric the client library refuses (a
// label value that is not valid UTF-8, a wrong number of labels) becomes
// an invalid metric, which the exposition leaves out with a bounded log
// line, instead of a panic.
func ConstMetric(desc *prometheus.Desc, typ prometheus.ValueType, value float64, labels ...string) prometheus.Metric {
	m, err := prometheus.NewConstMetric(desc, typ, value, labels...)
	if err != nil {
		return prometheus.NewInvalidMetric(desc, errors.New(BoundString(err.Error())))
	}
	return m
}
