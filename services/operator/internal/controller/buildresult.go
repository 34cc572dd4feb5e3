package controller

import (
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/services/operator/internal/resources"
)

// buildResult is a build result as the build-completed handler records it
// on a Function (resources.BuildResultAnnotation) for the Function
// reconciler to apply. The handler writes only the annotation and the
// reconciler only the status: each field of a Function has one writer.
type buildResult struct {
	BuildID      string          `json:"buildID"`
	Result       msg.BuildResult `json:"result"`
	SourceSHA256 string          `json:"sourceSHA256,omitempty"`
	Image        string          `json:"image,omitempty"`
	Artifact     string          `json:"artifact,omitempty"`
	Reason       string          `json:"reason,omitempty"`
	Message      string          `json:"message,omitempty"`
}

func buildResultFrom(m *msg.BuildCompleted) buildResult {
	return buildResult{BuildID: m.BuildID, Result: m.Result, SourceSHA256: m.SourceSHA256, Image: m.Image, Artifact: m.Artifact,
		Reason: m.Reason, Message: m.Message}
}

// applyBuildResult writes the result recorded on fn into its status when it
// is the result of the build last requested (status.lastBuildID), and
// returns it then (nil otherwise). A record that does not decode, or of
// another build, is left alone: the next result replaces it.
func applyBuildResult(fn *slessv1.Function) *buildResult {
	st := &fn.Status
	raw, ok := fn.Annotations[resources.BuildResultAnnotation]
	if !ok || st.LastBuildID == "" {
		return nil
	}
	var r buildResult
	if json.Unmarshal([]byte(raw), &r) != nil || r.BuildID != st.LastBuildID {
		return nil
	}
	if r.Result == msg.BuildSucceeded {
		// A new artifact is not rolled out by this write: Deployed turns
		// False (Progressing) until the driver runs it, so that nobody (a
		// wait=ready, a deploy) takes the status for "the new code serves"
		// while the previous artifact still answers every call.
		if st.Image != r.Image || st.Artifact != r.Artifact {
			slessv1.SetCondition(&st.Conditions, fn.Generation, slessv1.ConditionDeployed, metav1.ConditionFalse, slessv1.ReasonProgressing,
				fmt.Sprintf("rolling out build %s of source %s", r.BuildID, short(r.SourceSHA256)))
		}
		st.Image, st.Artifact, st.BuiltSourceSHA256 = r.Image, r.Artifact, r.SourceSHA256
		slessv1.SetCondition(&st.Conditions, fn.Generation, slessv1.ConditionBuilt, metav1.ConditionTrue, slessv1.ReasonBuildSucceeded,
			fmt.Sprintf("build %s of source %s succeeded", r.BuildID, short(r.SourceSHA256)))
		return &r
	}
	slessv1.SetCondition(&st.Conditions, fn.Generation, slessv1.ConditionBuilt, metav1.ConditionFalse, slessv1.ReasonBuildFailed, r.text())
	return &r
}

// text is what a failed result says: its reason and message.
func (r *buildResult) text() string {
	if r.Reason != "" {
		return r.Reason + ": " + r.Message
	}
	return r.Message
}

// builtReason is the reason of fn's Built condition, "" without one.
func builtReason(fn *slessv1.Function) string {
	if c := meta.FindStatusCondition(fn.Status.Conditions, slessv1.ConditionBuilt); c != nil {
		return c.Reason
	}
	return ""
}
