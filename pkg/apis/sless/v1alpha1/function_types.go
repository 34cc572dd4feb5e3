package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Runtime names a language runtime.
// +kubebuilder:validation:Enum=python3.11;nodejs20
type Runtime string

// Supported runtimes: the one definition of their names. Runtimes lists
// them in the order of the Enum marker above (a test holds the two equal).
const (
	RuntimePython311 Runtime = "python3.11"
	RuntimeNodeJS20  Runtime = "nodejs20"
)

// Runtimes are the supported runtimes, in the Enum marker's order.
func Runtimes() []Runtime { return []Runtime{RuntimePython311, RuntimeNodeJS20} }

// FunctionSpec is what a function developer asks for.
//
// +kubebuilder:validation:XValidation:rule="!(has(self.source) && has(self.image))",message="source and image are mutually exclusive"
type FunctionSpec struct {
	// Runtime is the language runtime.
	Runtime Runtime `json:"runtime"`

	// Entrypoint names the handler: module.function for Python
	// (main.handler), file.export for Node (index.handler).
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_][A-Za-z0-9_./-]*\.[A-Za-z_$][A-Za-z0-9_$]*$`
	Entrypoint string `json:"entrypoint"`

	// Source is the uploaded archive to build.
	// +optional
	Source *FunctionSource `json:"source,omitempty"`

	// Image is a prebuilt image, referenced by digest (name@sha256:...).
	// +optional
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^[^\s@]+@sha256:[a-f0-9]{64}$`
	Image string `json:"image,omitempty"`

	// MemoryMB is the memory limit of one replica.
	// +optional
	// +kubebuilder:default=128
	// +kubebuilder:validation:Minimum=32
	// +kubebuilder:validation:Maximum=8192
	MemoryMB int32 `json:"memoryMB,omitempty"`

	// CPUMillis is the CPU request of one replica.
	// +optional
	// +kubebuilder:default=100
	// +kubebuilder:validation:Minimum=10
	// +kubebuilder:validation:Maximum=8000
	CPUMillis int32 `json:"cpuMillis,omitempty"`

	// AllowSourceBuilds lets pip build dependencies from source
	// distributions (running their build code); by default only wheels are
	// installed (--only-binary=:all:). Either way, build code runs without
	// any of the platform's settings or credentials.
	// +optional
	AllowSourceBuilds bool `json:"allowSourceBuilds,omitempty"`

	// TimeoutSec bounds one invocation.
	// +optional
	// +kubebuilder:default=30
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=900
	TimeoutSec int32 `json:"timeoutSec,omitempty"`

	// Concurrency is the number of invocations in flight per replica.
	// +optional
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	Concurrency int32 `json:"concurrency,omitempty"`

	// Scaling bounds the number of replicas and says how they follow the
	// load (ARCHITECTURE 4a; the operator's scaler decides). What it leaves
	// unset takes the platform's defaults (the operator's config), so the
	// schema defaults none of it.
	// +optional
	Scaling *Scaling `json:"scaling,omitempty"`

	// Env is the function's environment.
	// +optional
	// +kubebuilder:validation:MaxItems=128
	// +listType=map
	// +listMapKey=name
	Env []EnvVar `json:"env,omitempty"`

	// Traffic splits untagged calls over versions; empty means 100 % latest.
	// +optional
	// +kubebuilder:validation:MaxItems=20
	// +kubebuilder:validation:XValidation:rule="self.size() == 0 || self.map(t, t.percent).sum() == 100",message="traffic percents must sum to 100"
	// +kubebuilder:validation:XValidation:rule="self.filter(t, has(t.tag) && t.tag != '').all(t, self.filter(u, has(u.tag) && u.tag == t.tag).size() == 1)",message="a tag names one traffic entry"
	Traffic []TrafficTarget `json:"traffic,omitempty"`

	// Versioning keeps published versions.
	// +optional
	Versioning *Versioning `json:"versioning,omitempty"`
}

