package kubernetes

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/egress-proxies/provider_health_exporter/internal/boundedfile"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

// inClusterFiles are where a Pod finds its ServiceAccount's credentials.
type inClusterFiles struct {
	token, ca string
}

var defaultInCluster = inClusterFiles{
	token: "/var/run/secrets/kubernetes.io/serviceaccount/token",
	ca:    "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt",
}

// clientState is what one read of the configuration yields.
type clientState struct {
	// stamp identifies the versions of the files read; a check that
	// finds another reads them again.
	stamp string
	files []string // the files read, kubeconfig first
	base  *rest.Config
	err   error       // why the read failed; base is nil then
	exec  *execPlugin // the kubeconfig's exec plugin, if any
	// client is built from base and, with an exec plugin, the
	// credential cred.
	client *client
	cred   *execCredential
}

// client is what one build of the configuration yields.
type client struct {
	host string
	rest *rest.RESTClient
	http *http.Client
	// watchCfg is the configuration without the per-request wrappers,
	// for the schedule watches (watch.go), which outlive any one check.
	watchCfg *rest.Config
}

// current returns the client for the current configuration: read again
// when one of its files changed or the last read failed, with a fresh
// credential from the exec plugin when the last one expired. Only checks
// call it; the plugin runs under the check's ctx.
func (c *Checker) current(ctx context.Context, logger *slog.Logger) (*client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var files []string
	if c.state != nil {
		files = c.state.files
	}
	if stamp := stampOf(files); c.state == nil || c.state.err != nil || stamp != c.state.stamp {
		c.state = c.load()
		if c.state.base != nil {
			host := c.state.base.Host
			c.host.Store(&host)
		}
	}
	st := c.state
	if st.err != nil {
		return nil, st.err
	}
	var cred *execCredential
	if st.exec != nil {
		var err error
		if cred, err = st.exec.credential(ctx, logger); err != nil {
			return nil, err
		}
	}
	if st.client == nil || cred != st.cred {
		cl, err := c.build(st.base, cred)
		if err != nil {
			return nil, fmt.Errorf("kubernetes client configuration: %w", err)
		}
		st.client, st.cred = cl, cred
	}
	return st.client, nil
}

// forgetCredential drops the exec plugin's credential after the server
// refused it: the next check runs the plugin again.
func (c *Checker) forgetCredential() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != nil && c.state.exec != nil {
		c.state.exec.forget()
	}
}

// load reads the configuration's files.
func (c *Checker) load() *clientState {
	files := []string{c.cfg.Kubeconfig}
	if c.cfg.Kubeconfig == "" {
		files = []string{c.inCluster.token, c.inCluster.ca}
	}
	// Stamped before the read: a file that changes during it is read
	// again at the next check.
	st := &clientState{stamp: stampOf(files), files: files}
	base, exec, referenced, err := restConfig(c.cfg, c.inCluster)
	if err != nil {
		st.err = fmt.Errorf("kubernetes client configuration: %w", err)
		return st
	}
	if len(referenced) > 0 {
		st.files = append(st.files, referenced...)
		st.stamp = stampOf(st.files)
	}
	st.base, st.exec = base, exec
	return st
}

// stampOf identifies the current versions of files without reading them:
// their sizes and modification times, after symlinks (a Secret mount
// swaps a symlink). A file that cannot be stat'ed counts as a version of
// its own, so that it is read, and its problem reported, at every check.
func stampOf(files []string) string {
	var b strings.Builder
	for _, f := range files {
		if f == "" {
			continue
		}
		st, err := os.Stat(f)
		if err != nil {
			fmt.Fprintf(&b, "%s:?;", f)
			continue
		}
		fmt.Fprintf(&b, "%s:%d:%d;", f, st.Size(), st.ModTime().UnixNano())
	}
	return b.String()
}

