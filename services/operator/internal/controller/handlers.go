package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/api/meta"
	v1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

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
	Events recorder.EventRecorder
	Log    *slog.Logger
}

// BuildCompleted records a build result on its Function. A result for a
// build that is no longer the last one requested is stale and dropped.
func (h *Handlers) BuildCompleted(ctx context.Context, d *amqp.Delivery) error {
	var m msg.BuildCompleted
	if err := json.Unmarshal(d.Body, &m); err != nil {
		return rabbit.Permanent(fmt.Errorf("decode %s: %w", msg.TypeBuildCompleted, err))
	}
	key := types.NamespacedName{Namespace: m.Namespace, Name: m.Function}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var fn slessv1.Function
		current := func() string { return buildResultStale(&fn, m.BuildID) }
		if stale, err := h.read(ctx, key, &fn, current); err != nil || stale != "" {
			if err == nil {
				h.Log.Info("build result dropped", "namespace", m.Namespace, "function", m.Function, "buildID", m.BuildID, "reason", stale)
			}
			return err
		}
		recordBuild(&fn, &m)
		if m.Result == msg.BuildSucceeded {
			h.Events.Eventf(&fn, nil, corev1.EventTypeNormal, ReasonBuildSucceeded, "Build", "build %s succeeded", m.BuildID)
		} else {
			h.Events.Eventf(&fn, nil, corev1.EventTypeWarning, ReasonBuildFailed, "Build", "build %s failed: %s", m.BuildID,
				metav1.FindStatusCondition(fn.Status.Conditions, slessv1.ConditionBuilt).Message)
		}
		return h.Client.Status().Update(ctx, &fn)
	})
}

// recordBuild writes build result m into fn's status. A new artifact is
// not rolled out by this write: Deployed turns False (Progressing) until
// the reconcile that follows has the driver run it, so that nobody (a
// wait=ready, a deploy) takes the status for "the new code serves" while
// the previous artifact still answers every call.
func recordBuild(fn *slessv1.Function, m *msg.BuildCompleted) {
	st := &fn.Status
	// A result that arrives before the request's own status write (an
	// artifact the builder had already made answers in milliseconds)
	// carries the request's id: record it as the request.
	st.LastBuildID, st.RequestedSourceSHA256 = m.BuildID, m.SourceSHA256
	if m.Result != msg.BuildSucceeded {
		text := m.Message
		if m.Reason != "" {
			text = m.Reason + ": " + m.Message
		}
		slessv1.SetCondition(&st.Conditions, fn.Generation, slessv1.ConditionBuilt, v1.ConditionFalse, ReasonBuildFailed, text)
		return
	}
	if st.Image != m.Image || st.Artifact != m.Artifact {
		slessv1.SetCondition(&st.Conditions, fn.Generation, slessv1.ConditionDeployed, v1.ConditionFalse, ReasonProgressing,
			fmt.Sprintf("rolling out build %s of source %s", m.BuildID, short(m.SourceSHA256)))
	}
	st.Image, st.Artifact, st.BuiltSourceSHA256 = m.Image, m.Artifact, m.SourceSHA256
	slessv1.SetCondition(&st.Conditions, fn.Generation, slessv1.ConditionBuilt, v1.ConditionTrue, ReasonBuildSucceeded,
		fmt.Sprintf("build %s of source %s succeeded", m.BuildID, short(m.SourceSHA256)))
}

// buildResultStale says why a result of build id does not belong on fn, or
// "" when it does: it is the last build requested, or the one the
// reconciler requests for the current source (its request published, its
// status write still to come).
func buildResultStale(fn *slessv1.Function, id string) string {
	if fn.Status.LastBuildID == id {
		return ""
	}
	if src := fn.Spec.Source; src != nil && fn.Spec.Image == "" && resources.BuildID(string(fn.UID), string(fn.Spec.Runtime), src.SHA256) == id {
		return ""
	}
	return fmt.Sprintf("the function's last requested build is %q", fn.Status.LastBuildID)
}

// JobCompleted records the result of a FunctionJob run. Results of runs
// other than the current one are dropped.
func (h *Handlers) JobCompleted(ctx context.Context, d *amqp.Delivery) error {
	var m msg.InvocationCompleted
	if err := json.Unmarshal(d.Body, &m); err != nil {
		return rabbit.Permanent(fmt.Errorf("decode %s: %w", msg.TypeInvocationCompleted, err))
	}
	if m.Job == nil {
		return nil
	}
	key := types.NamespacedName{Namespace: slessv1.NamespaceFor(m.Tenant), Name: m.Job.Name}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var job slessv1.FunctionJob
		current := func() string { return jobResultStale(&job, m.InvocationID) }
		if stale, err := h.read(ctx, key, &job, current); err != nil || stale != "" {
			if err == nil {
				h.Log.Info("job result dropped", "namespace", key.Namespace, "job", key.Name, "invocationID", m.InvocationID, "reason", stale)
			}
			return err
		}
		st := &job.Status
		done := v1.NewTime(m.FinishedAt)
		st.CompletionTime, st.Attempts = &done, m.Attempts
		st.Result = summary(m)
		metav1.SetStatusCondition(&st.Conditions, v1.Condition{Type: ConditionDispatched, Status: v1.ConditionTrue, Reason: "Published",
			Message: "invocation " + m.InvocationID + " requested", ObservedGeneration: job.Generation})
		if m.Status == msg.StatusSucceeded {
			st.Phase, st.Message = slessv1.JobSucceeded, ""
		} else {
			st.Phase, st.Message = slessv1.JobFailed, fmt.Sprintf("run %d %s after %d attempts", job.Status.LastRunID, m.Status, m.Attempts)
		}
		return h.Client.Status().Update(ctx, &job)
	})
}

// jobResultStale says why the result of invocation id does not belong on
// job, or "" when it does.
func jobResultStale(job *slessv1.FunctionJob, id string) string {
	st := &job.Status
	switch {
	case st.InvocationID != id:
		return fmt.Sprintf("the job's current run is invocation %q", st.InvocationID)
	case st.Phase != slessv1.JobRunning && st.Phase != slessv1.JobWaiting:
		return "the run already ended (" + string(st.Phase) + ")"
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

// summary is the HTTP status and the head of the result or error.
func summary(m msg.InvocationCompleted) string {
	s := strconv.Itoa(m.HTTPStatus)
	tail := m.Error
	if tail == "" && utf8.Valid(m.Result) {
		tail = string(m.Result)
	}
	if tail != "" {
		s += ": " + tail
	}
	const maxLen = 256
	if len(s) > maxLen {
		s = s[:maxLen]
		for !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
	}
	return s
}
