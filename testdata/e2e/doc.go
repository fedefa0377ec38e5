// Package e2e is the end-to-end test: the exporter binary scraped
// by a real Prometheus that evaluates the mixin's alerts and sends them to a
// real Alertmanager, whose webhook the test receives.
//
// The test is behind the build tag e2e, and Go leaves testdata/ out of ./...,
// so `go test ./...` never runs it. Run it with testdata/e2e/run-e2e.sh or
//
//	go test -tags e2e -count=1 -v ./testdata/e2e/
package e2e
