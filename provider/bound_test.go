package provider

import (
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestBoundString(t *testing.T) {
	short := "quota exceeded for CPUS"
	if got := BoundString(short); got != short {
		t.Errorf("short string changed: %q", got)
	}
	long := strings.Repeat("ä", MaxProviderString) // 2 bytes a rune
	got := BoundString(long)
	if !utf8.ValidString(got) {
		t.Errorf("cut string is not valid UTF-8")
	}
	if !strings.Contains(got, "[cut: ") {
		t.Errorf("cut string has no marker: %q", got[len(got)-40:])
	}
	// Exactly the limit kept (2,048 runes of 2 bytes fill it), and a
	// marker that counts the rest: not one rune more.
	kept, marker, ok := strings.Cut(got, "… [cut: ")
	if !ok || len(kept) != MaxProviderString || marker != strconv.Itoa(len(long)-MaxProviderString)+" more bytes]" {
		t.Errorf("cut string keeps %d bytes and says %q, want exactly %d and the count of the rest", len(kept), marker, MaxProviderString)
	}
	// A rune that would cross the limit is left out whole.
	odd := "a" + long
	if kept, _, _ := strings.Cut(BoundString(odd), "… [cut: "); len(kept) != MaxProviderString-1 || !utf8.ValidString(kept) {
		t.Errorf("with a rune across the limit, %d bytes kept, want %d", len(kept), MaxProviderString-1)
	}
	bad := "q\xff\xfe"
	if got := BoundString(bad); !utf8.ValidString(got) || !strings.HasPrefix(got, "q") {
		t.Errorf("BoundString(%q) = %q, want valid UTF-8 starting with q", bad, got)
	}
	hugeBad := strings.Repeat("\xff", 4<<20)
	if got := BoundString(hugeBad); len(got) > MaxProviderString+64 || !utf8.ValidString(got) {
		t.Errorf("4 MiB of invalid bytes became %d bytes (valid %v)", len(got), utf8.ValidString(got))
	}
}

func TestValidLabelValue(t *testing.T) {
	for v, want := range map[string]bool{
		"compute-resources":                  true,
		"":                                   false,
		"q\xff\xfe":                          false,
		strings.Repeat("a", MaxLabelValue):   true,
		strings.Repeat("a", MaxLabelValue+1): false,
	} {
		if got := ValidLabelValue(v); got != want {
			t.Errorf("ValidLabelValue(%.20q…) = %v, want %v", v, got, want)
		}
	}
}
