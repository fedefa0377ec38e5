package provider

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// KindDoc is what the documentation says of a kind, held beside its code:
// `make generate` writes it into the README and the pages under docs/ and
// mixin/runbook.md, between markers, so that a kind's row and its package
// are all a new kind adds outside its own section of docs/configuration.md
// (docs/development.md: "Adding a provider"). Text is Markdown; a link
// names its page from the repository's root (docs/configuration.md#kvm),
// which the generator makes relative to the page it writes.
type KindDoc struct {
	// Title is the kind's name in prose and the heading of its section of
	// docs/configuration.md ("KVM"); the section's anchor is its slug.
	Title string
	// Target says what the target label is for the kind ("the host's
	// name"), in docs/metrics.md's Labels paragraph.
	Target string
	// Example is the smallest useful list of the kind's entries, in YAML,
	// under the README's "Configuration", without the section's key.
	Example string
	// Reference is a list of the kind's entries with each key it takes,
	// commented, without the section's key: docs/configuration.md's
	// example file.
	Reference string
	// Reasons describes each reason of the kind's set as the kind gives
	// it. A reason of the shared vocabulary (SharedReasonDocs) that the
	// kind does not describe has the shared description.
	Reasons map[Reason]ReasonDoc
}

// ReasonDoc is what one reason means and what to do about it: a row of
// docs/metrics.md's "Reasons" and of the kind's reasons table in
// docs/configuration.md, and an item of the runbook of the alert it
// raises (mixin/runbook.md).
type ReasonDoc struct {
	// Means says when a check gives the reason, and, for a reason of an
	// opt-in check, the key that brings it into an entry's set.
	Means string
	// Action is what to do.
	Action string
	// Runbook is the on-call's diagnosis under the alert the reason
	// raises (ProviderActionRequired for the reasons of the mixin's
	// actionRequiredReasons, ProviderNotReady for the others). Reasons
	// whose Runbook is the same text are one item. Empty: Action.
	Runbook string
}

// RunbookText is the reason's item in the runbook.
func (d ReasonDoc) RunbookText() string {
	if d.Runbook != "" {
		return d.Runbook
	}
	return d.Action
}

// Doc is what the documentation says of the kind (KindOf.Doc).
func (k Kind) Doc() KindDoc { return k.doc }

// ReasonDoc is the description of reason r as kind k gives it: its own,
// else the shared one; ok is false when neither has one.
func (k Kind) ReasonDoc(r Reason) (d ReasonDoc, ok bool) {
	if d, ok := k.doc.Reasons[r]; ok {
		return d, true
	}
	return sharedReasonDoc(r)
}

// sharedReasonDoc is the shared description of r; ok is false for a
// reason outside the shared vocabulary.
func sharedReasonDoc(r Reason) (ReasonDoc, bool) {
	for _, d := range SharedReasonDocs() {
		if d.Reason == r {
			return d.Doc, true
		}
	}
	return ReasonDoc{}, false
}

// DocProblems says what the kind's documentation lacks: a title, a
// target, the examples, a description of every reason of its set, with
// what it means and what to do; and a description of a reason the set
// does not have. `make generate` refuses to write the docs of a kind
// with problems.
func (k Kind) DocProblems() []string {
	var out []string
	for _, f := range []struct{ name, v string }{
		{"Title", k.doc.Title}, {"Target", k.doc.Target}, {"Example", k.doc.Example}, {"Reference", k.doc.Reference},
	} {
		if strings.TrimSpace(f.v) == "" {
			out = append(out, fmt.Sprintf("kind %s: KindDoc.%s is empty", k.Name(), f.name))
		}
	}
	for _, r := range k.reasons.Reasons() {
		d, ok := k.ReasonDoc(r)
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("kind %s: reason %s has no description (KindDoc.Reasons)", k.Name(), r))
		case d.Means == "" || d.Action == "":
			out = append(out, fmt.Sprintf("kind %s: reason %s does not say what it means and what to do (ReasonDoc.Means, Action)", k.Name(), r))
		}
	}
	for _, r := range slices.Sorted(maps.Keys(k.doc.Reasons)) {
		if !k.reasons.Contains(r) {
			out = append(out, fmt.Sprintf("kind %s: KindDoc.Reasons describes %s, which is not in its reason set", k.Name(), r))
		}
	}
	return out
}

// ReasonDocOf is a reason with its description.
type ReasonDocOf struct {
	Reason Reason
	Doc    ReasonDoc
}

// IsShared reports whether r is a reason of the shared vocabulary.
func IsShared(r Reason) bool {
	_, ok := sharedReasonDoc(r)
	return ok
}
