// Command provider_health_exporter checks, on every scrape, whether each
// configured infrastructure provider (Kubernetes, GCP, KVM over SSH) can host
// egress proxies right now, and says why not.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	"github.com/prometheus/common/promslog"
	promslogflag "github.com/prometheus/common/promslog/flag"
	"github.com/prometheus/common/version"
	"github.com/prometheus/exporter-toolkit/web"
	"github.com/prometheus/exporter-toolkit/web/kingpinflag"
	"k8s.io/klog/v2"
)

const program = "provider_health_exporter"

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// flags are the command line's values.
type flags struct {
	configFile, metricsPath, externalURL, routePrefix string
	configCheck, enablePprof, noSelfStats             bool
	maxRequests                                       int
	timeoutOff                                        float64
	toolkit                                           *web.FlagConfig
	log                                               *promslog.Config
	// once is the one-shot mode's flags (once.go).
	once onceFlags
	// logLevelSet is true when --log.level was given: --check.once logs
	// only warnings and errors otherwise, its answer being the output.
	logLevelSet bool
}

// parseFlags reads args; the error is kingpin's, for a usage message.
func parseFlags(args []string, stdout, stderr *os.File) (flags, error) {
	app := kingpin.New(program, "Checks whether each provider can host egress proxies now, and why not.")
	f := flags{log: &promslog.Config{}}
	app.Flag("config.file", "Provider health configuration file.").Default("provider_health.yml").StringVar(&f.configFile)
	app.Flag("config.check", "Validate the configuration file (and the files it references), then exit.").Default("false").BoolVar(&f.configCheck)
	addOnceFlags(app, &f.once)
	app.Flag("web.telemetry-path", "Path under which to expose metrics.").Default("/metrics").StringVar(&f.metricsPath)
	app.Flag("web.max-requests", "Maximum number of concurrent scrape requests; 0 disables the limit.").Default("40").IntVar(&f.maxRequests)
	app.Flag("web.external-url", "The URL under which the exporter is reachable, e.g. behind a reverse proxy. Its path prefixes every link the exporter writes and, unless --web.route-prefix is set, every route.").PlaceHolder("<url>").StringVar(&f.externalURL)
	app.Flag("web.route-prefix", "Prefix for the internal routes of web endpoints. Defaults to the path of --web.external-url.").PlaceHolder("<path>").StringVar(&f.routePrefix)
	app.Flag("web.enable-pprof", "Serve Go's runtime profiles (net/http/pprof) under <route-prefix>/debug/pprof/, behind --web.config.file like every path.").Default("false").BoolVar(&f.enablePprof)
	app.Flag("web.disable-exporter-metrics", "Exclude the Go, process and promhttp metrics of the exporter itself from /metrics.").Default("false").BoolVar(&f.noSelfStats)
	app.Flag("timeout-offset", "Seconds to subtract from the scrape timeout of Prometheus to get the check budget.").Default("0.5").Float64Var(&f.timeoutOff)
	f.toolkit = kingpinflag.AddFlags(app, ":9877")
	promslogflag.AddFlags(app, f.log)
	app.GetFlag(promslogflag.LevelFlagName).IsSetByUser(&f.logLevelSet)
	app.Version(version.Print(program))
	app.HelpFlag.Short('h')
	app.UsageWriter(stdout)
	app.ErrorWriter(stderr)
	_, err := app.Parse(args)
	return f, err
}

