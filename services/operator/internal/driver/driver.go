// Package driver runs built functions. A Driver turns a Function and its
// artifact into running replicas and reports whether they serve; the
// operator picks one by configuration (kubernetes: Deployment and Service;
// local: supervised runtime processes on 127.0.0.1).
package driver

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/builder"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
)

// Artifact is what a build produced: an image (kubernetes) or a prepared
// directory (local).
type Artifact struct {
	Image   string
	Dir     string
	BuildID string
}

// State is what a driver observed of a function's replicas.
type State struct {
	// Serving is true when at least one replica answers its health check, so
	// the endpoint can take traffic.
	Serving bool
	// RolledOut is true when every replica runs the current spec and artifact.
	RolledOut     bool
	ReadyReplicas int32
	// Endpoint is where the version takes calls, set while it serves.
	Endpoint string
	// Endpoints are the ready replicas' own addresses when the data plane
	// is to spread calls over them (several local processes); nil when
	// Endpoint spreads them (a Service) or one replica serves.
	Endpoints []string
	// Address is where the version is reached whether or not a replica
	// serves now (the Service; the local port kept for the version): the
	// data plane waits there for a version that wakes from zero.
	Address string
	// Reason and Message explain a state that is not rolled out.
	Reason  string
	Message string
}

// Version is one published version of a function to run.
type Version struct {
	Number   int32
	Artifact Artifact
	// Replicas is how many replicas run (the operator's scaler decides it);
	// 0 stops them all and keeps the version's Address.
	Replicas int32
}

// Driver runs the versions of functions: each version its own set of
// replicas (a Deployment and a Service, or a set of local processes).
type Driver interface {
	// Ensure makes version v of fn run and reports the state of its
	// replicas. fn is the function as the version runs it
	// (resources.VersionView). It is called on every reconcile and must be
	// cheap when nothing changed.
	Ensure(ctx context.Context, fn *slessv1.Function, v Version) (State, error)
	// Stop stops every replica of version n of fn.
	Stop(ctx context.Context, fn *slessv1.Function, n int32) error
	// Running lists the versions of fn that have replicas.
	Running(ctx context.Context, fn *slessv1.Function) ([]int32, error)
	// RemoveLegacy stops the replicas fn ran before it had versions (one
	// Deployment and Service for the function), if there are any.
	RemoveLegacy(ctx context.Context, fn *slessv1.Function) error
	// Delete stops every replica of every version of the function.
	Delete(ctx context.Context, fn *slessv1.Function) error
	// Watch adds the driver's own event sources to the Function controller,
	// so that a replica becoming ready or failing triggers a reconcile.
	Watch(b *builder.Builder) *builder.Builder
}
