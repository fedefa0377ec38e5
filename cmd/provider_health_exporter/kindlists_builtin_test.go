//go:build !toykind

package main

import "testing"

// TestDocsListEveryKind: every list of kinds or reasons in the docs, the
// runbook and the chart matches the table of kinds (kindListProblems);
// each failure names the file to update. The toy kind's tag runs
// TestDocsToyKindNamesTheFiles instead: it is a test's kind, documented
// nowhere on purpose.
func TestDocsListEveryKind(t *testing.T) {
	t.Parallel()
	kinds, err := kindTable()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range kindListProblems(t, kinds) {
		t.Error(p)
	}
}
