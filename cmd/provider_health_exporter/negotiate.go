package main

import (
	"net/http"
	"strconv"
	"strings"
)

// acceptsGzip tells whether the answer is gzipped: the choice promhttp
// makes between identity and gzip, the first of them with the highest q
// in Accept-Encoding, identity when none is acceptable.
func acceptsGzip(h http.Header) bool {
	best, bestQ := "", -1.0
	for _, offer := range []string{"identity", "gzip"} {
		for _, v := range h.Values("Accept-Encoding") {
			for spec := range strings.SplitSeq(v, ",") {
				value, params, _ := strings.Cut(spec, ";")
				value = strings.TrimSpace(value)
				q := 1.0
				if params = strings.TrimSpace(params); params != "" {
					qs, ok := strings.CutPrefix(params, "q=")
					f, err := strconv.ParseFloat(strings.TrimSpace(qs), 64)
					if !ok || err != nil || f < 0 || f > 1 {
						continue
					}
					q = f
				}
				if value != "" && q > bestQ && (value == "*" || value == offer) {
					best, bestQ = offer, q
				}
			}
		}
	}
	return best == "gzip" && bestQ > 0
}
