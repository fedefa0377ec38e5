package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// ReasonAdmissionDenied says the API server's admission chain refused the
// dry-run create of the entry's pod_template (docs/metrics.md: "Reasons"):
// PodSecurity, LimitRanger, the ServiceAccount admission, a webhook or
// admission policy, a Pod invalid after mutation, or a webhook that cannot
// take a dry run. The API server answered, so up = 1. RBAC's refusal is
// Forbidden and the ResourceQuota admission's QuotaExhausted, as for
// can_i and min_quota_headroom.
const ReasonAdmissionDenied provider.Reason = "AdmissionDenied"

// DefaultGenerateName is the generateName of the dry-run Pod when the
// template has neither a generateName nor a name to derive one from.
const DefaultGenerateName = "provider-health-dry-run-"

// EntryReasons is the reason set of one entry: the opt-in reasons only
// where their key is set (docs/configuration.md), so that a configuration
// without them exports exactly the series it did before. QuotaExhausted
// comes with min_quota_headroom and with pod_template, whose dry run meets
// the ResourceQuota admission; AdmissionDenied with pod_template only;
// Unschedulable with schedule only.
func EntryReasons(k *Entry) provider.ReasonSet {
	set := Reasons()
	if k == nil || !k.Schedule {
		set = set.Without(ReasonUnschedulable)
	}
	if k == nil || k.PodTemplate.Path == "" {
		set = set.Without(ReasonAdmissionDenied)
		if k == nil || len(k.MinQuotaHeadroom) == 0 {
			set = set.Without(ReasonQuotaExhausted)
		}
	}
	return set
}

// placement is an entry's pod_template, ready to send.
type placement struct {
	file      string
	namespace string
	// body is the Pod as sent: the template with its name cleared and a
	// generateName, in namespace, as JSON.
	body []byte
	// wholePod: an admitted Pod is also decoded whole, for schedule.
	wholePod bool
	// last is the outcome of the last dry run, for the status page.
	last atomic.Pointer[DryRunOutcome]
}

// DryRunOutcome is what the last dry run of a pod_template gave.
type DryRunOutcome struct {
	Time    time.Time
	Reason  provider.Reason
	Message string
}

// newPlacement prepares the dry run of cfg's pod_template; nil when the
// entry has none.
func newPlacement(cfg *Entry) (*placement, error) {
	pt := cfg.PodTemplate
	if pt.Path == "" {
		return nil, nil
	}
	if pt.Pod == nil {
		return nil, fmt.Errorf("kubernetes %q: pod_template %s was not read (ReadPodTemplate)", cfg.Name, pt.Path)
	}
	body, err := json.Marshal(dryRunPod(pt.Pod, cfg.Namespace))
	if err != nil {
		return nil, fmt.Errorf("kubernetes %q: pod_template %s: %w", cfg.Name, pt.Path, err)
	}
	return &placement{file: pt.Path, namespace: cfg.Namespace, body: body, wholePod: cfg.Schedule}, nil
}

// dryRunPod is the Pod the dry run sends: the template as the operator
// would create it, less what only the API server sets (a template taken
// from `kubectl get -o yaml` has those, and the API server refuses a
// create with a resourceVersion). The name is cleared for a generateName,
// so that the answer can never be "already exists" and no two checks
// compete for a name.
func dryRunPod(tmpl *corev1.Pod, namespace string) *corev1.Pod {
	pod := tmpl.DeepCopy()
	gen := pod.GenerateName
	if gen == "" && pod.Name != "" {
		gen = pod.Name + "-"
	}
	if gen == "" {
		gen = DefaultGenerateName
	}
	pod.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
	pod.Name, pod.GenerateName, pod.Namespace = "", gen, namespace
	pod.ResourceVersion, pod.UID, pod.Generation = "", "", 0
	pod.CreationTimestamp, pod.DeletionTimestamp, pod.DeletionGracePeriodSeconds = metav1.Time{}, nil, nil
	pod.ManagedFields = nil
	pod.Status = corev1.PodStatus{}
	return pod
}

