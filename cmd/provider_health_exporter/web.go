package main

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// webPaths are --web.external-url and --web.route-prefix resolved as
// Prometheus and Alertmanager resolve them (docs/deployment.md: "Reverse proxy"): the
// handlers are served under routePrefix, and the links the exporter writes
// (landing page, status debug links) start with linkPrefix, the path of the
// external URL, which a proxy that rewrites paths may make differ from the
// route prefix. Both are "" or "/something" without a trailing slash.
type webPaths struct {
	routePrefix string
	linkPrefix  string
}

// resolveWebPaths follows Prometheus: the route prefix defaults to the path
// of the external URL, and the links use that path.
func resolveWebPaths(externalURL, routePrefix string) (webPaths, error) {
	var extPath string
	if externalURL != "" {
		u, err := url.Parse(externalURL)
		if err != nil {
			return webPaths{}, fmt.Errorf("--web.external-url %q: %w", externalURL, err)
		}
		if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
			return webPaths{}, fmt.Errorf("--web.external-url %q: want an absolute http or https URL", externalURL)
		}
		if u.RawQuery != "" || u.Fragment != "" {
			return webPaths{}, fmt.Errorf("--web.external-url %q: a query or fragment has no place in it", externalURL)
		}
		extPath = u.Path
	}
	if routePrefix == "" {
		routePrefix = extPath
	}
	return webPaths{routePrefix: cleanPrefix(routePrefix), linkPrefix: cleanPrefix(extPath)}, nil
}

// cleanPrefix gives "" for the root and "/a/b" for "a/b/", "/a/b/" or "/a/b".
func cleanPrefix(p string) string {
	p = strings.Trim(p, "/")
	if p == "" {
		return ""
	}
	return "/" + p
}

// underPrefix serves h under prefix: a request for prefix+"/x" reaches h as
// "/x", the bare prefix and the root redirect to prefix+"/" (the landing
// page), and anything else is 404.
func underPrefix(prefix string, h http.Handler) http.Handler {
	if prefix == "" {
		return h
	}
	mux := http.NewServeMux()
	mux.Handle(prefix+"/", http.StripPrefix(prefix, h))
	redirect := http.RedirectHandler(prefix+"/", http.StatusFound)
	mux.Handle(prefix, redirect)
	mux.Handle("/{$}", redirect)
	return mux
}
