package config_test

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/egress-proxies/provider_health_exporter/config"
)

// strict decodes list by list and refuses what it cannot cut, as the
// exporter does a file over 2 MiB, a few items at a time.
var strict = config.NewStrictChunking(0, 120, nil)

var lineRE = regexp.MustCompile(`^line [1-9][0-9]*: `)

// TestDecodeLargeRefusesAsWhole: a broken line put anywhere in a fleet
// (2,000 files: an unclosed quote or bracket, "- - -", a key at a wrong
// column, an alias of no anchor…) is refused by the list-by-list decode
// without decoding the file whole; where it gives yaml's error, it is
// word for word and line for line what decoding the whole file gives,
// and otherwise it names a line and what it could not cut there (yaml
// names the line where the collection with the error starts, above it). A file it accepts is
// the one decoding it whole gives.
func TestDecodeLargeRefusesAsWhole(t *testing.T) {
	t.Parallel()
	lines := strings.SplitAfter(fleetText(40), "\n")
	r := rand.New(rand.NewPCG(1, 1))
	breaks := []string{"name: : :\n", "- [\n", "- address: 'x\n", "\"x\n", "- - -\n", "bad\n", "]\n", "}\n", "x: y: z\n", "&a\n", "*zz\n", "? x\n", "-\n  - y\n", "kvm:\n"}
	dir := filepath.Join("..", "testdata")
	yamlErrs := 0
	for range 2000 {
		at := r.IntN(len(lines))
		text := strings.Join(lines[:at], "") + strings.Repeat(" ", r.IntN(9)) + breaks[r.IntN(len(breaks))] + strings.Join(lines[at:], "")
		whole, werr := config.ParseWith([]byte(text), dir, sections, config.NewChunking(len(text)+1, 0))
		cut, cerr := config.ParseWith([]byte(text), dir, sections, strict)
		switch {
		case cerr == nil:
			if werr != nil || !reflect.DeepEqual(whole.AllEntries(), cut.AllEntries()) {
				t.Fatalf("%q: accepted list by list; whole: %v", text, werr)
			}
		case werr == nil:
			if !strings.Contains(cerr.Error(), "is decoded list by list, never whole") {
				t.Fatalf("%q: a valid file refused with %v", text, cerr)
			}
		case strings.HasPrefix(cerr.Error(), "yaml: "):
			yamlErrs++
			if cerr.Error() != werr.Error() {
				t.Fatalf("%q:\nwhole:        %v\nlist by list: %v", text, werr, cerr)
			}
		default:
			if !subset(werr, cerr) && !lineRE.MatchString(cerr.Error()) {
				t.Fatalf("%q:\nwhole:        %v\nlist by list: %v", text, werr, cerr)
			}
		}
	}
	if yamlErrs < 1000 {
		t.Errorf("only %d of 2,000 files refused with yaml's error", yamlErrs)
	}
}