// build constructs the client of base with the exec plugin's credential
// cred, if any. It does no I/O: every file was read into base.
func (c *Checker) build(base *rest.Config, cred *execCredential) (*client, error) {
	cfg := rest.CopyConfig(base)
	if cred != nil {
		cfg.BearerToken = cred.Status.Token
		if cred.Status.ClientCertificateData != "" {
			cfg.CertData, cfg.KeyData = []byte(cred.Status.ClientCertificateData), []byte(cred.Status.ClientKeyData)
		}
	}
	// The check is the only caller and makes one request per scrape: a
	// client-side limiter could only make it wait.
	cfg.RateLimiter = flowcontrol.NewFakeAlwaysRateLimiter()
	cfg.UserAgent = userAgent
	// Deprecation warnings would go to klog's global logger.
	cfg.WarningHandler = rest.NoWarnings{}
	cfg.Dial = c.dialer.DialContext
	watchCfg := rest.CopyConfig(cfg)
	// The innermost wrapper, below client-go's authentication wrappers, so
	// that reaching it means credentials were obtained.
	// Below it, the bounds every provider's HTTP client has: capped
	// headers and bodies, no redirects (provider.BoundedTransport).
	// client-go calls the wrapper as it builds the transport below
	// (HTTPClientFor), its own for this build: cfg.Dial makes it one no
	// other client shares, whose header limit is then set before any
	// request.
	var boundErr error
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		boundErr = provider.BoundHeaders(rt)
		return &tracingTransport{base: provider.BoundedTransport(rt)}
	})
	cfg.GroupVersion = &corev1.SchemeGroupVersion
	cfg.APIPath = "/api"
	cfg.NegotiatedSerializer = scheme.Codecs.WithoutConversion()

	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("http client: %w", err)
	}
	if boundErr != nil {
		return nil, fmt.Errorf("http client: %w", boundErr)
	}
	rc, err := rest.RESTClientForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("rest client: %w", err)
	}
	return &client{host: cfg.Host, rest: rc, http: httpClient, watchCfg: watchCfg}, nil
}

// restConfig reads the kubeconfig (only that file: neither $KUBECONFIG nor
// an in-cluster fallback may change which cluster is checked), or the
// in-cluster configuration when no kubeconfig is configured. Every file
// the configuration names is read here, bounded, into the returned config,
// so that client-go reads none; referenced lists them. An exec plugin is
// returned apart: the check runs it under its deadline.
func restConfig(kc *Entry, in inClusterFiles) (cfg *rest.Config, exec *execPlugin, referenced []string, err error) {
	if kc.Kubeconfig == "" {
		cfg, err = inClusterConfig(in)
		return cfg, nil, nil, err
	}
	data, err := boundedfile.Read(kc.Kubeconfig, boundedfile.Kubeconfig)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("kubeconfig: %w", err)
	}
	raw, err := clientcmd.Load(data)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("kubeconfig %s: %w", kc.Kubeconfig, err)
	}
	// Relative certificate and token paths are relative to the file, as
	// clientcmd.LoadFromFile would have it.
	for _, v := range raw.Clusters {
		v.LocationOfOrigin = kc.Kubeconfig
	}
	for _, v := range raw.AuthInfos {
		v.LocationOfOrigin = kc.Kubeconfig
	}
	if err := clientcmd.ResolveLocalPaths(raw); err != nil {
		return nil, nil, nil, fmt.Errorf("kubeconfig %s: %w", kc.Kubeconfig, err)
	}
	// Before ClientConfig, which would open and read these files itself
	// (a token file whole, a CA file opened blocking).
	if referenced, err = inlineFiles(raw, kc.Context); err != nil {
		return nil, nil, nil, fmt.Errorf("kubeconfig %s: %w", kc.Kubeconfig, err)
	}
	cfg, err = clientcmd.NewNonInteractiveClientConfig(*raw, kc.Context, &clientcmd.ConfigOverrides{}, nil).ClientConfig()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("kubeconfig %s: %w", kc.Kubeconfig, err)
	}
	if cfg.AuthProvider != nil {
		return nil, nil, nil, fmt.Errorf("kubeconfig %s: auth-provider %q is not supported: use a token, a client certificate or an exec plugin", kc.Kubeconfig, cfg.AuthProvider.Name)
	}
	if cfg.ExecProvider != nil {
		exec = newExecPlugin(cfg.ExecProvider, cfg)
		cfg.ExecProvider = nil
	}
	if err := plainHTTPWithCredentials(cfg, raw, kc.Context); err != nil {
		return nil, nil, nil, fmt.Errorf("kubeconfig %s: %w", kc.Kubeconfig, err)
	}
	return cfg, exec, referenced, nil
}

