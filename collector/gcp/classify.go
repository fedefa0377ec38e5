package gcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"google.golang.org/api/googleapi"
	"google.golang.org/protobuf/proto"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// Reasons is the closed reason set of a GCP project (docs/metrics.md: "Reasons"):
// the HTTP API's, plus APIDisabled and the reasons of the opt-in checks,
// which EntryReasons leaves out of an entry that does not opt in.
func Reasons() provider.ReasonSet {
	return provider.AuthenticatedHTTPReasons(provider.ReasonDef{Reason: ReasonAPIDisabled, Up: true},
		provider.ReasonDef{Reason: ReasonQuotaExhausted, Up: true},
		provider.ReasonDef{Reason: ReasonRegionDown, Up: true},
		provider.ReasonDef{Reason: ReasonImageUnavailable, Up: true})
}

// EntryReasons is the reason set of one entry: RegionDown and
// QuotaExhausted only with regions, ImageUnavailable only with
// source_image, so that an entry without them exports the series it did
// before they existed.
func EntryReasons(g *Entry) provider.ReasonSet {
	var without []provider.Reason
	if len(g.Regions) == 0 {
		without = append(without, ReasonRegionDown, ReasonQuotaExhausted)
	}
	if g.SourceImage == "" {
		without = append(without, ReasonImageUnavailable)
	}
	return Reasons().Without(without...)
}

// Name is the kind's name: its configuration section and provider label.
const Name = "gcp"

// ReasonAPIDisabled is the verdict when the Compute API answered that it
// is not enabled in the project (docs/metrics.md: "Reasons"); the API answered, so
// it is up.
const ReasonAPIDisabled provider.Reason = "APIDisabled"

// verdict turns the error of a check into its verdict and logs the error,
// which carries more than the message does. Both are bounded: an error
// may quote whatever Compute or a proxy answered.
func verdict(ctx context.Context, logger *slog.Logger, err error) provider.Verdict {
	reason, msg := classify(ctx, err)
	level := slog.LevelDebug
	if reason == provider.ReasonUnknown {
		// An error no reason describes is worth a look without debug.
		level = slog.LevelWarn
	}
	logger.Log(ctx, level, "check failed", "reason", reason, "err", provider.BoundString(err.Error()))
	return provider.Verdict{Reason: reason, Message: provider.BoundString(msg)}
}

// classify maps an error to a reason of the gcp set and a message for
// people. The order matters: an ended context wins whatever the error says
// (docs/configuration.md: "Timeouts"), and a token fetch that failed on the network is a credentials
// problem, not an unreachable Compute.
func classify(ctx context.Context, err error) (provider.Reason, string) {
	if provider.Ended(ctx) || errors.Is(err, context.DeadlineExceeded) {
		return provider.ReasonTimeout, fmt.Sprintf("no answer from Compute before the deadline: %v", err)
	}
	var cerr *credentialsError
	if errors.As(err, &cerr) {
		return provider.ReasonCredentialsUnavailable, fmt.Sprintf("no usable credentials: %v", cerr)
	}
	var gerr *googleapi.Error
	if errors.As(err, &gerr) {
		return classifyAPIError(gerr)
	}
	var tooLarge *answerTooLargeError
	if errors.As(err, &tooLarge) {
		return provider.ReasonBadResponse, fmt.Sprintf("Compute's answer was refused: %v", err)
	}
	// The body of a 200 did not decode into the answer asked for: an
	// aggregated list, unless the call said otherwise (answerOf).
	if errors.Is(err, proto.Error) {
		what := "an instance list"
		var a *answerOfError
		if errors.As(err, &a) {
			what = a.what
		}
		return provider.ReasonBadResponse, fmt.Sprintf("Compute answered 200 with a body that is not %s: %v", what, err)
	}
	if r, ok := provider.TransportErrors.Classify(ctx, err); ok {
		return r, transportMessage(r, err)
	}
	return provider.ReasonUnknown, err.Error()
}

// answerOfError names the answer a call other than the instance list
// expected, for the message of a body that does not decode as one.
type answerOfError struct {
	what string // "an image", "a region"
	err  error
}

func (e *answerOfError) Error() string { return e.err.Error() }
func (e *answerOfError) Unwrap() error { return e.err }

// answerOf marks err as the failure of a call whose answer is what.
func answerOf(what string, err error) error { return &answerOfError{what: what, err: err} }