func run(args []string, stdout, stderr *os.File) int {
	fl, err := parseFlags(args, stdout, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", program, err)
		return 2
	}
	fl.log.Writer = stderr
	if fl.once.run && !fl.logLevelSet {
		if err := fl.log.Level.Set("warn"); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", program, err)
			return onceUsage
		}
	}
	logger := promslog.New(fl.log)
	// client-go logs some failures (in-cluster config, exec plugins) through
	// klog's process-wide logger; send them to ours so they keep our format.
	klog.SetSlogLogger(logger.With("component", "client-go"))

	// The kinds' contracts are checked before anything else: a kind that
	// breaks one would give wrong verdicts, not an error.
	kinds, err := kindTable()
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", program, err)
		return 1
	}
	switch {
	case fl.once.run && fl.configCheck:
		fmt.Fprintf(stderr, "%s: %v\n", program, errOnceConflict)
		return onceUsage
	case fl.once.run:
		return runOnce(kinds, fl.configFile, fl.once, logger, stdout, stderr)
	case fl.once.modifiers:
		fmt.Fprintf(stderr, "%s: --check.format, --check.entry, --check.need and --check.survive-loss apply only with --check.once\n", program)
		return onceUsage
	case fl.configCheck:
		return checkConfig(kinds, fl.configFile, stdout, stderr)
	}
	paths, err := checkRunFlags(fl, logger)
	if err != nil {
		return 1
	}

	logger.Info("starting "+program, "version", version.Info(), "build_context", version.BuildContext())
	x := newExporter(exporterOptions{
		logger:      logger,
		configFile:  fl.configFile,
		kinds:       kinds,
		offset:      time.Duration(fl.timeoutOff * float64(time.Second)),
		maxRequests: fl.maxRequests,
		metricsPath: fl.metricsPath,
		linkPrefix:  paths.linkPrefix,
		web:         paths,

		enablePprof:            fl.enablePprof,
		disableExporterMetrics: fl.noSelfStats,
	})
	if err := x.reload(); err != nil {
		logger.Error("error loading config", "err", err)
		return 1
	}
	defer x.engine.Close()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go reloadOnSignal(ctx, hup, x, logger)

	srv := newServer(underPrefix(paths.routePrefix, x.handler()), x, fl.maxRequests)
	return serve(ctx, srv, fl.toolkit, logger)
}

// checkRunFlags applies the memory limit and checks the flags that only
// serving uses, logging what is wrong; it returns the web paths.
func checkRunFlags(fl flags, logger *slog.Logger) (webPaths, error) {
	if err := applyMemoryLimit(logger); err != nil {
		logger.Error("invalid memory limit", "err", err)
		return webPaths{}, err
	}
	if fl.timeoutOff < 0 {
		logger.Error("--timeout-offset must not be negative", "value", fl.timeoutOff)
		return webPaths{}, errors.New("negative --timeout-offset")
	}
	if fl.enablePprof && (fl.toolkit.WebConfigFile == nil || *fl.toolkit.WebConfigFile == "") {
		socket := fl.toolkit.WebSystemdSocket != nil && *fl.toolkit.WebSystemdSocket
		warning, err := pprofUnprotected(*fl.toolkit.WebListenAddresses, socket)
		if err != nil {
			logger.Error("refusing to start", "err", err)
			return webPaths{}, err
		}
		logger.Warn(warning)
	}
	paths, err := resolveWebPaths(fl.externalURL, fl.routePrefix)
	if err != nil {
		logger.Error("invalid web flags", "err", err)
	}
	return paths, err
}

// reloadOnSignal reloads the configuration at each signal on hup (SIGHUP)
// until ctx ends.
func reloadOnSignal(ctx context.Context, hup <-chan os.Signal, x *exporter, logger *slog.Logger) {
	for {
		select {
		case <-hup:
			if err := x.reload(); err != nil {
				logger.Error("error reloading config", "err", err)
			}
		case <-ctx.Done():
			return
		}
	}
}

// serve runs srv until it fails or ctx ends (SIGINT, SIGTERM), then shuts
// it down; it returns the exit code.
func serve(ctx context.Context, srv *http.Server, toolkitFlags *web.FlagConfig, logger *slog.Logger) int {
	errc := make(chan error, 1)
	go func() { errc <- web.ListenAndServe(srv, toolkitFlags, logger) }()
	select {
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			logger.Error("error running HTTP server", "err", err)
			return 1
		}
	case <-ctx.Done():
		logger.Info("shutting down")
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			logger.Warn("HTTP shutdown", "err", err)
		}
	}
	return 0
}

// selfRegistry holds the exporter's own long-lived metrics; the Go and
// process collectors only with runtime set (--web.disable-exporter-metrics
// unsets it). Build info and the reload gauges stay: the mixin's alerts
// read them.
func selfRegistry(reloadOK, reloadTime prometheus.Gauge, runtime bool) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(versioncollector.NewCollector("provider_health_exporter"), reloadOK, reloadTime)
	if runtime {
		reg.MustRegister(
			collectors.NewGoCollector(),
			collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		)
	}
	return reg
}
