package toykind

import "github.com/egress-proxies/provider_health_exporter/provider"

// Kind is the toy kind as the table of kinds lists it.
func Kind() provider.Kind {
	return provider.NewKind(provider.KindOf[*Entry, *Checker]{
		Section: Section(),
		Doc:     Doc(),
		Reasons: Reasons(),
		// TransportErrors classifies what fails below the HTTP status.
		Classifiers: []provider.Classifier{provider.TransportErrors},
		NewChecker:  New,
	})
}