// TestDecodeLargeRefusedCases: the cases of a 16 MiB file that made the
// exporter decode it whole (and so be OOM-killed): each is refused list
// by list with the line, or, CRLF, decoded list by list.
func TestDecodeLargeRefusedCases(t *testing.T) {
	t.Parallel()
	head := "kvm:\n  - name: fleet\n    user: ops\n    private_key_file: files/placeholder\n    insecure_ignore_host_key: true\n    hosts:\n"
	hosts := strings.Repeat("      - address: 192.0.2.1\n        name: a\n", 6)
	dir := filepath.Join("..", "testdata")
	for name, c := range map[string]struct {
		text string
		want string // "" : as decoding the whole file
	}{
		"syntax":        {head + hosts + "      - address: 192.0.2.9\n        name: : :\n" + hosts, ""},
		"duplicate key": {head + hosts + "kvm:\n  - name: other\n", ""},
		// The second list is not decoded, so its unknown field is not
		// reported, as when decoding the whole file.
		"duplicate key, both lists": {head + hosts + "kvm:\n" + strings.TrimPrefix(head, "kvm:\n") + hosts + "        passwd: x\n", ""},
		"duplicate entry key":       {head + hosts + "    hosts:\n" + hosts, ""},
		"alias":                     {head + "      - &h\n        address: 192.0.2.1\n" + hosts + "      - *h\n", `line 21: an alias (*h) of an anchor in another part of the file`},
		"tab":                       {head + hosts + "\t\n" + hosts, `line 19: a tab in the indentation (YAML indents with spaces)`},
		"tab-indented":              {head + hosts + "\t- address: 192.0.2.9\n", `line 19: a tab in the indentation (YAML indents with spaces)`},
		"crlf and a syntax error":   {strings.ReplaceAll(head+hosts+"      - address: 192.0.2.9\n        name: : :\n"+hosts, "\n", "\r\n"), ""},
	} {
		_, werr := config.ParseWith([]byte(c.text), dir, sections, config.NewChunking(len(c.text)+1, 0))
		_, cerr := config.ParseWith([]byte(c.text), dir, sections, strict)
		switch {
		case cerr == nil:
			t.Errorf("%s: accepted", name)
		case c.want == "" && (werr == nil || cerr.Error() != werr.Error()):
			t.Errorf("%s:\nwhole:        %v\nlist by list: %v", name, werr, cerr)
		case c.want != "" && !strings.HasPrefix(cerr.Error(), c.want+"; a configuration of "):
			t.Errorf("%s: %v, want %s", name, cerr, c.want)
		}
	}
	// Lines ending in "\r\n" are cut as lines ending in "\n".
	crlf := strings.ReplaceAll(fleetText(30), "\n", "\r\n")
	if fileErr, err := config.DecodeLarge([]byte(crlf), sections, strict); fileErr != nil || err != nil {
		t.Errorf("CRLF: not decoded list by list: %v %v", fileErr, err)
	}
	assertSame(t, "crlf", []byte(crlf), strict)
}

// TestDecodeLargeCutsEveryList: the lists cut out are those the file's
// indentation shows, a list that a sibling key follows too (fleet's
// hosts, then volume): which lists are cut changes memory only, so only
// this says it.
func TestDecodeLargeCutsEveryList(t *testing.T) {
	t.Parallel()
	var got []string
	ch := config.NewStrictChunking(0, 120, func(key string, line int) { got = append(got, fmt.Sprintf("%s@%d", key, line)) })
	if _, err := config.ParseWith([]byte(fleetText(60)), filepath.Join("..", "testdata"), sections, ch); err != nil {
		t.Fatal(err)
	}
	want := []string{"kvm@4", "hosts@15", "hosts@211", "gcp@215", "regions@219"}
	if !slices.Equal(got, want) {
		t.Errorf("lists cut: %v, want %v", got, want)
	}
}

// TestDecodeLargeRefusesUnicodeBreaks: yaml counts NEL (U+0085), U+2028
// and U+2029 as line breaks, the cutter only "\n": a file with one, at a
// line's start or end, in a comment or after the indentation, on any
// line, is refused naming that line, never cut where its lines are not
// (a valid file was refused with a YAML error of the wrong line, or the
// wrong items decoded). A 2 MiB file too, the exporter's own chunking.
func TestDecodeLargeRefusesUnicodeBreaks(t *testing.T) {
	t.Parallel()
	lines := strings.SplitAfter(fleetText(40), "\n")
	dir := filepath.Join("..", "testdata")
	const why = "a Unicode line break (NEL, U+2028 or U+2029); a configuration of "
	for _, c := range []string{"\u0085", "\u2028", "\u2029"} {
		// From line 2: a file whose first byte is not ASCII is refused
		// as one that starts with a byte order mark.
		for at := 1; at < len(lines)-1; at++ {
			for _, put := range []func(string) string{
				func(l string) string { return c + l },
				func(l string) string { return strings.TrimSuffix(l, "\n") + c + "\n" },
				func(l string) string { return strings.TrimSuffix(l, "\n") + " # a" + c + "b\n" },
				func(l string) string { i := len(l) - len(strings.TrimLeft(l, " ")); return l[:i] + c + l[i:] },
			} {
				text := strings.Join(lines[:at], "") + put(lines[at]) + strings.Join(lines[at+1:], "")
				_, err := config.ParseWith([]byte(text), dir, sections, strict)
				if want := fmt.Sprintf("line %d: %s", at+1, why); err == nil || !strings.HasPrefix(err.Error(), want) {
					t.Fatalf("%q on line %d: %v, want %s...", c, at+1, err, want)
				}
			}
		}
		big := fleetText(50_000)
		if len(big) <= 2<<20 {
			t.Fatalf("a file of %d bytes, want over 2 MiB", len(big))
		}
		at := strings.Index(big, "\n        name: \"host-49000\"")
		text := big[:at] + c + big[at:]
		_, err := config.ParseWith([]byte(text), dir, sections, config.LargeFiles)
		if want := fmt.Sprintf("line %d: %s", strings.Count(big[:at], "\n")+1, why); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%q in a file of %d KiB: %v, want %s...", c, len(text)>>10, err, want)
		}
	}
}

