package api

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/tenantns"
)

func TestNamespaceState(t *testing.T) {
	now := metav1.Now()
	ns := func(name string, labels map[string]string, phase corev1.NamespacePhase, deleted bool) *corev1.Namespace {
		n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Status: corev1.NamespaceStatus{Phase: phase}}
		if deleted {
			n.DeletionTimestamp = &now
		}
		return n
	}
	own := map[string]string{tenantns.Label: "acme"}
	for _, tt := range []struct {
		name string
		ns   *corev1.Namespace
		want nsState
	}{
		{"none yet", nil, nsMissing},
		{"active", ns("sless-fn-acme", own, corev1.NamespaceActive, false), nsActive},
		{"just made, no phase yet", ns("sless-fn-acme", own, "", false), nsActive},
		{"being removed", ns("sless-fn-acme", own, corev1.NamespaceTerminating, true), nsTerminating},
		{"phase Terminating", ns("sless-fn-acme", own, corev1.NamespaceTerminating, false), nsTerminating},
		{"unlabelled and being removed", ns("sless-fn-acme", nil, corev1.NamespaceActive, true), nsTerminating},
		{"unlabelled", ns("sless-fn-acme", nil, corev1.NamespaceActive, false), nsMissing},
		{"another tenant's label", ns("sless-fn-acme", map[string]string{tenantns.Label: "evil"}, corev1.NamespaceActive, false), nsMissing},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := namespaceState("acme", tt.ns); got != tt.want {
				t.Errorf("namespaceState = %d, want %d", got, tt.want)
			}
		})
	}
}

// TestKubeRefusalsOfTheNamespaceAreNotReady: the API server's refusals of a
// write into a missing or terminating namespace are the tenant not being
// ready (503 with Retry-After), never "function f0 not found" or a 500;
// a missing object is still its 404.
func TestKubeRefusalsOfTheNamespaceAreNotReady(t *testing.T) {
	ns := slessv1.NamespaceFor("acme")
	terminating := apierrors.NewForbidden(corev1.Resource("functions").WithVersion("").GroupResource(), "f0",
		fmt.Errorf("unable to create new content in namespace %s because it is being terminated", ns))
	terminating.ErrStatus.Details.Causes = append(terminating.ErrStatus.Details.Causes,
		metav1.StatusCause{Type: corev1.NamespaceTerminatingCause, Message: "namespace " + ns + " is being terminated", Field: "metadata.namespace"})
	for _, tt := range []struct {
		name         string
		err          error
		status       int
		slug, detail string
	}{
		{"namespace not found", apierrors.NewNotFound(corev1.Resource("namespaces"), ns), 503, "tenant-not-ready", "tenant acme is not ready yet: its namespace is being made"},
		{"namespace terminating", terminating, 503, "tenant-not-ready", "the tenant is not ready yet: its namespace is still being removed"},
		{"wrapped", fmt.Errorf("create: %w", apierrors.NewNotFound(corev1.Resource("namespaces"), ns)), 503, "tenant-not-ready", "tenant acme"},
		{"the function not found", apierrors.NewNotFound(slessv1.GroupVersion.WithResource("functions").GroupResource(), "f0"), 404, "not-found", "function f0 not found"},
		{"another refusal", apierrors.NewForbidden(slessv1.GroupVersion.WithResource("functions").GroupResource(), "f0", errors.New("no")), 500, "internal", "the Kubernetes API failed"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var p *Problem
			if !errors.As(fromKube(context.Background(), "function f0", tt.err), &p) {
				t.Fatal("not a problem")
			}
			if p.Status != tt.status || p.Type != ProblemBase+tt.slug || !strings.Contains(p.Detail, tt.detail) {
				t.Errorf("got %d %s %q, want %d %s containing %q", p.Status, p.Type, p.Detail, tt.status, tt.slug, tt.detail)
			}
			if retry := p.GetHeaders().Get("Retry-After"); (tt.status == 503) != (retry != "") {
				t.Errorf("Retry-After %q on a %d", retry, p.Status)
			}
		})
	}
}
