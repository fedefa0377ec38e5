package main

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"time"
)

// handlePprof serves Go's runtime profiles under /debug/pprof/ (the route
// prefix comes before it), for the profiles of large fleets that
// docs/scaling.md's "Performance" asks for. It is off unless
// --web.enable-pprof is given: a profile shows the exporter's internals and
// a CPU profile keeps a request busy for its duration. Like every path, it is behind
// --web.config.file's authentication; without that file it is served on
// loopback only (pprofUnprotected).
func handlePprof(mux *http.ServeMux) {
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", profileDeadline(pprof.Profile, 30*time.Second))
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", profileDeadline(pprof.Trace, time.Second))
}

// maxProfile bounds how long a profile or trace may keep its request (and
// its write deadline) open.
const maxProfile = 10 * time.Minute

// profileDeadline moves the write deadline of a CPU profile or trace past
// the time it records (?seconds=, def when absent, as net/http/pprof reads
// it). Every answer's deadline is otherwise the longest check plus
// writeGrace (writeDeadline), and a profile of the first two scrapes of a
// cold start (docs/scaling.md: "Cold start") runs longer: net/http/pprof
// cannot see a per-request deadline, records the whole profile and then has
// its answer cut, an empty reply.
func profileDeadline(h http.HandlerFunc, def time.Duration) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		d := def
		if s, err := strconv.ParseFloat(r.FormValue("seconds"), 64); err == nil && s > 0 {
			d = time.Duration(min(s, maxProfile.Seconds()) * float64(time.Second))
		}
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(d + writeGrace))
		h(w, r)
	}
}

// pprofUnprotected decides what --web.enable-pprof without
// --web.config.file means (docs/security.md: "pprof"): the profiles
// (cmdline among them) would be served to anyone who reaches the port.
// When every listen address is on loopback only the local host reaches
// them, which is how a profile is taken on a workstation: allowed, with a
// warning at startup. Otherwise, and with systemd socket activation (whose
// addresses the exporter does not choose), it is refused with an error
// naming both flags.
func pprofUnprotected(listen []string, systemdSocket bool) (warning string, err error) {
	if systemdSocket {
		return "", errors.New("--web.enable-pprof without --web.config.file with --web.systemd-socket: the profiles would be served unauthenticated on sockets the exporter does not choose; set --web.config.file (basic auth, TLS) or drop --web.enable-pprof")
	}
	for _, addr := range listen {
		if !loopbackAddress(addr) {
			return "", fmt.Errorf("--web.enable-pprof without --web.config.file on %s, which is not loopback: the profiles, the command line among them, would be served to anyone who reaches it; set --web.config.file (basic auth, TLS), listen on loopback only, or drop --web.enable-pprof", addr)
		}
	}
	return "--web.enable-pprof without --web.config.file: the profiles, the command line among them, are served unauthenticated to every local user (the listen addresses are loopback only)", nil
}

// loopbackAddress tells whether a listen address binds loopback only: an
// IP in 127.0.0.0/8 or ::1, or localhost. ":9877" and "0.0.0.0:9877" bind
// every interface.
func loopbackAddress(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
