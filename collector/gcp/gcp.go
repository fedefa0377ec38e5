// Package gcp checks that the Compute Engine API of a project can be used to
// host proxies: one live check fetches exactly one page of the project's
// aggregated instance list (maxResults=1, the managed-instance filter) and
// classifies whatever comes back into a reason of docs/metrics.md's "Reasons";
// with regions, their quotas, and the list paged once more to count the
// proxies per region (docs/configuration.md: "Capacity per region").
package gcp

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/auth"
	"cloud.google.com/go/auth/credentials"
	"cloud.google.com/go/auth/httptransport"
	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"cloud.google.com/go/compute/metadata"
	gax "github.com/googleapis/gax-go/v2"
	"github.com/googleapis/gax-go/v2/callctx"
	"google.golang.org/api/option"
	"google.golang.org/protobuf/proto"

	"github.com/egress-proxies/provider_health_exporter/internal/boundedfile"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

// TargetName is the only target of a gcp entry (docs/configuration.md: "What a check does").
const TargetName = "compute"

// aggregatedListKind is what Compute calls the answer we ask for; a 200 that
// says anything else did not come from the Compute API.
const aggregatedListKind = "compute#instanceAggregatedList"

var (
	_ provider.Checker = (*Checker)(nil)
	_ provider.Closer  = (*Checker)(nil)
)

// Checker checks the Compute API of one configured project.
type Checker struct {
	project         string
	filter          string
	endpoint        string // empty: the library's default, https://compute.googleapis.com
	credentialsFile string // empty: Application Default Credentials
	logger          *slog.Logger

	// dialer opens every connection base makes (provider.WithDialer).
	dialer *net.Dialer
	// base carries every request this checker makes, to Compute and to the
	// token endpoint; keep-alives are off so that no socket outlives the
	// check that opened it (docs/configuration.md: "Timeouts"). With min_interval in the minutes an
	// idle connection would hardly ever be reused anyway.
	base *http.Transport
	// deadlines gives the Compute request the check's context, which the
	// generated code does not pass to it.
	deadlines *deadlineTransport

	// regions and mins are the quota check (empty: none); metrics are
	// mins' keys, sorted.
	regions []string
	mins    map[string]float64
	metrics []string
	// sourceImage is source_image as configured (empty: no image check),
	// image the same parsed.
	sourceImage string
	image       SourceImage

	mu      sync.Mutex
	clients *clients
	// noData is the last "no quota data" message logged, so that it is
	// logged once per change, not at every check.
	noData string
	// credKey identifies the credentials the client was built with (a hash
	// of the credentials file, or "adc"), so that a rotated file is picked
	// up at the next check without a reload.
	credKey string
	active  int  // checks holding client
	closed  bool // Close was called; the last check out closes client
}

// clients are the Compute REST clients of one set of credentials: one
// HTTP client under them, so one token serves them all.
type clients struct {
	instances *compute.InstancesClient
	// regions is nil without regions, images without source_image.
	regions *compute.RegionsClient
	images  *compute.ImagesClient
}

func (cl *clients) close() error {
	err := cl.instances.Close()
	if cl.regions != nil {
		err = errors.Join(err, cl.regions.Close())
	}
	if cl.images != nil {
		err = errors.Join(err, cl.images.Close())
	}
	return err
}

// discardLogger is what Google's libraries get instead of ours.
var discardLogger = slog.New(slog.DiscardHandler)

// New returns a checker for one gcp entry. It does no network I/O and does
// not read the credentials: what they contain is each check's business, so a
// missing or broken credentials file gives a CredentialsUnavailable verdict
// instead of keeping the exporter from starting.
func New(cfg *Entry, logger *slog.Logger, opts ...provider.Option) (*Checker, error) {
	if cfg == nil || cfg.Project == "" {
		return nil, errors.New("project is required")
	}
	c := &Checker{
		project:         cfg.Project,
		filter:          cfg.Filter,
		endpoint:        strings.TrimRight(cfg.Endpoint, "/"),
		credentialsFile: cfg.CredentialsFile,
		logger:          logger,
		dialer:          provider.Apply(opts).Dialer(&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}),
		regions:         cfg.Regions,
		mins:            cfg.MinQuotaHeadroom,
		metrics:         slices.Sorted(maps.Keys(cfg.MinQuotaHeadroom)),
		sourceImage:     cfg.SourceImage,
	}
	if c.sourceImage != "" {
		img, err := ParseSourceImage(c.sourceImage)
		if err != nil {
			return nil, fmt.Errorf("source_image: %w", err)
		}
		c.image = img
	}
	c.base = http.DefaultTransport.(*http.Transport).Clone()
	c.base.DisableKeepAlives = true
	c.base.DialContext = c.dialer.DialContext
	// Compute's and the token endpoint's headers alike.
	if err := provider.BoundHeaders(c.base); err != nil {
		return nil, err
	}
	c.deadlines = newDeadlineTransport()
	return c, nil
}

