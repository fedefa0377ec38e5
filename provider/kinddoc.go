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
	// Words are the kind's own words in the shared descriptions, which
	// name no kind: a kind whose set has a shared reason it does not
	// describe itself supplies the words its text needs (DocProblems).
	Words KindWords
}

// KindWords are the phrases a shared reason's description takes from the
// kind that gives it, so that no kind inherits another kind's advice: a
// shared text writes {api}, {credentials}, {permission} or {status} where
// the kind's word goes (SharedReasonDocs).
type KindWords struct {
	// API is what the kind's checks call, in prose ("the API server").
	API string
	// Credentials is where the kind's credentials come from, for
	// CredentialsUnavailable ("the kubeconfig or …").
	Credentials string
	// Permission is what the kind's identity must be allowed, and how to
	// see what it lacks, for Unauthorized and Forbidden.
	Permission string
	// Status is where to look when the API is degraded, a sentence, for
	// RateLimited, ServerError and BadResponse.
	Status string
}

// Compose is text with the kind's words in place of their placeholders;
// missing names each placeholder of text whose word is empty.
func (w KindWords) Compose(text string) (out string, missing []string) {
	var pairs []string
	for _, f := range []struct{ placeholder, field, word string }{
		{"{api}", "API", w.API}, {"{credentials}", "Credentials", w.Credentials},
		{"{permission}", "Permission", w.Permission}, {"{status}", "Status", w.Status},
	} {
		if !strings.Contains(text, f.placeholder) {
			continue
		}
		if strings.TrimSpace(f.word) == "" {
			missing = append(missing, "KindDoc.Words."+f.field)
		}
		pairs = append(pairs, f.placeholder, f.word)
	}
	if len(pairs) == 0 {
		return text, nil
	}
	return strings.NewReplacer(pairs...).Replace(text), missing
}

// composed is d in the kind's words.
func (w KindWords) composed(d ReasonDoc) (ReasonDoc, []string) {
	var missing []string
	for _, f := range []*string{&d.Means, &d.Action, &d.Runbook} {
		var m []string
		*f, m = w.Compose(*f)
		for _, one := range m {
			if !slices.Contains(missing, one) {
				missing = append(missing, one)
			}
		}
	}
	return d, missing
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
// else the shared one in the kind's words (KindDoc.Words); ok is false
// when neither has one.
func (k Kind) ReasonDoc(r Reason) (d ReasonDoc, ok bool) {
	if d, ok := k.doc.Reasons[r]; ok {
		return d, true
	}
	d, ok = sharedReasonDoc(r)
	d, _ = k.doc.Words.composed(d)
	return d, ok
}

// RunbookText is reason r's item in the runbook as kind k gives it: the
// kind's own runbook text, else the shared one in the kind's words, else
// what to do. own is false for a shared text that takes no word of the
// kind, the same for every kind that gives r.
func (k Kind) RunbookText(r Reason) (text string, own bool) {
	if d, ok := k.doc.Reasons[r]; ok && d.Runbook != "" {
		return d.Runbook, true
	}
	if d, ok := sharedReasonDoc(r); ok {
		text, _ := k.doc.Words.Compose(d.RunbookText())
		return text, text != d.RunbookText()
	}
	d, _ := k.ReasonDoc(r)
	return d.RunbookText(), true
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
		if missing := k.sharedWordsMissing(r); len(missing) > 0 {
			out = append(out, fmt.Sprintf("kind %s: the shared description of reason %s needs the kind's words: %s", k.Name(), r, strings.Join(missing, ", ")))
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

// sharedWordsMissing names the kind's words that the shared description
// of r needs and the kind leaves empty, where the kind shows it: what it
// does not describe itself, and the runbook item it does not write.
func (k Kind) sharedWordsMissing(r Reason) []string {
	shared, ok := sharedReasonDoc(r)
	if !ok {
		return nil
	}
	if own, ok := k.doc.Reasons[r]; ok {
		if own.Runbook != "" {
			return nil
		}
		// Its own meaning and action; the runbook's item is the shared
		// one (RunbookText).
		shared = ReasonDoc{Runbook: shared.RunbookText()}
	}
	_, missing := k.doc.Words.composed(shared)
	return missing
}