// FunctionSource is a source archive in the object store.
type FunctionSource struct {
	// S3Key is the object key: sources/<tenant>/<function>/<sha256>.zip.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	S3Key string `json:"s3Key"`
	// SHA256 is the hex digest of the archive.
	// +kubebuilder:validation:Pattern=`^[a-f0-9]{64}$`
	SHA256 string `json:"sha256"`
}

// Scaling bounds the replicas of each serving version of a Function and
// says how they follow the load. The operator's scaler is the only writer
// of replica counts.
//
// +kubebuilder:validation:XValidation:rule="!has(self.minReplicas) || !has(self.maxReplicas) || self.minReplicas <= self.maxReplicas",message="minReplicas must not exceed maxReplicas"
type Scaling struct {
	// MinReplicas is the fewest replicas a serving version runs; 0 lets an
	// idle version go to zero. Unset: the platform's default (1 unless the
	// operator is configured otherwise).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	MinReplicas *int32 `json:"minReplicas,omitempty"`
	// MaxReplicas is the most replicas a serving version runs; 0 (unset):
	// the platform's default, and never below minReplicas.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	MaxReplicas int32 `json:"maxReplicas,omitempty"`
	// TargetConcurrency is the number of calls in flight per replica the
	// scaler plans for; 0 (unset): the platform's share of concurrency
	// (70 % unless configured otherwise). It is capped at the function's
	// concurrency.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	TargetConcurrency int32 `json:"targetConcurrency,omitempty"`
	// ScaleDownDelaySeconds is how long lower demand must last before the
	// replicas go down, and how long a version must be idle to go to zero;
	// 0 (unset): the platform's default (120 unless configured otherwise).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=3600
	ScaleDownDelaySeconds int32 `json:"scaleDownDelaySeconds,omitempty"`
	// MaxBufferedRequests bounds the calls a gateway holds for a version
	// that wakes or is at its limit; 0 (unset): the platform's default
	// (1000 unless configured otherwise), which the operator writes to
	// status.maxBufferedRequests.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100000
	MaxBufferedRequests int32 `json:"maxBufferedRequests,omitempty"`
	// Schedules raise the minimum for a while from each start of a cron
	// schedule (business hours): the highest floor that holds counts.
	// +optional
	// +kubebuilder:validation:MaxItems=10
	// +listType=atomic
	Schedules []ScalingSchedule `json:"schedules,omitempty"`
}

// ScalingSchedule is a floor of replicas for DurationSeconds from each
// start of Cron, read in TimeZone as a cron trigger's schedule is
// (pkg/cronsched).
type ScalingSchedule struct {
	// Cron is when the floor starts: five fields (minute hour
	// day-of-month month day-of-week) or a descriptor (@daily, @every 1h).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	Cron string `json:"cron"`
	// TimeZone is an IANA zone name; empty is UTC.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	TimeZone string `json:"timeZone,omitempty"`
	// DurationSeconds is how long the floor holds from each start, in
	// elapsed time (at most a week).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=604800
	DurationSeconds int32 `json:"durationSeconds"`
	// MinReplicas is the floor while it holds.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	MinReplicas int32 `json:"minReplicas"`
}

// EnvVar is one environment variable, given as a value or taken from a Secret
// in the function's namespace.
//
// +kubebuilder:validation:XValidation:rule="!(has(self.value) && has(self.secretKeyRef))",message="value and secretKeyRef are mutually exclusive"
type EnvVar struct {
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_]*$`
	// +kubebuilder:validation:MaxLength=128
	Name string `json:"name"`
	// +optional
	// +kubebuilder:validation:MaxLength=32768
	Value string `json:"value,omitempty"`
	// +optional
	SecretKeyRef *SecretKeySelector `json:"secretKeyRef,omitempty"`
}

// SecretKeySelector names one key of a Secret in the same namespace.
type SecretKeySelector struct {
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key"`
}

