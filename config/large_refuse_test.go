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
