package provider

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Classifier is a classification of errors that several kinds share
// (TransportErrors), with every reason it can return and their up flags. A kind
// whose checker calls it lists it in KindOf.Classifiers: the kind's set
// then has its reasons (ReasonSet.With), and Kind.Validate, which main
// runs at startup, says so if a set built another way lacks one. So no
// verdict it gives can fall outside the kind's set and become Unknown.
type Classifier struct {
	name     string
	reasons  ReasonSet
	classify func(context.Context, error) (Reason, bool)
}

// NewClassifier is the classifier name (what errors call it) whose
// classify returns a reason of reasons, or false for an error it does not
// recognise.
func NewClassifier(name string, reasons ReasonSet, classify func(context.Context, error) (Reason, bool)) Classifier {
	return Classifier{name: name, reasons: reasons, classify: classify}
}

// Name is what errors call the classifier.
func (c Classifier) Name() string { return c.name }

// Reasons are every reason Classify can return.
func (c Classifier) Reasons() ReasonSet { return c.reasons }

// Classify classifies err; ok is false for an error the classifier does
// not recognise, which the caller classifies further.
func (c Classifier) Classify(ctx context.Context, err error) (r Reason, ok bool) {
	return c.classify(ctx, err)
}

// Within checks that set has every reason of the classifier, each with
// the classifier's up flag.
func (c Classifier) Within(set ReasonSet) error {
	var missing, flags []string
	for _, d := range c.reasons {
		switch {
		case !set.Contains(d.Reason):
			missing = append(missing, string(d.Reason))
		case set.Up(d.Reason) != d.Up:
			flags = append(flags, fmt.Sprintf("%s must have up=%v", d.Reason, d.Up))
		}
	}
	var errs []error
	if len(missing) > 0 {
		errs = append(errs, fmt.Errorf("classifier %s returns %s, which the reason set lacks (list the classifier in KindOf.Classifiers, or add them with ReasonSet.With)",
			c.name, strings.Join(missing, ", ")))
	}
	if len(flags) > 0 {
		errs = append(errs, fmt.Errorf("classifier %s: %s", c.name, strings.Join(flags, "; ")))
	}
	return errors.Join(errs...)
}

// With is the set with every reason of the classifiers it lacks, added
// before Unknown (which ends a kind's set) in the classifiers' order. A
// reason the set has keeps its place and up flag.
func (s ReasonSet) With(cs ...Classifier) ReasonSet {
	var add ReasonSet
	for _, c := range cs {
		for _, d := range c.reasons {
			if !s.Contains(d.Reason) && !add.Contains(d.Reason) {
				add = append(add, d)
			}
		}
	}
	if len(add) == 0 {
		return s
	}
	out := slices.Clone(s)
	at := len(out)
	if at > 0 && out[at-1].Reason == ReasonUnknown {
		at--
	}
	return slices.Insert(out, at, add...)
}
