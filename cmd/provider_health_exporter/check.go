package main

import (
	"fmt"
	"io"

	"github.com/egress-proxies/provider_health_exporter/config"
)

// checkConfig implements --config.check: the loader's verdict on the file,
// then a warning for each referenced file whose contents a check would
// reject. Those do not fail the check, because at run time they only make
// their own target not ready.
func checkConfig(path string, stdout, stderr io.Writer) int {
	cfg, err := config.Load(path)
	if err != nil {
		fmt.Fprintf(stderr, "FAILED: %v\n", err)
		return 1
	}
	for _, w := range referencedFileWarnings(cfg) {
		fmt.Fprintf(stderr, "WARNING: %s\n", w)
	}
	fmt.Fprintf(stdout, "SUCCESS: %s: %s\n", path, cfg.Summary())
	return 0
}

// referencedFileWarnings asks each provider to read its files as its check
// would, so that --config.check and the checks never disagree.
func referencedFileWarnings(cfg *config.Config) []string {
	var out []string
	for _, k := range kinds {
		out = append(out, k.fileWarnings(cfg)...)
	}
	return out
}
