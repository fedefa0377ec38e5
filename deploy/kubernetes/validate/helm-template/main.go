// Command helm-template prints the rendering of the Helm chart in
// deploy/helm/provider-health-exporter (helm template with the Helm SDK,
// values.schema.json included), for looking at it without a helm binary:
//
//	go -C deploy/kubernetes/validate run ./helm-template [-values "$PWD/values.yaml"] [-namespace ns] [-name release] CHART_DIR
//
// go -C runs it in deploy/kubernetes/validate, so relative paths are
// relative to that directory: give the values file as an absolute path.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"sigs.k8s.io/yaml"

	"github.com/egress-proxies/provider_health_exporter/deploy/kubernetes/validate/chart"
)

func main() {
	name := flag.String("name", "provider-health-exporter", "release name")
	namespace := flag.String("namespace", "provider-health", "release namespace")
	valuesFile := flag.String("values", "", "a values file, as helm's --values")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: helm-template [-name NAME] [-namespace NS] [-values FILE] CHART_DIR")
		os.Exit(2)
	}
	values := map[string]any{}
	if *valuesFile != "" {
		data, err := os.ReadFile(*valuesFile)
		if errors.Is(err, fs.ErrNotExist) && !filepath.IsAbs(*valuesFile) {
			wd, _ := os.Getwd()
			fmt.Fprintf(os.Stderr, "values %s: not found in %s, where go -C runs this command: pass an absolute path, e.g. -values \"$PWD/%s\"\n", *valuesFile, wd, *valuesFile)
			os.Exit(1)
		}
		if err == nil {
			err = yaml.Unmarshal(data, &values)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "values %s: %v\n", *valuesFile, err)
			os.Exit(1)
		}
	}
	out, err := chart.Template(context.Background(), flag.Arg(0), *name, *namespace, values)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if _, err := os.Stdout.Write(out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
