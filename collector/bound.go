package collector

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxProviderString is the most of any provider-supplied string (an error
// or Status message, a quota warning, an access review's reason, a webhook's
// denial, a name) that the exporter keeps where it enters a verdict's
// message, a status page's details or a log line (docs/security.md:
// "Strings, labels and pages"). A provider answer may legally be megabytes; copying it into
// every verdict, page and log line multiplies it.
const MaxProviderString = 4096

// MaxLabelValue is the longest provider-supplied value (a quota's name, a
// metric name from Compute) the exporter exports as a label value.
const MaxLabelValue = 256

// BoundString returns s cut to at most MaxProviderString bytes of valid
// UTF-8, with a marker saying how many bytes of s were cut, so that a reader of the
// message knows it is not the whole of what the provider said. Invalid
// UTF-8 is replaced, as a log line or a JSON page would otherwise carry it
// through unchanged.
func BoundString(s string) string {
	return boundString(s, MaxProviderString)
}

func boundString(s string, limit int) string {
	if len(s) <= limit && utf8.ValidString(s) {
		return s
	}
	// Rune by rune up to limit bytes of output, so that a multi-megabyte
	// answer is never copied whole; each invalid byte becomes U+FFFD.
	var b strings.Builder
	b.Grow(min(len(s), limit) + 64)
	i := 0
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		piece := s[i : i+size]
		if r == utf8.RuneError && size == 1 {
			piece = "\uFFFD"
		}
		if b.Len()+len(piece) > limit {
			break
		}
		b.WriteString(piece)
		i += size
	}
	if i < len(s) {
		b.WriteString("… [cut: " + strconv.Itoa(len(s)-i) + " more bytes]")
	}
	return b.String()
}

// ValidLabelValue reports whether a provider-supplied value may become a
// label value: valid UTF-8, not empty, at most MaxLabelValue bytes. Anything
// else is dropped by the caller with a log line: a label the client library
// rejects would otherwise fail the whole scrape, or panic in
// MustNewConstMetric.
func ValidLabelValue(v string) bool {
	return v != "" && len(v) <= MaxLabelValue && utf8.ValidString(v)
}
