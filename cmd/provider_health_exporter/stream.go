package main

import (
	"io"
	"net/http"
	"time"
)

// maxStreamTime is the longest a streamed answer (the status pages, /sd,
// /config, a debug probe) may take to write, however steadily its client
// reads: a thousand targets' status of 16 MB, forty at once on a loaded
// machine, take more than the write deadline of a scrape, but a client
// reading a few bytes now and then must not hold a --web.max-requests slot
// for hours.
const maxStreamTime = 5 * time.Minute

// streamWriter is w for an answer written piece by piece: the write
// deadline (newServer's, the longest check timeout plus writeGrace) moves
// forward by writeGrace each time a piece is taken, up to maxStreamTime
// after the request began. A client that stops reading is cut off
// writeGrace after its last read, holding no more than the connection's
// write buffer; one that keeps reading gets the whole answer
// (docs/security.md: "Strings, labels and pages").
type streamWriter struct {
	w        io.Writer
	rc       *http.ResponseController
	deadline time.Time // the one in force
	end      time.Time // begin + maxStreamTime
}

// streaming wraps w of a request that began at begin, whose write deadline
// the server set to first.
func streaming(w http.ResponseWriter, begin time.Time, first time.Duration) *streamWriter {
	return &streamWriter{w: w, rc: http.NewResponseController(w), deadline: begin.Add(first), end: begin.Add(maxStreamTime)}
}

func (s *streamWriter) Write(b []byte) (int, error) {
	n, err := s.w.Write(b)
	if err != nil {
		return n, err
	}
	// Once a second at most: a page writes a piece per target.
	next := time.Now().Add(writeGrace)
	if next.After(s.end) {
		next = s.end
	}
	if next.Sub(s.deadline) > time.Second {
		if err := s.rc.SetWriteDeadline(next); err == nil {
			s.deadline = next
		}
	}
	return n, nil
}

// stream is streaming for a request of x that began at begin.
func (x *exporter) stream(w http.ResponseWriter, begin time.Time) *streamWriter {
	return streaming(w, begin, longestTimeout(x.config())+writeGrace)
}