// Targets implements provider.Checker.
func (c *Checker) Targets() []provider.Target {
	return []provider.Target{{Name: TargetName, Address: "projects/" + c.project}}
}

// Check implements provider.Checker: exactly one HTTP request to Compute
// (plus a token fetch when the cached token has expired), no retries;
// with regions, one regions.get per region after it, then the list paged
// with the filter (at most maxDomainPages pages) to count the proxies per
// region, and with source_image one images.get while the verdict is still
// Ready. Its
// message is bounded (provider.BoundString) whatever Compute said.
func (c *Checker) Check(ctx context.Context, logger *slog.Logger, target string) provider.Verdict {
	if target != TargetName {
		return provider.Verdict{Reason: provider.ReasonUnknown, Message: fmt.Sprintf("gcp has no target %q", provider.BoundString(target))}
	}
	v := c.check(ctx, logger)
	v.Message = provider.BoundString(v.Message)
	return v
}

// check is Check's work: the list call, then the checks the entry opted
// into, in the order of their reasons' precedence (docs/configuration.md:
// "GCP"): list > RegionDown > QuotaExhausted > ImageUnavailable.
func (c *Checker) check(ctx context.Context, logger *slog.Logger) provider.Verdict {
	cl, release, err := c.acquire(ctx, logger)
	if err != nil {
		return verdict(ctx, logger, err)
	}
	defer release()
	client := cl.instances

	// The generated pagination code builds its request without the context;
	// the request carries an id that deadlineTransport trades for ctx.
	id, done := c.deadlines.register(ctx, 0)
	defer done()
	cctx := callctx.SetHeaders(ctx, checkIDHeader, id)
	req := &computepb.AggregatedListInstancesRequest{
		Project:    c.project,
		MaxResults: proto.Uint32(1),
	}
	if c.filter != "" {
		req.Filter = proto.String(c.filter)
	}
	// No retries: a check is one request, and the scrape budget is spent
	// better on an honest verdict than on a backoff.
	it := client.AggregatedList(cctx, req, gax.WithRetry(func() gax.Retryer { return nil }))
	logger.Debug("listing instances", "project", c.project, "filter", c.filter, "max_results", 1)
	// InternalFetch fetches exactly one page; the iterator's Next would go on
	// to the next page when the first one holds no item.
	pairs, _, err := it.InternalFetch(1, "")
	if err != nil {
		return verdict(ctx, logger, fmt.Errorf("list instances of project %s: %w", c.project, err))
	}
	resp, _ := it.Response.(*computepb.InstanceAggregatedList)
	if resp == nil || resp.GetKind() != aggregatedListKind {
		kind := ""
		if resp != nil {
			kind = resp.GetKind()
		}
		kind = provider.BoundString(kind)
		msg := fmt.Sprintf("Compute answered 200 with kind %q instead of %s", kind, aggregatedListKind)
		logger.Debug("bad response", "kind", kind)
		return provider.Verdict{Reason: provider.ReasonBadResponse, Message: msg}
	}
	v := provider.Verdict{Reason: provider.ReasonReady, Message: readyMessage(pairs)}
	// caps are the regions' own capacities, proxies the proxies counted
	// per region: both set only when the entry's domains are exported.
	var (
		caps    []provider.Capacity
		proxies map[string]int64
	)
	if len(c.regions) > 0 {
		v, caps = c.checkQuotas(ctx, logger, cl.regions, v)
	}
	// One region is no set of failure domains: losing it leaves nothing
	// to move to, and its after-loss would always be minus its proxies.
	// Domains are the regions of an entry with two or more
	// (docs/configuration.md: "Capacity per region").
	if caps != nil && len(c.regions) > 1 {
		var why string
		if proxies, why, err = c.domainProxies(ctx, logger, client, caps); err != nil {
			return verdict(ctx, logger, err)
		}
		if why != "" {
			v.Message += "; " + why
		}
	}
	// A reason of higher precedence stands whatever the image is, so the
	// image is not asked for.
	if c.sourceImage != "" && v.Reason == provider.ReasonReady {
		v = c.checkImage(ctx, logger, cl.images, v)
	}
	// An image that is unavailable leaves no room however much quota is.
	v.Capacity = v.Capacity.Blocked(v.Reason)
	if proxies != nil {
		blocked := v.Reason != provider.ReasonReady && v.Reason != ReasonQuotaExhausted && v.Reason != ReasonRegionDown
		v.Domains = regionDomains(c.regions, caps, proxies, blocked)
		if worst := provider.WorstLoss(v.Domains); worst != "" {
			v.Message += "; " + worst
		}
	}
	return v
}

