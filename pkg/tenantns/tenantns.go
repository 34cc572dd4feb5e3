// Package tenantns owns "the tenant of a namespace". The operator labels
// each tenant's namespace with the tenant's name; every service reads that
// label, never a slice of the namespace's name, to learn whose an object
// is. Objects in namespaces without the label belong to no tenant, and the
// services ignore them.
package tenantns

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
)

// Label carries the tenant's name on its namespace.
const Label = slessv1.LabelTenant

// ErrNotTenant means a namespace does not belong to a tenant.
var ErrNotTenant = errors.New("not a tenant namespace")

// Of returns the tenant ns belongs to, or "" when it belongs to none. The
// label must also agree with the name the operator gives a tenant's
// namespace, so that a namespace labelled by hand cannot pass for another
// tenant's.
func Of(ns *corev1.Namespace) string {
	t := ns.Labels[Label]
	if t == "" || ns.Name != slessv1.NamespaceFor(t) {
		return ""
	}
	return t
}

// Selector selects the namespaces that carry the label.
func Selector() labels.Selector {
	req, err := labels.NewRequirement(Label, selection.Exists, nil)
	if err != nil {
		panic(fmt.Sprintf("tenant namespace selector: %v", err)) // only on a programming error
	}
	return labels.NewSelector().Add(*req)
}

// Watch is the watch cache configuration of Namespaces that holds tenant
// namespaces only: a lookup of any other namespace finds nothing.
func Watch() cache.ByObject { return cache.ByObject{Label: Selector()} }

// Resolver answers the tenant of a namespace from a reader of Namespaces,
// usually a watch cache configured with Watch.
type Resolver struct {
	Namespaces client.Reader
}

// Tenant returns the tenant that owns namespace, or an error wrapping
// ErrNotTenant when there is none.
func (r Resolver) Tenant(ctx context.Context, namespace string) (string, error) {
	var ns corev1.Namespace
	if err := r.Namespaces.Get(ctx, client.ObjectKey{Name: namespace}, &ns); err != nil {
		if apierrors.IsNotFound(err) {
			return "", fmt.Errorf("namespace %s: %w", namespace, ErrNotTenant)
		}
		return "", fmt.Errorf("namespace %s: %w", namespace, err)
	}
	t := Of(&ns)
	if t == "" {
		return "", fmt.Errorf("namespace %s: %w", namespace, ErrNotTenant)
	}
	return t, nil
}

// Named returns the tenant whose namespace is named namespace (the inverse
// of slessv1.NamespaceFor), or "" when the name is not a tenant
// namespace's. The name alone proves nothing: use it only for an object
// already admitted by Of or a Resolver (the operator's pure builders, which
// see the namespace's name and not the Namespace).
func Named(namespace string) string {
	t, ok := strings.CutPrefix(namespace, slessv1.NamespaceFor(""))
	if !ok {
		return ""
	}
	return t
}
