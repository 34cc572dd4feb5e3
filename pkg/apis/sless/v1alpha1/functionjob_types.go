package v1alpha1

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FunctionJobSpec is a one-off run of a Function.
type FunctionJobSpec struct {
	// FunctionRef is the Function to run, in the same namespace.
	FunctionRef LocalRef `json:"functionRef"`
	// RunID starts a run: 0 never runs, and each new value runs exactly once.
	// +optional
	// +kubebuilder:validation:Minimum=0
	RunID int64 `json:"runID,omitempty"`
	// Payload is the JSON body of the run.
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Schemaless
	Payload *apiextensionsv1.JSON `json:"payload,omitempty"`
	// TimeoutSec overrides the Function's timeout for this job; 0 keeps it.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=3600
	TimeoutSec int32 `json:"timeoutSec,omitempty"`
	// MaxRetries is how often a failed run is retried.
	// +optional
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10
	MaxRetries int32 `json:"maxRetries,omitempty"`
}

// FunctionJobPhase is the state of the latest run.
// +kubebuilder:validation:Enum=Skipped;Waiting;Running;Succeeded;Failed
type FunctionJobPhase string

// FunctionJob phases.
const (
	JobSkipped   FunctionJobPhase = "Skipped"
	JobWaiting   FunctionJobPhase = "Waiting"
	JobRunning   FunctionJobPhase = "Running"
	JobSucceeded FunctionJobPhase = "Succeeded"
	JobFailed    FunctionJobPhase = "Failed"
)

// FunctionJobStatus is the state of the latest run.
type FunctionJobStatus struct {
	// +optional
	Phase FunctionJobPhase `json:"phase,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// LastRunID is the run the other fields describe.
	// +optional
	LastRunID int64 `json:"lastRunID,omitempty"`
	// InvocationID of the run, derived from the job UID and run id.
	// +optional
	InvocationID string `json:"invocationID,omitempty"`
	// FunctionVersion is the version of the Function the run is pinned
	// to, resolved when the run was recorded (pkg/versionpick); a
	// re-dispatch of the run keeps it. 0: unpinned (the Function had no
	// version serving; the invoker pins the run on its first attempt).
	// +optional
	FunctionVersion int32 `json:"functionVersion,omitempty"`
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// +optional
	Attempts int32 `json:"attempts,omitempty"`
	// Result is a short summary: the HTTP status and the head of the body or error.
	// +optional
	Result string `json:"result,omitempty"`
}

// FunctionJob runs a Function once per runID.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=slj
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Function",type=string,JSONPath=`.spec.functionRef.name`
// +kubebuilder:printcolumn:name="Run",type=integer,JSONPath=`.spec.runID`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$') && size(self.metadata.name) <= 63",message="job name must be a DNS-1123 label starting with a letter"
type FunctionJob struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec FunctionJobSpec `json:"spec"`
	// +optional
	Status FunctionJobStatus `json:"status,omitempty"`
}

// FunctionJobList is a list of FunctionJobs.
//
// +kubebuilder:object:root=true
type FunctionJobList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []FunctionJob `json:"items"`
}
