package collector

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxProviderString is the most of any provider-supplied string (an error
// or Status message, a quota warning, an access review's reason, a webhook's
// denial, a name) that the exporter keeps where it enters a verdict's
// message, a status page's details or a log line (docs/security.md: "What
// the exporter bounds"). A provider answer may legally be megabytes;
// copying it into every verdict, page and log line multiplies it.
const MaxProviderString = 4096

// MaxLabelValue is the longest provider-supplied value (a quota's name, a
// metric name from Compute) the exporter exports as a label value.
const MaxLabelValue = 256

// BoundString returns s cut to at most MaxProviderString bytes of valid
// UTF-8, with a marker saying how much was cut, so that a reader of the
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
	end := min(len(s), limit)
	// Back up to the start of a rune so that a valid string stays valid.
	for end > 0 && end < len(s) && !utf8.RuneStart(s[end]) {
		end--
	}
	// Cut before replacing invalid bytes, so that a multi-megabyte answer
	// is never copied whole.
	kept := strings.ToValidUTF8(s[:end], "\uFFFD")
	if end == len(s) {
		return kept
	}
	return kept + "… [cut: " + strconv.Itoa(len(s)-end) + " more bytes]"
}

// ValidLabelValue reports whether a provider-supplied value may become a
// label value: valid UTF-8, not empty, at most MaxLabelValue bytes. Anything
// else is dropped by the caller with a log line: a label the client library
// rejects would otherwise fail the whole scrape, or panic in
// MustNewConstMetric.
func ValidLabelValue(v string) bool {
	return v != "" && len(v) <= MaxLabelValue && utf8.ValidString(v)
}
