// Package toykind is the toy kind of docs/development.md's "Adding a
// provider", written by its recipe alone and in its layout: the kind's
// name and reasons in classify.go, its configuration in config.go, its
// checker in toy.go and its Kind in kind.go. A "toy" entry is a URL that
// must answer 200. It is compiled into the exporter only with the toykind
// build tag (internal/kinds/toykind.go), for the test
// that runs it through the real binary; it is not a kind users configure.
//
// The package is named toykind, not toy, only to show the rule the recipe
// gives for a kind whose name is a standard library package's (a kind
// http is package httpkind).
package toykind
