// Package provider is what a kind of provider is written against, and all
// it imports of the exporter (docs/development.md: "Adding a provider"):
// the kind's row (Kind, made by NewKind from a KindOf), the checker
// contract (Checker, Target, Verdict, Facts, and the optional Closer,
// Adopter, Backoffer, FactKeeper), the closed reason sets (Reason,
// ReasonSet, the shared reasons and the Classifier of transport errors),
// the capacity of a target (Capacity and the Constraint functions), the options
// every kind's New takes (Option, WithDialer), the bounded HTTP client
// (BoundedTransport, BoundHeaders) and the bounds on provider text
// (BoundString). It imports nothing of the engine that runs the checks
// or of the exposition that writes their metrics.
package provider
