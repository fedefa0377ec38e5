// Command kustomize-build prints the rendering of a kustomization directory
// (with components: of an overlay of it that adds them),
// for the kubernetes integration test, which applies it to a real
// kube-apiserver (collector/kubernetes/integration_test.go).
package main

import (
	"fmt"
	"os"

	"github.com/egress-proxies/provider_health_exporter/deploy/kubernetes/validate"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: kustomize-build DIR [COMPONENT_DIR...]")
		os.Exit(2)
	}
	out, err := validate.Render(os.Args[1], os.Args[2:]...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if _, err := os.Stdout.Write(out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
