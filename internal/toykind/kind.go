package toykind

import "github.com/egress-proxies/provider_health_exporter/collector"

// Kind is the toy kind as the table of kinds lists it.
func Kind() collector.Kind {
	return collector.NewKind(collector.KindOf[*Entry, *Checker]{
		Section: Section(),
		Reasons: Reasons(),
		// Transport classifies what fails below the HTTP status.
		Classifiers: []collector.Classifier{collector.Transport},
		NewChecker:  New,
	})
}
