package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FunctionVersion is an immutable snapshot of what runs for a Function:
// published by the operator when a build of a changed template succeeds,
// named <function>-v<number>, owned by its Function. The API server refuses
// any change of its spec (CEL self == oldSelf).
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=slfv
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Function",type=string,JSONPath=`.spec.function`
// +kubebuilder:printcolumn:name="Version",type=integer,JSONPath=`.spec.number`
// +kubebuilder:printcolumn:name="Runtime",type=string,JSONPath=`.spec.runtime`
// +kubebuilder:printcolumn:name="Source",type=string,JSONPath=`.spec.sourceSHA256`,priority=1
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyReplicas`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type FunctionVersion struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="a FunctionVersion is immutable: publish a new version instead"
	Spec FunctionVersionSpec `json:"spec"`
	// +optional
	Status FunctionVersionStatus `json:"status,omitempty"`
}

// FunctionVersionSpec is what one version runs, frozen at publish.
type FunctionVersionSpec struct {
	// Function is the name of the owning Function.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=53
	Function string `json:"function"`
	// Number counts the Function's versions from 1.
	// +kubebuilder:validation:Minimum=1
	Number int32 `json:"number"`
	// Identity is the artifact digest plus a hash of the runtime-affecting
	// fields: two templates with one identity are one version.
	// +kubebuilder:validation:MaxLength=256
	Identity string `json:"identity"`
	// Image is the built or given image, by digest (kubernetes profile).
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Image string `json:"image,omitempty"`
	// Artifact is the prepared directory (local profile).
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Artifact string `json:"artifact,omitempty"`
	// SourceSHA256 is the digest of the source the artifact was built from.
	// +optional
	SourceSHA256 string `json:"sourceSHA256,omitempty"`
	// BuildID is the build that produced the artifact.
	// +optional
	BuildID    string  `json:"buildID,omitempty"`
	Runtime    Runtime `json:"runtime"`
	Entrypoint string  `json:"entrypoint"`
	MemoryMB   int32   `json:"memoryMB"`
	CPUMillis  int32   `json:"cpuMillis"`
	TimeoutSec int32   `json:"timeoutSec"`
	// Concurrency is the number of invocations in flight per replica.
	Concurrency int32 `json:"concurrency"`
	// Env is the environment; Secret references stay references.
	// +optional
	// +kubebuilder:validation:MaxItems=128
	Env []EnvVar `json:"env,omitempty"`
}

// FunctionVersionStatus is what the operator observed of one version's
// replicas.
type FunctionVersionStatus struct {
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`
	// Endpoint is where the data plane reaches this version.
	// +optional
	Endpoint string `json:"endpoint,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// FunctionVersionList is a list of FunctionVersions.
//
// +kubebuilder:object:root=true
type FunctionVersionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []FunctionVersion `json:"items"`
}

// TrafficTarget is one entry of a Function's traffic split: a version by
// number, or latest (the newest published version), with a share and an
// optional tag (a stable route to it: invoke with @<tag>).
//
// +kubebuilder:validation:XValidation:rule="(has(self.version) && self.version > 0) != (has(self.latest) && self.latest)",message="an entry names a version or latest, not both"
type TrafficTarget struct {
	// +optional
	// +kubebuilder:validation:Minimum=1
	Version int32 `json:"version,omitempty"`
	// +optional
	Latest bool `json:"latest,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	Percent int32 `json:"percent"`
	// +optional
	// +kubebuilder:validation:MaxLength=40
	// +kubebuilder:validation:Pattern=`^[a-z]([-a-z0-9]*[a-z0-9])?$`
	Tag string `json:"tag,omitempty"`
}

// Versioning keeps published versions.
type Versioning struct {
	// Retain is how many of the newest versions are kept, besides every
	// version that traffic, a tag, pinned work or a rollback names.
	// +optional
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	Retain int32 `json:"retain,omitempty"`
}

// ServingVersion is one version the data plane may send work to, as the
// operator resolved it: the effective traffic (which follows spec.traffic
// once its targets are ready), tag routes and versions kept for draining or
// pinned work. The gateway and invoker read only this.
type ServingVersion struct {
	Number int32 `json:"number"`
	// Percent is the version's effective share of untagged traffic.
	// +optional
	Percent int32 `json:"percent,omitempty"`
	// Tags are the tags routed to this version.
	// +optional
	Tags []string `json:"tags,omitempty"`
	// Endpoint is where the data plane reaches this version.
	// +optional
	Endpoint string `json:"endpoint,omitempty"`
	// Endpoints are the addresses of the version's ready replicas when the
	// data plane spreads calls over them itself (the local profile runs
	// several processes per version); empty when Endpoint spreads them (a
	// Service).
	// +optional
	Endpoints []string `json:"endpoints,omitempty"`
	// Ready is true when at least one replica answers its health check.
	// +optional
	Ready bool `json:"ready,omitempty"`
	// Draining is true for a version that lost its traffic and runs only
	// until its in-flight and pinned work is done.
	// +optional
	Draining bool `json:"draining,omitempty"`
	// Idle is true while the scaler takes the version to zero replicas or
	// keeps it there: the data plane holds its calls in a bounded buffer,
	// which wakes it, and sends them on once a replica is ready and
	// answers (docs/scaling.md). Endpoint stays set while idle.
	// +optional
	Idle bool `json:"idle,omitempty"`
	// DesiredReplicas is the replica count the scaler decided for this
	// version, ReadyReplicas how many pass their health check, and
	// ScalingReason why the count is what it is (Load, Panic, MinReplicas,
	// MaxReplicas, QuotaPods, ScaleDownDelay, ...).
	// +optional
	DesiredReplicas int32 `json:"desiredReplicas,omitempty"`
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`
	// +optional
	ScalingReason string `json:"scalingReason,omitempty"`
	// MaxReplicas is the most replicas the scaler may run for the version
	// (spec.scaling.maxReplicas, lowered to what the tenant's pods quota
	// allows). The data plane holds a call that finds every ready replica
	// full only while the version can still grow; at its most, the call
	// goes on and a full replica answers 429.
	// +optional
	MaxReplicas int32 `json:"maxReplicas,omitempty"`
}

// ScalingReasonDrainingToZero is the ScalingReason of a version marked
// idle whose replicas still run until every data-plane replica holds its
// calls (the scaler's handshake on the way to zero).
const ScalingReasonDrainingToZero = "DrainingToZero"

// Starting tells whether an idle version has replicas on their way up:
// the scaler woke it, none is ready yet, and Endpoint is where they will
// answer. A call held for it may go as soon as a replica's health check
// answers there, before the operator marks the version ready. A version
// on its way to zero is idle with replicas too, but not starting: its
// calls stay held.
func (sv *ServingVersion) Starting() bool {
	return sv.idleWithReplicas() && sv.ScalingReason != ScalingReasonDrainingToZero && sv.Endpoint != ""
}

// DrainingToZero tells whether the version is marked idle on its way to
// zero while its replicas still run: what a data-plane replica that holds
// its calls acknowledges (the scale-to-zero handshake).
func (sv *ServingVersion) DrainingToZero() bool {
	return sv.idleWithReplicas() && sv.ScalingReason == ScalingReasonDrainingToZero
}

// idleWithReplicas: marked idle while the scaler wants replicas, which is
// a start or a drain; the scaling reason tells them apart.
func (sv *ServingVersion) idleWithReplicas() bool { return sv.Idle && sv.DesiredReplicas > 0 }
