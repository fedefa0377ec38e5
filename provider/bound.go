package provider

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

// MaxEcho is the most of a request's parameter (an unknown name= or
// target=, a header's value) that an error answer repeats: enough to
// recognise a typo; a client sending 60 KB gets back a prefix, not its
// own 60 KB.
const MaxEcho = 64

// Echo is s as an error answer or a log line repeats it: quoted with Go's
// escapes, as the log writes strings (an ESC byte is \x1b, a NUL \x00),
// and cut to MaxEcho bytes followed by the length of the whole.
func Echo(s string) string {
	if len(s) <= MaxEcho {
		return strconv.Quote(s)
	}
	n := MaxEcho
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return strconv.Quote(s[:n]) + "… (" + strconv.Itoa(len(s)) + " bytes)"
}

// EscapeText is s with every rune that is not printable (control
// characters: ESC, NUL, a newline) and every byte that is not UTF-8
// written as Go escapes it (\x1b, \x00, \n, \xff), for provider text in a
// text/plain answer, where a terminal would otherwise act on it. Quotes
// and backslashes stay as they are: the text is read, not parsed.
func EscapeText(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || !strconv.IsPrint(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b.WriteString(`\x` + strconv.FormatUint(uint64(s[i])>>4, 16) + strconv.FormatUint(uint64(s[i])&15, 16))
		case !strconv.IsPrint(r):
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// BoundLabelString is s cut as BoundString cuts it, to MaxLabelValue bytes:
// provider text shown beside labels (a capacity's binding, the key of a
// detail).
func BoundLabelString(s string) string {
	return boundString(s, MaxLabelValue)
}
