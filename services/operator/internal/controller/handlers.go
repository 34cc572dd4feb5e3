package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"

	amqp "github.com/rabbitmq/amqp091-go"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/rabbit"
	"github.com/kube5s/sless/services/operator/internal/resources"
)

// Handlers apply the messages that report back to the operator.
type Handlers struct {
	// Client reads through the manager's cache and writes.
	Client client.Client
	// Reader reads past the cache. A result may arrive before the cache saw
	// the status write that made it current (a builder answering at once
	// from its artifact cache), or before it saw the object at all; a result
	// is dropped only when a fresh read agrees that it is stale.
	Reader client.Reader
	Log    *slog.Logger
}

// BuildCompleted records a build result on its Function, in the annotation
// resources.BuildResultAnnotation (a patch of that key only: no other
// writer, no conflict). The Function reconciler, the one writer of a
// Function's status, applies it once it is the result of the build it
// requested, which may be after the result came: a builder that answers
// from its store can answer before the reconciler's status write of the
// request. A result of a build the function's spec no longer asks for (an
// older source, another runtime, a prebuilt image now) is stale and dropped.
func (h *Handlers) BuildCompleted(ctx context.Context, d *amqp.Delivery) error {
	var m msg.BuildCompleted
	if err := json.Unmarshal(d.Body, &m); err != nil {
		return rabbit.Permanent(fmt.Errorf("decode %s: %w", msg.TypeBuildCompleted, err))
	}
	key := types.NamespacedName{Namespace: m.Namespace, Name: m.Function}
	var fn slessv1.Function
	current := func() string { return buildResultStale(&fn, m.BuildID) }
	if stale, err := h.read(ctx, key, &fn, current); err != nil || stale != "" {
		if err == nil {
			h.Log.Info("build result dropped", "namespace", m.Namespace, "function", m.Function, "buildID", m.BuildID, "reason", stale)
		}
		return err
	}
	return h.record(ctx, &fn, resources.BuildResultAnnotation, buildResultFrom(&m), "build "+m.BuildID)
}

// buildResultStale says why a result of build id does not belong on fn, or
// "" when it does: it is the build of fn's spec.
func buildResultStale(fn *slessv1.Function, id string) string {
	if want := resources.SourceBuildID(fn); want != id {
		return fmt.Sprintf("the function's spec asks for build %q", want)
	}
	return ""
}

// JobCompleted records the result of a FunctionJob run in the annotation
// resources.JobResultAnnotation (a patch of that key only), for the
// FunctionJob reconciler, the one writer of a job's status, to apply.
// Results of runs other than the current one are dropped.
func (h *Handlers) JobCompleted(ctx context.Context, d *amqp.Delivery) error {
	var m msg.InvocationCompleted
	if err := json.Unmarshal(d.Body, &m); err != nil {
		return rabbit.Permanent(fmt.Errorf("decode %s: %w", msg.TypeInvocationCompleted, err))
	}
	if m.Job == nil {
		return nil
	}
	key := types.NamespacedName{Namespace: slessv1.NamespaceFor(m.Tenant), Name: m.Job.Name}
	var job slessv1.FunctionJob
	current := func() string { return jobResultStale(&job, m.InvocationID) }
	if stale, err := h.read(ctx, key, &job, current); err != nil || stale != "" {
		if err == nil {
			h.Log.Info("job result dropped", "namespace", key.Namespace, "job", key.Name, "invocationID", m.InvocationID, "reason", stale)
		}
		return err
	}
	return h.record(ctx, &job, resources.JobResultAnnotation, jobResultFrom(&m), "invocation "+m.InvocationID)
}

// record writes result, encoded, into obj's annotation key (a merge patch
// of that key only, so that it conflicts with no other writer), unless it
// is there already (a redelivery); an object deleted meanwhile takes
// nothing. what names the result in errors.
func (h *Handlers) record(ctx context.Context, obj client.Object, key string, result any, what string) error {
	value, err := json.Marshal(result)
	if err != nil {
		return rabbit.Permanent(fmt.Errorf("encode the result of %s: %w", what, err))
	}
	if obj.GetAnnotations()[key] == string(value) {
		return nil // a redelivery
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{key: string(value)}}})
	if err != nil {
		return err
	}
	if err := h.Client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch)); err != nil {
		if apierrors.IsNotFound(err) {
			return nil // deleted meanwhile
		}
		return fmt.Errorf("record the result of %s on %s/%s: %w", what, obj.GetNamespace(), obj.GetName(), err)
	}
	return nil
}

// jobResultStale says why the result of invocation id does not belong on
// job, or "" when it does.
func jobResultStale(job *slessv1.FunctionJob, id string) string {
	st := &job.Status
	switch {
	case st.InvocationID != id:
		return fmt.Sprintf("the job's current run is invocation %q", st.InvocationID)
	case st.Phase != slessv1.JobRunning:
		// Waiting is a run not recorded yet: the invocation id is still
		// the previous run's, and so is any result of it.
		return "the job runs nothing now (" + string(st.Phase) + ")"
	}
	return ""
}

// read gets key into obj through the cache and, when the cached copy is
// missing or stale says it cannot take the result, again past the cache.
// It returns why the result is stale by the fresh copy ("" when it is
// current, or "the object is gone").
func (h *Handlers) read(ctx context.Context, key types.NamespacedName, obj client.Object, stale func() string) (string, error) {
	err := h.Client.Get(ctx, key, obj)
	if err == nil && stale() == "" {
		return "", nil
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return "", err
	}
	if err := h.Reader.Get(ctx, key, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return "the object is gone", nil
		}
		return "", err
	}
	return stale(), nil
}