// inClusterConfig is rest.InClusterConfig with bounded reads.
func inClusterConfig(in inClusterFiles) (*rest.Config, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, fmt.Errorf("in-cluster configuration: %w", rest.ErrNotInCluster)
	}
	token, err := boundedfile.Read(in.token, boundedfile.Token)
	if err != nil {
		return nil, fmt.Errorf("in-cluster configuration: %w", err)
	}
	ca, err := boundedfile.Read(in.ca, boundedfile.CA)
	if err != nil {
		return nil, fmt.Errorf("in-cluster configuration: %w", err)
	}
	return &rest.Config{
		Host:            "https://" + net.JoinHostPort(host, port),
		BearerToken:     strings.TrimSpace(string(token)),
		TLSClientConfig: rest.TLSClientConfig{CAData: ca},
	}, nil
}

// inlineFiles reads the files that the cluster and user of the context
// (the current one when context is empty) name into the kubeconfig,
// bounded, and clears the names, so that client-go reads no file itself.
// It returns the files read: a change to one of them makes the next check
// read the configuration again (a rotated token).
func inlineFiles(raw *clientcmdapi.Config, context string) ([]string, error) {
	if context == "" {
		context = raw.CurrentContext
	}
	kctx := raw.Contexts[context]
	if kctx == nil {
		return nil, nil // ClientConfig names the missing context
	}
	var files []struct {
		path *string
		data *[]byte
		kind boundedfile.Kind
	}
	add := func(path *string, data *[]byte, kind boundedfile.Kind) {
		files = append(files, struct {
			path *string
			data *[]byte
			kind boundedfile.Kind
		}{path, data, kind})
	}
	if c := raw.Clusters[kctx.Cluster]; c != nil {
		add(&c.CertificateAuthority, &c.CertificateAuthorityData, boundedfile.CA)
	}
	var token []byte
	ai := raw.AuthInfos[kctx.AuthInfo]
	if ai != nil {
		add(&ai.ClientCertificate, &ai.ClientCertificateData, boundedfile.CA)
		add(&ai.ClientKey, &ai.ClientKeyData, boundedfile.PrivateKey)
		add(&ai.TokenFile, &token, boundedfile.Token)
	}
	var read []string
	for _, f := range files {
		if *f.path == "" {
			continue
		}
		b, err := boundedfile.Read(*f.path, f.kind)
		if err != nil {
			return nil, err
		}
		read = append(read, *f.path)
		*f.data, *f.path = b, ""
	}
	if token != nil {
		// As client-go reads a token file: surrounding space is not
		// part of the token.
		ai.Token = strings.TrimSpace(string(token))
	}
	return read, nil
}

// plainHTTPWithCredentials refuses a kubeconfig whose user has
// credentials for a server reached over plain http: clientcmd leaves them
// out of such a configuration, so the server would never be asked with
// them and the check would report Unauthorized for a user who has a token.
func plainHTTPWithCredentials(cfg *rest.Config, raw *clientcmdapi.Config, context string) error {
	u, err := url.Parse(cfg.Host)
	if err != nil || u.Scheme != "http" {
		return nil //nolint:nilerr // client-go reports a bad host in its own words
	}
	if context == "" {
		context = raw.CurrentContext
	}
	kctx := raw.Contexts[context]
	if kctx == nil {
		return nil
	}
	ai := raw.AuthInfos[kctx.AuthInfo]
	if ai == nil {
		return nil
	}
	if ai.Token != "" || ai.TokenFile != "" || ai.Username != "" || ai.ClientCertificate != "" ||
		len(ai.ClientCertificateData) > 0 || ai.Exec != nil || ai.AuthProvider != nil {
		return fmt.Errorf("server %s is plain http but user %q has credentials, which are sent only over https: use an https server", cfg.Host, kctx.AuthInfo)
	}
	return nil
}

// CheckFiles reads the kubeconfig the way a check does, without any request
// and without running an exec plugin: what --config.check warns about. The
// in-cluster configuration is not looked at, since it exists only inside
// the cluster.
func CheckFiles(cfg *Entry) error {
	if cfg.Kubeconfig == "" {
		return nil
	}
	_, _, _, err := restConfig(cfg, defaultInCluster)
	return err
}
