package main

import (
	"net/http"
	"net/http/pprof"
)

// handlePprof serves Go's runtime profiles under /debug/pprof/ (the route
// prefix comes before it), for the profiles of large fleets that
// docs/scaling.md's "Performance" asks for. It is off unless
// --web.enable-pprof is given: a profile shows the exporter's internals and
// a CPU profile keeps a request busy for its duration. Like every path, it is behind
// --web.config.file's authentication.
func handlePprof(mux *http.ServeMux) {
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
}
