package controller

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/services/operator/internal/resources"
)

// jobResult is a run's result as the job-completed handler records it on
// a FunctionJob (resources.JobResultAnnotation) for the FunctionJob
// reconciler to apply. The handler writes only the annotation and the
// reconciler only the status: each field of a FunctionJob has one writer.
type jobResult struct {
	InvocationID string               `json:"invocationID"`
	Status       msg.InvocationStatus `json:"status"`
	Attempts     int32                `json:"attempts"`
	FinishedAt   time.Time            `json:"finishedAt"`
	// Summary is the HTTP status and the head of the result or error.
	Summary string `json:"summary"`
}

func jobResultFrom(m *msg.InvocationCompleted) jobResult {
	return jobResult{InvocationID: m.InvocationID, Status: m.Status, Attempts: m.Attempts, FinishedAt: m.FinishedAt.UTC(), Summary: summary(m)}
}

// applyJobResult writes the result recorded on job into its status when it
// is the result of the current run (status.invocationID) and the run has
// not ended, and reports whether it did. A record that does not decode, or
// of another run, is left alone: the next result replaces it.
func applyJobResult(job *slessv1.FunctionJob) bool {
	st := &job.Status
	raw, ok := job.Annotations[resources.JobResultAnnotation]
	if !ok || st.InvocationID == "" {
		return false
	}
	var r jobResult
	if json.Unmarshal([]byte(raw), &r) != nil || jobResultStale(job, r.InvocationID) != "" {
		return false
	}
	done := metav1.NewTime(r.FinishedAt)
	st.CompletionTime, st.Attempts, st.Result = &done, r.Attempts, r.Summary
	// A result proves the request went out, whatever the status said of it.
	markDispatched(job)
	if r.Status == msg.StatusSucceeded {
		st.Phase, st.Message = slessv1.JobSucceeded, ""
	} else {
		st.Phase, st.Message = slessv1.JobFailed, fmt.Sprintf("run %d %s after %d attempts", st.LastRunID, r.Status, r.Attempts)
	}
	return true
}

// summary is the HTTP status and the head of the result or error.
func summary(m *msg.InvocationCompleted) string {
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
