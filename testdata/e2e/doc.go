// Package e2e holds the end-to-end tests: the exporter binary scraped
// by a real Prometheus that evaluates the mixin's alerts and sends them to a
// real Alertmanager, whose webhook the test receives (TestEndToEnd); and two
// replicas sharing real KVM hosts by deploy/prometheus/prometheus-sharded.yml's
// hashmod relabelling (TestShardedKVM, root).
//
// The test is behind the build tag e2e, and Go leaves testdata/ out of ./...,
// so `go test ./...` never runs it. Run it with testdata/e2e/run-e2e.sh or
//
//	go test -tags e2e -count=1 -v ./testdata/e2e/
package e2e
