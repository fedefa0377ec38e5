// Package redact is the one step an address goes through before the
// exporter shows it: as the address label of target_info, in
// /api/v1/status and on the status page, and in /config
// (docs/security.md).
package redact

import (
	"net/url"
	"strings"
)

// Mask replaces each query value of a redacted URL.
const Mask = "xxxxx"

// URL is s with what may be a secret removed when s is a URL with a host:
// the userinfo (user and password) dropped, every query value replaced by
// Mask (a token or signature is often one) and the fragment dropped. Any
// other string (host:port, a path, projects/ID) is returned unchanged, as
// is a URL without any of these.
func URL(s string) string {
	if !strings.Contains(s, "://") {
		// Neither url.Parse nor byText finds a host without it; and a
		// fleet's 100,000 host:port addresses are redacted at every load.
		return s
	}
	u, err := url.Parse(s)
	if err != nil {
		// Not a URL Go can read (a bad escape), but maybe one to a
		// person: cut it the same way by its text.
		return byText(s)
	}
	if u.Scheme == "" || u.Host == "" || (u.User == nil && u.RawQuery == "" && u.Fragment == "") {
		return s
	}
	u.User, u.Fragment, u.RawFragment = nil, "", ""
	u.RawQuery = maskQuery(u.RawQuery)
	return u.String()
}

// maskQuery replaces the value of each parameter of a raw query.
func maskQuery(q string) string {
	if q == "" {
		return ""
	}
	params := strings.Split(q, "&")
	for i, p := range params {
		if k, _, ok := strings.Cut(p, "="); ok {
			params[i] = k + "=" + Mask
		}
	}
	return strings.Join(params, "&")
}

// byText redacts a scheme://authority/... string url.Parse refused.
func byText(s string) string {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return s
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	if at := strings.LastIndex(rest[:end], "@"); at >= 0 {
		rest = rest[at+1:]
	}
	rest, _, _ = strings.Cut(rest, "#")
	if path, q, ok := strings.Cut(rest, "?"); ok {
		rest = path + "?" + maskQuery(q)
	}
	return scheme + "://" + rest
}