// FunctionPhase is the coarse state of a Function.
// +kubebuilder:validation:Enum=Pending;Building;Deploying;Ready;Failed
type FunctionPhase string

// Function phases.
const (
	FunctionPending   FunctionPhase = "Pending"
	FunctionBuilding  FunctionPhase = "Building"
	FunctionDeploying FunctionPhase = "Deploying"
	FunctionReady     FunctionPhase = "Ready"
	FunctionFailed    FunctionPhase = "Failed"
)

// FunctionStatus is what the operator observed of a Function.
type FunctionStatus struct {
	// +optional
	Phase FunctionPhase `json:"phase,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Image is the built or given image, pinned by digest or source tag.
	// +optional
	Image string `json:"image,omitempty"`
	// Artifact is the prepared directory in the local profile.
	// +optional
	Artifact string `json:"artifact,omitempty"`
	// BuiltSourceSHA256 is the source digest the current artifact was built from.
	// +optional
	BuiltSourceSHA256 string `json:"builtSourceSHA256,omitempty"`
	// RequestedSourceSHA256 is the source digest a build was last requested for;
	// it keeps one digest from being requested twice.
	// +optional
	RequestedSourceSHA256 string `json:"requestedSourceSHA256,omitempty"`
	// LastBuildID is the id of the last build requested.
	// +optional
	LastBuildID string `json:"lastBuildID,omitempty"`
	// Endpoint is where the data plane reaches the function (http://host:port).
	// +optional
	Endpoint string `json:"endpoint,omitempty"`
	// URL is the public invoke URL through the gateway.
	// +optional
	URL string `json:"url,omitempty"`
	// ReadyReplicas is the number of replicas that pass their health check.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`
	// MaxBufferedRequests is spec.scaling.maxBufferedRequests with the
	// platform's default applied (the operator's config), for the data
	// plane (Function.MaxBufferedRequests).
	// +optional
	MaxBufferedRequests int32 `json:"maxBufferedRequests,omitempty"`

	// LatestVersion is the number of the newest published version.
	// +optional
	LatestVersion int32 `json:"latestVersion,omitempty"`
	// Serving lists the versions the data plane may send work to, with the
	// effective traffic split (see ServingVersion).
	// +optional
	// +kubebuilder:validation:MaxItems=64
	Serving []ServingVersion `json:"serving,omitempty"`
}

// Function is user code with its runtime settings.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=slf
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Runtime",type=string,JSONPath=`.spec.runtime`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Latest",type=integer,JSONPath=`.status.latestVersion`
// +kubebuilder:printcolumn:name="URL",type=string,JSONPath=`.status.url`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$') && size(self.metadata.name) <= 53",message="function name must be a DNS-1123 label of at most 53 characters starting with a letter"
type Function struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec FunctionSpec `json:"spec"`
	// +optional
	Status FunctionStatus `json:"status,omitempty"`
}

// FunctionList is a list of Functions.
//
// +kubebuilder:object:root=true
type FunctionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Function `json:"items"`
}

// DefaultMaxBufferedRequests is spec.scaling.maxBufferedRequests when
// neither the function nor the platform sets it: the calls a data-plane
// replica holds for a version that wakes.
const DefaultMaxBufferedRequests = 1000

// MaxBufferedRequests is spec.scaling.maxBufferedRequests; unset, the
// platform's default that the operator wrote to the status; before the
// operator wrote one, DefaultMaxBufferedRequests.
func (f *Function) MaxBufferedRequests() int {
	if f.Spec.Scaling != nil && f.Spec.Scaling.MaxBufferedRequests > 0 {
		return int(f.Spec.Scaling.MaxBufferedRequests)
	}
	if f.Status.MaxBufferedRequests > 0 {
		return int(f.Status.MaxBufferedRequests)
	}
	return DefaultMaxBufferedRequests
}
