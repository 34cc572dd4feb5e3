package api

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/tenantns"
)

// A tenant is usable when its create answers (ARCHITECTURE.md §5): the
// create waits, on the watch cache's Namespace events, for the namespace
// the operator makes for it, and answers 202 when it has not come within
// Config.TenantWait. Until it has, every call that resolves the tenant's
// namespace (Server.namespace) answers 503 tenant-not-ready with
// Retry-After, never a 404 about the object being created; a namespace of
// the same name that is still being removed makes a create of the tenant
// 409 tenant-terminating with Retry-After.

// DefaultTenantWait is how long a tenant's create waits for its namespace.
const DefaultTenantWait = 30 * time.Second

// Retry-After, in seconds, of the answers while a tenant's namespace is
// made (the operator takes well under a second when it runs) or removed
// (every object in it is deleted first).
const (
	tenantNotReadyRetry    = 1
	tenantTerminatingRetry = 5
)

// nsState is what a tenant's namespace allows.
type nsState int

const (
	nsMissing     nsState = iota // not made yet (or not the tenant's)
	nsActive                     // usable
	nsTerminating                // being removed
)

// namespaceState judges ns as the namespace of tenant; nil is missing. A
// namespace being removed cannot take new objects, whoever labelled it.
func namespaceState(tenant string, ns *corev1.Namespace) nsState {
	switch {
	case ns == nil:
		return nsMissing
	case !ns.DeletionTimestamp.IsZero() || ns.Status.Phase == corev1.NamespaceTerminating:
		return nsTerminating
	case tenantns.Of(ns) != tenant:
		return nsMissing
	}
	return nsActive
}

// tenantNotReady is the answer of a tenant-scoped call while the tenant's
// namespace is not usable; tenant "" when the caller does not know it.
func tenantNotReady(ctx context.Context, tenant string, st nsState) *Problem {
	who := "the tenant"
	if tenant != "" {
		who = "tenant " + tenant
	}
	why := "its namespace is being made"
	if st == nsTerminating {
		why = "its namespace is still being removed"
	}
	return withID(ctx, problem(503, "tenant-not-ready", "%s is not ready yet: %s", who, why).retry(tenantNotReadyRetry))
}

// tenantTerminating is the answer of a create of a tenant whose previous
// namesake is still being removed.
func tenantTerminating(ctx context.Context, tenant, what string) *Problem {
	return withID(ctx, problem(409, "tenant-terminating",
		"tenant %s cannot be created yet: %s is still being removed; create it again once it is gone", tenant, what).retry(tenantTerminatingRetry))
}

// namespaceRefusal recognizes the API server's refusal of a write into a
// namespace that does not exist (NotFound naming the namespace) or is
// being removed (Forbidden with the NamespaceTerminating cause), with the
// state it implies and the tenant when the error names it.
func namespaceRefusal(err error) (tenant string, st nsState, ok bool) {
	var se *apierrors.StatusError
	if !errors.As(err, &se) {
		return "", 0, false
	}
	switch d := se.ErrStatus.Details; {
	case apierrors.IsNotFound(err) && d != nil && d.Kind == "namespaces" && d.Group == "":
		return tenantns.Named(d.Name), nsMissing, true
	case apierrors.IsForbidden(err) && apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
		return "", nsTerminating, true
	}
	return "", 0, false
}

// tenantNamespace is the tenant's namespace as the watch cache has it; nil
// when it has none.
func (s *Server) tenantNamespace(ctx context.Context, tenant string) (*corev1.Namespace, error) {
	var ns corev1.Namespace
	err := s.Cache.Get(ctx, client.ObjectKey{Name: slessv1.NamespaceFor(tenant)}, &ns)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, s.internal(ctx, 503, err, "the namespace of tenant %s could not be read; retry", tenant).retry(1)
	}
	return &ns, nil
}

// usableNamespace returns the tenant's namespace, or the 503 that says it
// is not usable yet.
func (s *Server) usableNamespace(ctx context.Context, tenant string) (string, error) {
	ns, err := s.tenantNamespace(ctx, tenant)
	if err != nil {
		return "", err
	}
	if st := namespaceState(tenant, ns); st != nsActive {
		return "", tenantNotReady(ctx, tenant, st)
	}
	return ns.Name, nil
}

// createTenant creates the tenant and waits for its namespace: 201 when
// the namespace is usable, 202 when it did not come within the wait (its
// calls answer 503 with Retry-After until it does), 409 with Retry-After
// while a namesake is still being removed.
func (s *Server) createTenant(ctx context.Context, in *TenantInput) (*One[Tenant], error) {
	if err := s.requireAdmin(ctx); err != nil {
		return nil, err
	}
	// The namespace of a tenant deleted a moment ago: the API server has
	// the truth, the watch cache may not have seen the deletion yet.
	var old corev1.Namespace
	err := s.Kube.Get(ctx, client.ObjectKey{Name: slessv1.NamespaceFor(in.Name)}, &old)
	if client.IgnoreNotFound(err) != nil {
		return nil, fromKube(ctx, "namespace "+slessv1.NamespaceFor(in.Name), err)
	}
	if err == nil && namespaceState(in.Name, &old) == nsTerminating {
		return nil, tenantTerminating(ctx, in.Name, "its namespace "+old.Name)
	}

	// Subscribe before the create, so that no event falls before the wait.
	changed, unsubscribe := s.nsWatch.subscribe(types.NamespacedName{Name: slessv1.NamespaceFor(in.Name)})
	defer unsubscribe()
	out, err := tenantKind.create(ctx, s, in.Name, tenantCR(in))
	if err != nil {
		var p *Problem
		if errors.As(err, &p) && p.Status == 409 {
			var t slessv1.Tenant
			if gerr := s.Kube.Get(ctx, client.ObjectKey{Name: in.Name}, &t); gerr == nil && !t.DeletionTimestamp.IsZero() {
				return nil, tenantTerminating(ctx, in.Name, "the tenant of that name")
			}
		}
		return nil, err
	}

	wait := s.Config.TenantWait
	if wait <= 0 {
		wait = DefaultTenantWait
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		ns, err := s.tenantNamespace(ctx, in.Name)
		if err != nil {
			return nil, err
		}
		if namespaceState(in.Name, ns) == nsActive {
			return out, nil
		}
		select {
		case <-ctx.Done(): // the client went away; the tenant is made all the same
			return nil, ctx.Err()
		case <-timer.C:
			out.Status = 202
			return out, nil
		case <-changed:
		}
	}
}
