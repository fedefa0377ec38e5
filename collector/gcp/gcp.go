package gcp

import (
	compute "cloud.google.com/go/compute/apiv1"
	_ "cloud.google.com/go/compute/apiv1/computepb"
	_ "github.com/googleapis/gax-go/v2/apierror"
	_ "golang.org/x/oauth2"
	_ "google.golang.org/api/googleapi"
	_ "google.golang.org/api/option"
)

var _ = compute.NewInstancesRESTClient
