package gcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	gax "github.com/googleapis/gax-go/v2"
	"github.com/googleapis/gax-go/v2/callctx"
	"google.golang.org/api/googleapi"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// ReasonImageUnavailable says source_image cannot be used to create an
// instance (docs/metrics.md: "Reasons"): Compute does not know it, or it
// is deprecated to OBSOLETE or DELETED. Compute answered, so up = 1.
const ReasonImageUnavailable provider.Reason = "ImageUnavailable"

// imageFieldMask keeps only what the verdict and the details read of an
// image (see quotaFieldMask for why a header).
const imageFieldMask = "name,family,deprecated"

// The deprecation states of an image that matter here (Compute's
// DeprecationStatus.state): an OBSOLETE or DELETED image fails every
// instance insert, a DEPRECATED one still works.
const (
	stateDeprecated = "DEPRECATED"
	stateObsolete   = "OBSOLETE"
	stateDeleted    = "DELETED"
)

// ImageState is what images.get (or getFromFamily) said of source_image.
// Every string in it is bounded.
type ImageState struct {
	// Configured is source_image as configured.
	Configured string
	// Missing is set when Compute answered 404; the rest is then empty.
	Missing bool
	// Name is the image Compute answered with: for a family, the image
	// the family points to now.
	Name string
	// State and Replacement are the image's deprecation status; State is
	// empty when the image is not deprecated.
	State, Replacement string
}

func (s *ImageState) details(d map[string]string) {
	d["source_image"] = s.Configured
	switch {
	case s.Missing:
		d["source image state"] = "not found"
		return
	case s.State == "":
		d["source image state"] = "not deprecated"
	default:
		d["source image state"] = s.State
	}
	d["source image"] = s.Name
	if s.Replacement != "" {
		d["source image replacement"] = s.Replacement
	}
}

// checkImage is the image part of a check that is still Ready: one
// images.get (or images.getFromFamily) under the same deadline, no
// retries. Not found, OBSOLETE or DELETED gives ImageUnavailable;
// DEPRECATED stays Ready with the replacement in the message; any other
// error is classified as the list call's are.
func (c *Checker) checkImage(ctx context.Context, logger *slog.Logger, client *compute.ImagesClient, v provider.Verdict) provider.Verdict {
	if client == nil {
		return verdict(ctx, logger, errNoImagesClient)
	}
	img, err := c.fetchImage(ctx, logger, client)
	var gerr *googleapi.Error
	if err != nil && (!errors.As(err, &gerr) || gerr.Code != http.StatusNotFound || provider.Ended(ctx)) {
		return verdict(ctx, logger, err)
	}
	st := &ImageState{Configured: c.sourceImage}
	facts, _ := v.Facts.(*Facts)
	if facts == nil {
		facts = &Facts{}
	}
	facts.Image = st
	v.Facts = facts
	if err != nil {
		st.Missing = true
		logger.Debug("source image not found", "source_image", c.sourceImage, "err", provider.BoundString(err.Error()))
		v.Reason = ReasonImageUnavailable
		v.Message = fmt.Sprintf("source image %s not found: %s", c.sourceImage, apiErrorMessage(gerr))
		return v
	}
	st.Name = provider.BoundString(img.GetName())
	st.State = provider.BoundString(img.GetDeprecated().GetState())
	st.Replacement = provider.BoundString(img.GetDeprecated().GetReplacement())
	switch st.State {
	case stateObsolete, stateDeleted:
		v.Reason = ReasonImageUnavailable
		v.Message = fmt.Sprintf("source image %s is %s%s", c.describeImage(st), st.State, replacement(st))
	case stateDeprecated:
		v.Message += fmt.Sprintf("; source image %s is DEPRECATED%s", c.describeImage(st), replacement(st))
	}
	return v
}

// describeImage names the image: for a family, with the image it
// resolved to.
func (c *Checker) describeImage(st *ImageState) string {
	if c.image.Family != "" {
		return fmt.Sprintf("%s (now %s)", c.sourceImage, st.Name)
	}
	return c.sourceImage
}

func replacement(st *ImageState) string {
	if st.Replacement == "" {
		return " (no replacement named)"
	}
	return " (replacement: " + st.Replacement + ")"
}

// fetchImage makes the one images.get, or images.getFromFamily for a
// family, of a check.
func (c *Checker) fetchImage(ctx context.Context, logger *slog.Logger, client *compute.ImagesClient) (*computepb.Image, error) {
	id, done := c.deadlines.register(ctx, smallAnswerLimit)
	defer done()
	cctx := callctx.SetHeaders(ctx, checkIDHeader, id, fieldMaskHeader, imageFieldMask)
	noRetry := gax.WithRetry(func() gax.Retryer { return nil })
	if c.image.Family != "" {
		logger.Debug("getting source image from family", "project", c.image.Project, "family", c.image.Family, "fields", imageFieldMask)
		img, err := client.GetFromFamily(cctx, &computepb.GetFromFamilyImageRequest{Project: c.image.Project, Family: c.image.Family}, noRetry)
		if err != nil {
			return nil, answerOf("an image", fmt.Errorf("get source image %s: %w", c.sourceImage, err))
		}
		return img, nil
	}
	logger.Debug("getting source image", "project", c.image.Project, "image", c.image.Image, "fields", imageFieldMask)
	img, err := client.Get(cctx, &computepb.GetImageRequest{Project: c.image.Project, Image: c.image.Image}, noRetry)
	if err != nil {
		return nil, answerOf("an image", fmt.Errorf("get source image %s: %w", c.sourceImage, err))
	}
	return img, nil
}

// errNoImagesClient would mean a checker with source_image built no
// images client: a bug, reported as Unknown rather than a panic.
var errNoImagesClient = errors.New("no Compute images client")
