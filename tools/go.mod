module github.com/egress-proxies/provider_health_exporter/tools

go 1.26.0

tool (
	github.com/google/go-jsonnet/cmd/jsonnet
	github.com/google/go-jsonnet/cmd/jsonnet-lint
	github.com/google/go-jsonnet/cmd/jsonnetfmt
	github.com/jsonnet-bundler/jsonnet-bundler/cmd/jb
	github.com/prometheus/promu
)

require (
	github.com/Masterminds/semver/v3 v3.2.1 // indirect
	github.com/alecthomas/kingpin/v2 v2.4.0 // indirect
	github.com/alecthomas/template v0.0.0-20190718012654-fb15b899a751 // indirect
	github.com/alecthomas/units v0.0.0-20211218093645-b94a6e3cc137 // indirect
	github.com/elliotchance/orderedmap/v2 v2.2.0 // indirect
	github.com/fatih/color v1.18.0 // indirect
	github.com/google/go-github/v25 v25.1.3 // indirect
	github.com/google/go-jsonnet v0.22.0 // indirect
	github.com/google/go-querystring v1.0.0 // indirect
	github.com/jsonnet-bundler/jsonnet-bundler v0.6.0 // indirect
	github.com/mattn/go-colorable v0.1.13 // indirect
	github.com/mattn/go-isatty v0.0.20 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	github.com/prometheus/common v0.52.3 // indirect
	github.com/prometheus/promu v0.17.0 // indirect
	github.com/xhit/go-str2duration/v2 v2.1.0 // indirect
	go.uber.org/atomic v1.11.0 // indirect
	golang.org/x/crypto v0.45.0 // indirect
	golang.org/x/oauth2 v0.19.0 // indirect
	golang.org/x/sys v0.38.0 // indirect
	gopkg.in/alecthomas/kingpin.v2 v2.2.6 // indirect
	gopkg.in/yaml.v2 v2.4.0 // indirect
	sigs.k8s.io/yaml v1.4.0 // indirect
)