// transportMessage says what a transport reason means for Compute.
func transportMessage(r provider.Reason, err error) string {
	switch r {
	case provider.ReasonTimeout:
		return fmt.Sprintf("no answer from Compute before the deadline: %v", err)
	case provider.ReasonBadResponse:
		return fmt.Sprintf("Compute's answer was refused: %v", err)
	case provider.ReasonTLSError:
		return fmt.Sprintf("TLS with the Compute endpoint failed: %v", err)
	case provider.ReasonDNSFailed:
		return fmt.Sprintf("the Compute endpoint's name did not resolve: %v", err)
	default:
		return fmt.Sprintf("Compute endpoint unreachable: %v", err)
	}
}

// Markers Compute puts in its error envelope: errors[].reason in the old
// style, details[] ErrorInfo.reason and error.status in the new one.
// apierror.APIError.Reason() finds none of them in real Compute bodies
// (the envelope's errors array keeps it from parsing the details), so they
// are read from the *googleapi.Error itself.
var (
	disabledReasons = map[string]bool{
		"accessNotConfigured": true, // errors[].reason
		"SERVICE_DISABLED":    true, // ErrorInfo.reason
	}
	rateLimitReasons = map[string]bool{
		"rateLimitExceeded":     true,
		"userRateLimitExceeded": true,
		"quotaExceeded":         true,
		"RATE_LIMIT_EXCEEDED":   true,
		"RESOURCE_EXHAUSTED":    true, // error.status
	}
)

// classifyAPIError classifies an HTTP answer from Compute (or from
// whatever answered at its address).
func classifyAPIError(e *googleapi.Error) (provider.Reason, string) {
	markers := apiErrorMarkers(e)
	msg := apiErrorMessage(e)
	has := func(set map[string]bool) bool {
		for _, m := range markers {
			if set[m] {
				return true
			}
		}
		return false
	}
	switch {
	case e.Code == http.StatusTooManyRequests:
		return provider.ReasonRateLimited, msg
	case e.Code == http.StatusForbidden && has(disabledReasons):
		return ReasonAPIDisabled, msg
	// Compute has long answered some rate limits with 403.
	case e.Code == http.StatusForbidden && has(rateLimitReasons):
		return provider.ReasonRateLimited, msg
	case e.Code == http.StatusForbidden:
		return provider.ReasonForbidden, msg
	case e.Code == http.StatusUnauthorized:
		return provider.ReasonUnauthorized, msg
	case e.Code == http.StatusNotFound:
		return provider.ReasonNotFound, msg
	case e.Code == http.StatusBadRequest:
		return provider.ReasonInvalidRequest, msg
	case e.Code >= 500 && e.Code <= 599:
		return provider.ReasonServerError, msg
	}
	return provider.ReasonUnknown, msg
}

// apiErrorMarkers collects errors[].reason, the ErrorInfo reasons of
// details[] and error.status.
func apiErrorMarkers(e *googleapi.Error) []string {
	var out []string
	for _, item := range e.Errors {
		out = append(out, item.Reason)
	}
	for _, d := range e.Details {
		m, ok := d.(map[string]any)
		if !ok || m["@type"] != "type.googleapis.com/google.rpc.ErrorInfo" {
			continue
		}
		if r, ok := m["reason"].(string); ok {
			out = append(out, r)
		}
	}
	// googleapi.Error has no field for the status; the body has it.
	var env struct {
		Error struct {
			Status string `json:"status"`
		} `json:"error"`
	}
	if json.Unmarshal([]byte(e.Body), &env) == nil && env.Error.Status != "" {
		out = append(out, env.Error.Status)
	}
	return out
}

// apiErrorMessage is short: the code, the first reason and Compute's own
// message, but never a whole HTML page from a proxy in between.
func apiErrorMessage(e *googleapi.Error) string {
	text := provider.BoundString(e.Message)
	if text == "" {
		text = "no JSON error in the body"
		if ct := e.Header.Get("Content-Type"); ct != "" {
			text += " (" + provider.BoundString(ct) + ")"
		}
	}
	if len(e.Errors) > 0 && e.Errors[0].Reason != "" {
		return fmt.Sprintf("Compute answered HTTP %d %s: %s", e.Code, provider.BoundString(e.Errors[0].Reason), text)
	}
	return fmt.Sprintf("Compute answered HTTP %d: %s", e.Code, text)
}
