// Package resources builds, as pure functions, every Kubernetes object the
// operator owns for a Tenant or a Function, and the deterministic names and
// ids they carry.
package resources

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
)

// Child object names.
const (
	ResourceQuotaName      = "sless-quota"
	LimitRangeName         = "sless-limits"
	PolicyDenyIngress      = "sless-default-deny-ingress"
	PolicyAllowPlatform    = "sless-allow-from-platform"
	PolicyEgress           = "sless-egress"
	BrokerSecretName       = slessv1.BrokerSecretName
	TenantFinalizer        = "sless.kube5s.ru/tenant-cleanup"
	FunctionFinalizer      = "sless.kube5s.ru/function-cleanup"
	TraceparentAnnotation  = "sless.kube5s.ru/traceparent"
	FunctionContainerName  = "function"
	FunctionContainerPort  = 8080
	FunctionServicePort    = 80
	RuntimeUserID          = 10001
	functionWorkloadPrefix = "fn-"
)

// WorkloadName names the Deployment and Service of a function.
func WorkloadName(function string) string { return functionWorkloadPrefix + function }

// BuildID is the id of the build of one source digest for one function and
// runtime. The same inputs always give the same id, which is what makes
// build requests idempotent.
func BuildID(functionUID, runtime, sha256hex string) string {
	return "b-" + shortHash(functionUID, runtime, sha256hex)
}

// BuildResultAnnotation carries the last current build result the operator
// received for a Function (written by the build-completed handler only), for
// the Function reconciler, the one writer of the status, to apply.
const BuildResultAnnotation = "sless.kube5s.ru/build-result"

// JobResultAnnotation carries the result of a FunctionJob's current run
// (written by the job-completed handler only), for the FunctionJob
// reconciler, the one writer of the job's status, to apply.
const JobResultAnnotation = "sless.kube5s.ru/job-result"

// SourceBuildID is the id of the build fn's spec asks for (its source digest
// for its runtime), "" when it runs a prebuilt image or has no source yet.
func SourceBuildID(fn *slessv1.Function) string {
	if fn.Spec.Image != "" || fn.Spec.Source == nil {
		return ""
	}
	return BuildID(string(fn.UID), string(fn.Spec.Runtime), fn.Spec.Source.SHA256)
}

func shortHash(parts ...string) string {
	h := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return hex.EncodeToString(h[:10])
}