// domainProxies counts the proxies per region for the entry's domains
// (countProxies), or says why the entry exports none: a region whose
// capacity is not known (no quota data, needs of 0 only) leaves the others'
// after-loss unknown, and a count past the page bound is not a count. An
// error of a page is the check's, classified as the list call's.
func (c *Checker) domainProxies(ctx context.Context, logger *slog.Logger, client *compute.InstancesClient, caps []provider.Capacity) (map[string]int64, string, error) {
	for i, cp := range caps {
		if !cp.Known {
			return nil, fmt.Sprintf("no domain series: region %s has no known capacity", c.regions[i]), nil
		}
	}
	counts, more, err := c.countProxies(ctx, logger, client)
	if err != nil {
		return nil, "", err
	}
	if more {
		return nil, fmt.Sprintf("no domain series: more than %d pages of %d instances match the filter, the proxies per region are not counted past them",
			maxDomainPages, domainPageSize), nil
	}
	return counts, "", nil
}

// readyMessage says what the one page showed; with maxResults=1 that is at
// most one instance.
func readyMessage(pairs []compute.InstancesScopedListPair) string {
	for _, p := range pairs {
		if in := p.Value.GetInstances(); len(in) > 0 {
			return fmt.Sprintf("Compute answered: managed instance %s in %s", provider.BoundString(in[0].GetName()), provider.BoundString(p.Key))
		}
	}
	return "Compute answered: no managed instance on the first page"
}

// Close implements provider.Closer. A check still running keeps its client
// until it returns; the last one out closes it.
func (c *Checker) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	c.base.CloseIdleConnections()
	return c.closeIdleClient()
}

func (c *Checker) closeIdleClient() error {
	if c.active > 0 || c.clients == nil {
		return nil
	}
	err := c.clients.close()
	c.clients = nil
	return err
}

// acquire returns the clients for the current credentials, building them
// when they changed. The release func must be called when the check is
// done.
func (c *Checker) acquire(ctx context.Context, logger *slog.Logger) (*clients, func(), error) {
	key := "adc"
	var data []byte
	if c.credentialsFile != "" {
		var err error
		data, err = boundedfile.Read(c.credentialsFile, boundedfile.Credentials)
		if err != nil {
			return nil, nil, &credentialsError{err: fmt.Errorf("read credentials_file: %w", err)}
		}
		key = fmt.Sprintf("file:%x", sha256.Sum256(data))
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, nil, errors.New("checker is closed (replaced by a reload)")
	}
	if c.clients == nil || c.credKey != key {
		cl, err := c.newClients(ctx, data)
		if err != nil {
			return nil, nil, err
		}
		// The replaced clients are not closed: closing a REST client only
		// drops its http.Client (ours, nothing to release) and would make a
		// check still using it fail.
		if c.clients != nil {
			logger.Info("credentials changed, new Compute client built")
		}
		c.clients, c.credKey = cl, key
	}
	c.active++
	cl := c.clients
	return cl, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.active--
		if c.closed {
			_ = c.closeIdleClient()
		}
	}, nil
}

// newClients builds the Compute REST clients the entry needs, whose
// requests go through deadlineTransport, then the auth transport, then
// base. It does no network I/O except, for ADC off GCE, the one
// metadata-server probe of the process, which is bounded by ctx.
//
// With regions it builds the Regions client too, with source_image the
// Images client, all with the same options: one HTTP client, so one token
// serves them all.
func (c *Checker) newClients(ctx context.Context, credsJSON []byte) (*clients, error) {
	opts, err := c.clientOptions(ctx, credsJSON)
	if err != nil {
		return nil, err
	}
	instances, err := compute.NewInstancesRESTClient(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("build Compute client: %w", err)
	}
	cl := &clients{instances: instances}
	if len(c.regions) > 0 {
		if cl.regions, err = compute.NewRegionsRESTClient(ctx, opts...); err != nil {
			return nil, errors.Join(fmt.Errorf("build Compute regions client: %w", err), cl.close())
		}
	}
	if c.sourceImage != "" {
		if cl.images, err = compute.NewImagesRESTClient(ctx, opts...); err != nil {
			return nil, errors.Join(fmt.Errorf("build Compute images client: %w", err), cl.close())
		}
	}
	return cl, nil
}

