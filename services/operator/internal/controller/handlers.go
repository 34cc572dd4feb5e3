package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/api/meta"
	v1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/rabbit"
)

// Handlers apply the messages that report back to the operator.
type Handlers struct {
	Client client.Client
	Events recorder.EventRecorder
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
		if err := h.Client.Get(ctx, key, &fn); err != nil {
			return client.IgnoreNotFound(err) // the function is gone; nothing to record
		}
		if fn.Status.LastBuildID != m.BuildID {
			return nil
		}
		st := &fn.Status
		if m.Result == msg.BuildSucceeded {
			st.Image, st.Artifact, st.BuiltSourceSHA256 = m.Image, m.Artifact, m.SourceSHA256
			slessv1.SetCondition(&st.Conditions, fn.Generation, slessv1.ConditionBuilt, v1.ConditionTrue, ReasonBuildSucceeded,
				fmt.Sprintf("build %s of source %s succeeded", m.BuildID, short(m.SourceSHA256)))
			h.Events.Eventf(&fn, nil, corev1.EventTypeNormal, ReasonBuildSucceeded, "Build", "build %s succeeded", m.BuildID)
		} else {
			text := m.Message
			if m.Reason != "" {
				text = m.Reason + ": " + m.Message
			}
			slessv1.SetCondition(&st.Conditions, fn.Generation, slessv1.ConditionBuilt, v1.ConditionFalse, ReasonBuildFailed, text)
			h.Events.Eventf(&fn, nil, corev1.EventTypeWarning, ReasonBuildFailed, "Build", "build %s failed: %s", m.BuildID, text)
		}
		return h.Client.Status().Update(ctx, &fn)
	})
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
		if err := h.Client.Get(ctx, key, &job); err != nil {
			return client.IgnoreNotFound(err)
		}
		st := &job.Status
		if st.InvocationID != m.InvocationID || (st.Phase != slessv1.JobRunning && st.Phase != slessv1.JobWaiting) {
			return nil
		}
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
