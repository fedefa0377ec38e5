// Command chart-readme rewrites the values table of the Helm chart's README
// from its values.yaml and values.schema.json; a test fails when the table
// is stale:
//
//	go -C deploy/kubernetes/validate run ./chart-readme
package main

import (
	"fmt"
	"os"

	"github.com/egress-proxies/provider_health_exporter/deploy/kubernetes/validate/chart"
)

func main() {
	if err := chart.WriteReadmeTable("../../helm/provider-health-exporter"); err != nil {
		fmt.Fprintln(os.Stderr, "chart-readme:", err)
		os.Exit(1)
	}
}