// clientOptions are the options of every Compute REST client of the
// checker: the endpoint override and an HTTP client whose requests go
// through deadlineTransport, the auth transport, then base.
func (c *Checker) clientOptions(ctx context.Context, credsJSON []byte) ([]option.ClientOption, error) {
	creds, err := c.credentials(ctx, credsJSON)
	if err != nil {
		return nil, &credentialsError{err: err}
	}
	// Every token error is marked, so that a token endpoint that refuses is
	// not mistaken for an unreachable Compute; and refreshing blocks inside
	// the check instead of running in a goroutine that outlives it.
	creds.TokenProvider = auth.NewCachedTokenProvider(markedTokenProvider{creds.TokenProvider},
		&auth.CachedTokenProviderOptions{DisableAsyncRefresh: true})
	authed, err := httptransport.NewClient(&httptransport.Options{
		Credentials:      creds,
		BaseRoundTripper: provider.BoundedTransport(c.base),
		DisableTelemetry: true,
		// The auth library logs whole token exchanges (signed assertions,
		// access tokens) at debug level: it never gets our logger. Its
		// failures reach us as errors, which is all a verdict needs.
		Logger: discardLogger,
	})
	if err != nil {
		return nil, &credentialsError{err: fmt.Errorf("build authenticated transport: %w", err)}
	}
	d := c.deadlines.wrap(authed.Transport)
	opts := []option.ClientOption{option.WithHTTPClient(&http.Client{Transport: d})}
	if c.endpoint != "" {
		opts = append(opts, option.WithEndpoint(c.endpoint))
	}
	return opts, nil
}

// credentialsFromFile parses a credentials file; it makes no request.
func credentialsFromFile(path string, credsJSON []byte, opts *credentials.DetectOptions) (*auth.Credentials, error) {
	var f struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(credsJSON, &f); err != nil {
		return nil, fmt.Errorf("credentials_file %s: not a JSON credentials file: %w", path, err)
	}
	if f.Type == "" {
		return nil, fmt.Errorf("credentials_file %s has no type field", path)
	}
	creds, err := credentials.NewCredentialsFromJSON(credentials.CredType(f.Type), credsJSON, opts)
	if err != nil {
		return nil, fmt.Errorf("credentials_file %s: %w", path, err)
	}
	return creds, nil
}

// CheckFiles parses the credentials file the way a check does, without
// fetching a token: what --config.check warns about. Application Default
// Credentials are not looked at: where they come from depends on where the
// exporter runs.
func CheckFiles(cfg *Entry) error {
	if cfg.CredentialsFile == "" {
		return nil
	}
	b, err := boundedfile.Read(cfg.CredentialsFile, boundedfile.Credentials)
	if err != nil {
		return err
	}
	_, err = credentialsFromFile(cfg.CredentialsFile, b, &credentials.DetectOptions{
		Scopes: compute.DefaultAuthScopes(), Logger: discardLogger,
	})
	return err
}

// credentials loads the credentials file, or detects Application Default
// Credentials. The file's own type field picks its kind: the operator
// configured it, so any kind the auth library supports is accepted.
func (c *Checker) credentials(ctx context.Context, credsJSON []byte) (*auth.Credentials, error) {
	opts := &credentials.DetectOptions{
		Scopes:              compute.DefaultAuthScopes(),
		DisableAsyncRefresh: true,
		Client:              &http.Client{Transport: provider.BoundedTransport(c.base)},
		Logger:              discardLogger, // see newClient: it logs secrets

	}
	if credsJSON != nil {
		return credentialsFromFile(c.credentialsFile, credsJSON, opts)
	}
	// Detection probes the metadata server once per process to learn
	// whether it runs on GCE, without a context of its own; asking first
	// with ours bounds that probe by the check and memoizes the answer.
	metadata.OnGCEWithContext(ctx)
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("detect default credentials: %w", err)
	}
	creds, err := credentials.DetectDefault(opts)
	if err != nil {
		return nil, fmt.Errorf("application default credentials: %w", err)
	}
	return creds, nil
}

// markedTokenProvider marks every error of the wrapped provider as a
// credentials problem.
type markedTokenProvider struct{ tp auth.TokenProvider }

func (m markedTokenProvider) Token(ctx context.Context) (*auth.Token, error) {
	t, err := m.tp.Token(ctx)
	if err != nil {
		return nil, &credentialsError{err: fmt.Errorf("fetch access token: %w", err)}
	}
	return t, nil
}

// credentialsError is a failure to load credentials or to fetch a token.
type credentialsError struct{ err error }

func (e *credentialsError) Error() string { return e.err.Error() }
func (e *credentialsError) Unwrap() error { return e.err }
