package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Condition types. Every kind keeps Ready; Functions also keep the steps
// that lead to it.
const (
	ConditionReady       = "Ready"
	ConditionSourceReady = "SourceReady"
	ConditionBuilt       = "Built"
	ConditionDeployed    = "Deployed"
	// ConditionConsuming says whether a queue Trigger's queue is being
	// consumed, and why not (the broker refused a declaration, say).
	ConditionConsuming = "Consuming"
)

// Reasons of a Function's conditions: the operator writes them, the
// gateway, the CLI and the tests read them.
const (
	// SourceReady and Built.
	ReasonAwaitingSource = "AwaitingSource"
	ReasonUploaded       = "Uploaded"
	ReasonPrebuilt       = "PrebuiltImage"
	ReasonBuilding       = "Building"
	ReasonBuildSucceeded = "BuildSucceeded"
	ReasonBuildFailed    = "BuildFailed"

	// Deployed: the execution driver's reading of the rollout.
	ReasonWaitingBuild  = "WaitingForBuild"
	ReasonRolledOut     = "RolledOut"
	ReasonProgressing   = "Progressing"
	ReasonRolloutFailed = "RolloutFailed" // the Deployment's progress deadline passed
	// ReasonReplicaFailure: the ReplicaSet cannot create a pod;
	// ReasonQuotaExceeded when the tenant's ResourceQuota is why.
	ReasonReplicaFailure = "ReplicaFailure"
	ReasonQuotaExceeded  = "QuotaExceeded"
	ReasonDriverError    = "DriverError"

	// Ready.
	ReasonServing    = "Serving"
	ReasonNotServing = "NotServing"

	// Versions: publishing (Events on the Function) and a FunctionVersion's
	// Ready and Draining conditions.
	ReasonVersionPublished = "VersionPublished"
	ReasonVersionUnchanged = "VersionUnchanged"
	ReasonVersionDeleted   = "VersionDeleted"
	ReasonTrafficPending   = "TrafficPending" // spec.traffic waits for its targets to be ready
	ReasonUnknownVersion   = "UnknownVersion" // spec.traffic names a version that does not exist
	ReasonDraining         = "Draining"
	ReasonStopped          = "Stopped"
)

// ConditionDraining is a FunctionVersion's: True while it lost its traffic
// and still runs for in-flight work; its transition time is when the drain
// began.
const ConditionDraining = "Draining"

// SetCondition sets one condition, stamping the generation it was observed at.
// The transition time changes only when the status does.
func SetCondition(conds *[]metav1.Condition, generation int64, typ string, status metav1.ConditionStatus, reason, message string) bool {
	return meta.SetStatusCondition(conds, metav1.Condition{
		Type:               typ,
		Status:             status,
		Reason:             reason,
		Message:            message,
		ObservedGeneration: generation,
	})
}

// IsTrue reports whether the condition of that type is True.
func IsTrue(conds []metav1.Condition, typ string) bool {
	return meta.IsStatusConditionTrue(conds, typ)
}

// IsReady reports whether the Function serves invocations: it is Ready and
// has an endpoint.
func (f *Function) IsReady() bool {
	return f.Status.Phase == FunctionReady && f.Status.Endpoint != ""
}

// Phase is the Function's phase, Pending until the operator first sets
// one: the one reading of an empty phase for every service.
func (f *Function) Phase() FunctionPhase {
	if f.Status.Phase == "" {
		return FunctionPending
	}
	return f.Status.Phase
}

// NamespaceFor returns the namespace that holds a tenant's functions.
func NamespaceFor(tenant string) string { return "sless-fn-" + tenant }

// Labels set on every object the platform creates for a tenant.
const (
	LabelTenant   = "sless.kube5s.ru/tenant"
	LabelFunction = "sless.kube5s.ru/function"
	// LabelVersion is the number of the FunctionVersion an object belongs
	// to (the FunctionVersion itself, its Deployment, Service and pods).
	LabelVersion = "sless.kube5s.ru/version"
	LabelManaged = "app.kubernetes.io/managed-by"
	ManagedBy    = "sless"
)