// dryRun runs the placement part of a check: after a Ready list and Ready
// headroom (v), one POST of the template with dryRun=All. Whatever v is,
// the verdict carries the template's details and the last dry run's
// outcome.
//
// The Pod admission returned is returned too when it was admitted and the
// entry sets schedule (nil otherwise).
func (c *Checker) dryRun(ctx context.Context, logger *slog.Logger, cl *client, v provider.Verdict) (provider.Verdict, *corev1.Pod) {
	p := c.placement
	var got admission
	if v.Reason == provider.ReasonReady {
		var reason provider.Reason
		var msg string
		reason, msg, got = p.create(ctx, logger, cl)
		p.last.Store(&DryRunOutcome{Time: time.Now(), Reason: reason, Message: msg})
		if reason == provider.ReasonReady {
			v.Message += "; " + msg
		} else {
			v.Reason, v.Message = reason, msg
		}
	}
	f, _ := v.Facts.(*Facts)
	if f == nil {
		f = &Facts{Namespace: p.namespace}
		v.Facts = f
	}
	f.PodTemplate, f.DryRun = p.file, p.last.Load()
	f.needs = got.needs
	if got.err != nil {
		f.needsErr = provider.BoundString(got.err.Error())
	}
	return v, got.pod
}

// admission is what an admitted dry run's answer gave: the Pod's needs
// for the quota capacity and, with schedule, the Pod itself; err says
// what of it could not be read.
type admission struct {
	needs quotaNeeds
	pod   *corev1.Pod
	err   error
}

// create sends the dry run and judges the answer. One request, no
// retries, under ctx. An admitted Pod's needs are read from the answer
// for the capacity (decodeQuotaNeeds): what cannot be read there is an
// error beside a Ready verdict, never the verdict.
//
// With schedule the admitted Pod is also decoded whole (decodeWholePod), as
// admission left it (defaults, LimitRange requests, mutating webhooks), for
// the node fit.
func (p *placement) create(ctx context.Context, logger *slog.Logger, cl *client) (provider.Reason, string, admission) {
	defer utilnet.CloseIdleConnectionsFor(cl.http.Transport)
	tr := &trace{}
	ctx = context.WithValue(ctx, traceKey{}, tr)
	ctx = klog.NewContext(ctx, logr.FromSlogHandler(logger.Handler()))

	req := cl.rest.Post().Namespace(p.namespace).Resource("pods").
		VersionedParams(&metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}, scheme.ParameterCodec).
		SetHeader("Content-Type", "application/json").Body(p.body).MaxRetries(0)
	u := req.URL()
	// The one request of the exporter that could change a cluster: it is
	// never sent without dryRun=All, whatever becomes of the code above.
	if q := u.Query()["dryRun"]; len(q) != 1 || q[0] != metav1.DryRunAll {
		return provider.ReasonUnknown, fmt.Sprintf("refusing to send %s without dryRun=All", u.Path), admission{}
	}
	logger.Debug("dry-run create of pod_template", "file", p.file, "request", http.MethodPost+" "+u.RequestURI())
	res := req.Do(ctx)
	var code int
	res.StatusCode(&code)
	logger.Debug("dry-run answered", "status", code)
	// Metadata only: the quantities of the Pod sent back are not parsed
	// (decode.go).
	pod, err := podMeta(res)
	if err != nil {
		reason, msg := p.judge(ctx, err, tr)
		logger.Debug("dry-run refused", "reason", reason, "err", provider.BoundString(err.Error()))
		return reason, msg, admission{}
	}
	msg := "dry-run create of pod_template in namespace " + p.namespace + " admitted"
	if pod.GenerateName == "" && pod.Name == "" {
		// Not the object just sent: a proxy or another server answered.
		return provider.ReasonBadResponse, msg + ", but the answer is not the Pod sent", admission{}
	}
	var warned []string
	for _, w := range res.Warnings() {
		warned = append(warned, w.Text)
	}
	if len(warned) > 0 {
		msg += " with warnings: " + provider.BoundString(strings.Join(warned, "; "))
	}
	body, protobuf, err := answer(res)
	var got admission
	if err == nil {
		got.needs, err = decodeQuotaNeeds(body, protobuf)
	}
	if err == nil && p.wholePod {
		got.pod, err = decodeWholePod(body, protobuf)
	}
	if err != nil {
		got.err = err
		logger.Debug("the admitted Pod's requests were not read", "err", provider.BoundString(err.Error()))
	}
	return provider.ReasonReady, msg, got
}

