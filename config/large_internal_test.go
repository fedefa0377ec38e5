package config

import (
	"errors"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestBatchesCountsItems: a piece whose items yaml counts otherwise than
// the cutter does (its "- " lines at the list's column) is refused at
// the piece's first line, whether yaml finds more (a line break the
// cutter does not count: cuttable refuses those first, this is the check
// behind it) or fewer (a quoted value over an item's line).
func TestBatchesCountsItems(t *testing.T) {
	t.Parallel()
	for name, text := range map[string]string{
		"more":  "kvm:\n  - name: a\n  - name: b\u0085  - name: c\n",
		"fewer": "kvm:\n  - name: a\n  - name: \"b\n  - c\"\n",
	} {
		l := splitLines([]byte(text))
		holes := findHoles(l, 0, l.count(), 0)
		if len(holes) != 1 {
			t.Fatalf("%s: %d lists found, want 1", name, len(holes))
		}
		h := holes[0]
		err := batches(l, within{top: h}, h.items(l), chunking{batch: 1 << 20}, func([]*yaml.Node, int, int) error { return nil })
		var nc *notCut
		if !errors.As(err, &nc) || nc.line != 2 {
			t.Errorf("%s items than lines: %v, want line 2 refused", name, err)
		}
	}
}
