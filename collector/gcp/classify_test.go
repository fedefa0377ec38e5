package gcp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/googleapis/gax-go/v2/apierror"
	"google.golang.org/api/googleapi"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// apiError is what the generated code returns for an HTTP answer: the
// envelope decoded by googleapi.
func apiError(t *testing.T, status int, body string) error {
	t.Helper()
	res := &http.Response{StatusCode: status, Header: http.Header{"Content-Type": {"application/json"}}}
	err := googleapi.CheckResponseWithBody(res, []byte(body))
	if err == nil {
		t.Fatalf("status %d gave no error", status)
	}
	return err
}

// TestClassifyEnvelopes covers markers the recorded bodies do not combine:
// each marker alone must be enough, and an apierror.APIError around the
// googleapi error (what newer iterators return) must classify the same.
func TestClassifyEnvelopes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		status int
		body   string
		want   provider.Reason
	}{
		{"ErrorInfo SERVICE_DISABLED without errors array", 403,
			`{"error":{"code":403,"message":"Compute Engine API has not been used in project 1 before or it is disabled.","status":"PERMISSION_DENIED","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"SERVICE_DISABLED","domain":"googleapis.com"}]}}`,
			ReasonAPIDisabled},
		{"accessNotConfigured without details", 403,
			`{"error":{"code":403,"message":"Access Not Configured.","errors":[{"domain":"usageLimits","reason":"accessNotConfigured","message":"Access Not Configured."}]}}`,
			ReasonAPIDisabled},
		{"403 RESOURCE_EXHAUSTED status only", 403,
			`{"error":{"code":403,"message":"Quota exceeded.","status":"RESOURCE_EXHAUSTED"}}`,
			provider.ReasonRateLimited},
		{"403 with an unrelated ErrorInfo", 403,
			`{"error":{"code":403,"message":"Permission denied.","status":"PERMISSION_DENIED","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"IAM_PERMISSION_DENIED","domain":"iam.googleapis.com"}]}}`,
			provider.ReasonForbidden},
		{"SERVICE_DISABLED in a detail of another type is not a marker", 403,
			`{"error":{"code":403,"message":"Forbidden.","details":[{"@type":"type.googleapis.com/google.rpc.LocalizedMessage","reason":"SERVICE_DISABLED"}]}}`,
			provider.ReasonForbidden},
		{"429 without a body", 429, ``, provider.ReasonRateLimited},
		{"504 plain text", 504, `upstream request timeout`, provider.ReasonServerError},
		{"409 is no reason of the set", 409,
			`{"error":{"code":409,"message":"Conflict.","errors":[{"reason":"conflict"}]}}`,
			provider.ReasonUnknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := apiError(t, tc.status, tc.body)
			for _, e := range []error{
				err,
				fmt.Errorf("list instances: %w", err),
				wrapAPIError(t, err),
			} {
				if got, msg := classify(context.Background(), e); got != tc.want {
					t.Errorf("%T: reason %s (%s), want %s", e, got, msg, tc.want)
				}
			}
		})
	}
}

func wrapAPIError(t *testing.T, err error) error {
	t.Helper()
	ae, ok := apierror.FromError(err)
	if !ok {
		t.Fatalf("apierror.FromError(%v) failed", err)
	}
	return ae
}

// TestClassifyOrder pins the precedence of docs/configuration.md's "Timeouts" and docs/metrics.md's "Reasons".
func TestClassifyOrder(t *testing.T) {
	t.Parallel()
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	creds := &credentialsError{err: fmt.Errorf("fetch access token: %w", &googleapi.Error{Code: 503})}

	if got, _ := classify(ended, apiError(t, 503, ``)); got != provider.ReasonTimeout {
		t.Errorf("ended context: %s, want Timeout whatever the error says", got)
	}
	if got, _ := classify(context.Background(), creds); got != provider.ReasonCredentialsUnavailable {
		t.Errorf("token fetch answered 503: %s, want CredentialsUnavailable", got)
	}
	if got, _ := classify(context.Background(), errors.New("something new")); got != provider.ReasonUnknown {
		t.Errorf("unknown error: %s, want Unknown", got)
	}
}