// The API server tells admission refusals apart only by their text; each
// pattern is pinned by a test against the real kube-apiserver
// (dryrun_integration_test.go). The webhook ones come first: a webhook
// chooses its own status code, so its denial may carry any of them.
var (
	// webhookNoDryRun: a webhook whose sideEffects is Unknown or Some
	// (apiserver's webhookerrors.NewDryRunUnsupportedErr).
	webhookNoDryRun = regexp.MustCompile(`^admission webhook "([^"]*)" does not support dry run`)
	webhookDenied   = regexp.MustCompile(`^admission webhook "([^"]*)" denied the request`)
	// webhookFailed: the call itself failed, with failurePolicy Fail.
	webhookFailed = regexp.MustCompile(`failed calling webhook "([^"]*)"`)
	policyDenied  = regexp.MustCompile(`\bValidatingAdmissionPolicy '([^']*)' with binding '([^']*)' denied request`)
	// rbacDenied: the authorization filter's refusal, before admission
	// (apiserver's responsewriters.forbiddenMessage).
	rbacDenied    = regexp.MustCompile(`^pods is forbidden: User ".*" cannot create resource "pods" in API group "" in the namespace "`)
	quotaExceeded = regexp.MustCompile(`\bis forbidden: exceeded quota: `)
)

// plugins name the built-in admission plugin that refused, from its
// message, for the plugins whose message does not say its name.
var plugins = []struct {
	name string
	re   *regexp.Regexp
}{
	{"PodSecurity", regexp.MustCompile(`\bviolates PodSecurity "`)},
	{"LimitRanger", regexp.MustCompile(`\b(maximum|minimum) \S+ usage per (Container|Pod) is |\blimit to request ratio per (Container|Pod) is `)},
	{"ServiceAccount", regexp.MustCompile(`\berror looking up service account |\bno API token found for service account `)},
	{"ResourceQuota", regexp.MustCompile(`\bstatus unknown for quota: |\bexceeded quota: `)},
	{"NamespaceLifecycle", regexp.MustCompile(`\bbecause it is being terminated\b`)},
}

