package exposition

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

// TestSortKeyOrdersAsTheValues: comparing two metrics' sort keys gives what
// comparing their label values one by one gives (Gather's order), and equal
// keys only for equal values, NULs, empty values and prefixes included.
func TestSortKeyOrdersAsTheValues(t *testing.T) {
	alphabet := []string{"", "\x00", "\x00\x00", "\x01", "a", "a\x00", "a\x00b", "a\x01", "ab", "b", "\xff", "é"}
	var lists [][]string
	for _, a := range alphabet {
		lists = append(lists, []string{a})
		for _, b := range alphabet {
			lists = append(lists, []string{a, b})
			for _, c := range alphabet[:6] {
				lists = append(lists, []string{a, b, c})
			}
		}
	}
	key := func(vs []string) string {
		lps := make([]*dto.LabelPair, len(vs))
		for i, v := range vs {
			lps[i] = &dto.LabelPair{Name: proto.String("l" + strconv.Itoa(i)), Value: proto.String(v)}
		}
		return sortKey(lps)
	}
	keys := make([]string, len(lists))
	for i, l := range lists {
		keys[i] = key(l)
	}
	for i, a := range lists {
		for j, b := range lists {
			if got, want := strings.Compare(keys[i], keys[j]), slices.Compare(a, b); got != want {
				t.Fatalf("%q against %q: keys compare %d, values %d", a, b, got, want)
			}
		}
	}
}