// TestDecodeLargeRefusesByteOrderMarks: a file that starts with a byte
// order mark (UTF-8's, or UTF-16's, whose text the cutter cannot read) is
// refused naming line 1 and the mark, and so is one with a U+FEFF
// anywhere else: yaml.v3 skips a character at a line's start when its
// read buffer happens to begin with a U+FEFF, so where the mark falls
// decides what the text means. Here a mark inside a quoted name, at 700
// places, never gives a list-by-list decode that differs from the whole
// file's (one of them, in fleetText(40), decodes whole to "did not find
// expected key", and was accepted list by list).
func TestDecodeLargeRefusesByteOrderMarks(t *testing.T) {
	t.Parallel()
	dir := filepath.Join("..", "testdata")
	fleet := fleetText(40)
	utf16 := []byte{0xff, 0xfe}
	for _, r := range fleet {
		utf16 = append(utf16, byte(r), byte(r>>8))
	}
	for name, text := range map[string][]byte{"UTF-8": []byte("\uFEFF" + fleet), "UTF-16": utf16} {
		_, err := config.ParseWith(text, dir, sections, strict)
		if want := "line 1: a byte order mark or a directive (%) before the configuration; "; err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s byte order mark: %v, want %s...", name, err, want)
		}
	}
	const why = "a byte order mark (U+FEFF), which yaml reads by where it falls in its buffer; "
	for host := 30; host < 40; host++ {
		name := fmt.Sprintf("\"host-%d\"", host)
		before, _, ok := strings.Cut(fleet, name)
		if !ok {
			t.Fatalf("no %s in the fleet", name)
		}
		line := strings.Count(before, "\n") + 1
		for pad := range 70 {
			text := strings.Replace(fleet, name, fmt.Sprintf("\"host-%d%s\uFEFF\"", host, strings.Repeat("p", pad)), 1)
			_, err := config.ParseWith([]byte(text), dir, sections, strict)
			if want := fmt.Sprintf("line %d: %s", line, why); err == nil || !strings.HasPrefix(err.Error(), want) {
				t.Fatalf("U+FEFF on line %d after %d bytes of padding: %v, want %s...", line, pad, err, want)
			}
		}
	}
}

// TestDecodeLargeErrorTies: a list's YAML error and the skeleton's that
// yaml words with the same line number: the file's is the one decoding it
// whole reports. yaml numbers a parser error's line from 0, a scanner
// error's from 1, so "line 3" of the skeleton's parser error is below
// "line 3" of a list's scanner error (the list's is the file's); two
// parser errors on one line give the skeleton's. Each found by comparing
// the decodes of 30,000 small random files.
func TestDecodeLargeErrorTies(t *testing.T) {
	t.Parallel()
	dir := filepath.Join("..", "testdata")
	for _, text := range []string{
		// The list's scanner error first.
		"0:\n  - &a 1\n      - address: x\n: x\n",
		"0:\n    - 1\n      - address: x\n}\n]\n0:\n",
		"kvm:\n  - 0\n    b: 2\n: x\n}\n: x\n",
		"0:\n0:\n  - &a 1\n      - [\n      - address: x\n,\n}\n",
		// The skeleton's error first.
		"]\n0\n  - *b\n0:\n  - \"0\n  - 0\n  - \"0\n",
		"0\ngcp:\n  - {\n    b: 2\n",
		"  - {\n0:\n  - a: 1\n    - 1\n  - \"0\n,\n",
	} {
		_, werr := config.ParseWith([]byte(text), dir, sections, config.NewChunking(len(text)+1, 0))
		_, cerr := config.ParseWith([]byte(text), dir, sections, strict)
		if werr == nil || cerr == nil || cerr.Error() != werr.Error() {
			t.Errorf("%q:\nwhole:        %v\nlist by list: %v", text, werr, cerr)
		}
	}
}