// judge gives the verdict of a dry run the API server did not admit
// (docs/configuration.md: "Placement: pod_template"): RBAC's refusal is
// Forbidden, the ResourceQuota admission's QuotaExhausted, any other
// refusal AdmissionDenied with the server's words; what is not a refusal
// (no answer, 401, 404, 429, 5xx) is classified as the list call's
// errors are.
func (p *placement) judge(ctx context.Context, err error, tr *trace) (provider.Reason, string) {
	what := "dry-run create of pod_template in namespace " + p.namespace
	if provider.Ended(ctx) {
		return provider.ReasonTimeout, what + ": " + provider.BoundString(err.Error())
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return classify(ctx, err, tr), what + ": " + provider.BoundString(err.Error())
	}
	st := status.Status()
	text := provider.BoundString(st.Message)
	if text == "" {
		text = provider.BoundString(err.Error())
	}
	if m := webhookNoDryRun.FindStringSubmatch(st.Message); m != nil {
		return ReasonAdmissionDenied, fmt.Sprintf("%s: admission webhook %q cannot take a dry run (its sideEffects is Unknown or Some), so the API server refuses every dry run it would see: "+
			"set sideEffects: None (or NoneOnDryRun, if the webhook skips its side effects for dry runs) in its webhook configuration, or leave namespace %s out of its namespaceSelector",
			what, provider.BoundString(m[1]), p.namespace)
	}
	if m := webhookDenied.FindStringSubmatch(st.Message); m != nil {
		return ReasonAdmissionDenied, fmt.Sprintf("%s refused by admission webhook %q: %s", what, provider.BoundString(m[1]), text)
	}
	if m := webhookFailed.FindStringSubmatch(st.Message); m != nil {
		return ReasonAdmissionDenied, fmt.Sprintf("%s refused: admission webhook %q could not be called and fails closed: %s", what, provider.BoundString(m[1]), text)
	}
	if m := policyDenied.FindStringSubmatch(st.Message); m != nil {
		return ReasonAdmissionDenied, fmt.Sprintf("%s refused by ValidatingAdmissionPolicy %q: %s", what, provider.BoundString(m[1]), text)
	}
	switch code := st.Code; {
	case apierrors.IsUnauthorized(err), apierrors.IsTooManyRequests(err), apierrors.IsNotFound(err):
		r, _ := statusReason(err)
		return r, what + ": " + text
	case apierrors.IsForbidden(err) && rbacDenied.MatchString(st.Message):
		return provider.ReasonForbidden, fmt.Sprintf("cannot create pods in namespace %s (%s): %s", p.namespace, what, text)
	case apierrors.IsForbidden(err) && quotaExceeded.MatchString(st.Message):
		return ReasonQuotaExhausted, what + " refused by ResourceQuota: " + text
	case code >= 500 && code <= 599:
		return provider.ReasonServerError, what + ": " + text
	case apierrors.IsInvalid(err):
		return ReasonAdmissionDenied, what + " refused: the Pod is invalid as admission leaves it: " + text
	}
	by := "admission"
	for _, pl := range plugins {
		if pl.re.MatchString(st.Message) {
			by = pl.name
			break
		}
	}
	return ReasonAdmissionDenied, what + " refused by " + by + ": " + text
}

// CheckPodTemplate reads the entry's pod_template again the way the loader
// did and says what the API server would refuse in it for certain: what
// --config.check warns about. The loader has refused a template that is
// unreadable or not a Pod; a warning of that kind means the file changed
// since.
func CheckPodTemplate(cfg *Entry) []string {
	if cfg.PodTemplate.Path == "" {
		return nil
	}
	pt, err := ReadPodTemplate(cfg.PodTemplate.Path)
	if err != nil {
		return []string{"pod_template: " + err.Error()}
	}
	var out []string
	if pt.SHA256() != cfg.PodTemplate.SHA256() && cfg.PodTemplate.SHA256() != "" {
		out = append(out, fmt.Sprintf("pod_template: %s changed since the configuration was loaded", pt.Path))
	}
	spec := pt.Pod.Spec
	if len(spec.Containers) == 0 {
		out = append(out, fmt.Sprintf("pod_template: %s: the Pod has no containers: the API server refuses it as invalid, so every check would be %s", pt.Path, ReasonAdmissionDenied))
	}
	for i, ctr := range spec.Containers {
		if ctr.Name == "" || ctr.Image == "" {
			out = append(out, fmt.Sprintf("pod_template: %s: spec.containers[%d] has no name or no image: the API server refuses it as invalid, so every check would be %s", pt.Path, i, ReasonAdmissionDenied))
		}
	}
	return out
}

// dryRunDetails adds the pod_template's details to d: the file, and the
// last dry run's outcome and when it was (the check that made the verdict
// may not have reached the dry run).
func dryRunDetails(d map[string]string, file string, last *DryRunOutcome) {
	d["podTemplate"] = file
	if last == nil {
		d["dryRun"] = "not run yet: the list call and the headroom checks must pass first"
		return
	}
	d["dryRun"] = string(last.Reason) + ": " + last.Message
	d["dryRunTime"] = last.Time.UTC().Format(time.RFC3339)
}
