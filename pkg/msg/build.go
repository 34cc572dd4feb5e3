package msg

import "time"

// Message type names for builds.
const (
	TypeBuildRequested = "build.requested.v1"
	TypeBuildCompleted = "build.completed.v1"
)

// BuildRequested asks a builder to turn a source archive into an artifact.
// The build id is derived from the function UID and the source digest, so a
// repeated request for the same digest is the same build.
type BuildRequested struct {
	BuildID      string    `json:"build_id"`
	Tenant       string    `json:"tenant"`
	Namespace    string    `json:"namespace"`
	Function     string    `json:"function"`
	FunctionUID  string    `json:"function_uid"`
	Runtime      string    `json:"runtime"`
	Entrypoint   string    `json:"entrypoint"`
	SourceKey    string    `json:"source_key"`
	SourceSHA256 string    `json:"source_sha256"`
	RequestedAt  time.Time `json:"requested_at"`
	// AllowSourceBuilds: pip may build source distributions (optional).
	AllowSourceBuilds bool `json:"allow_source_builds,omitempty"`
}

// Type implements Message.
func (*BuildRequested) Type() string { return TypeBuildRequested }

// BuildResult is the outcome of a build.
type BuildResult string

// Build results.
const (
	BuildSucceeded BuildResult = "succeeded"
	BuildFailed    BuildResult = "failed"
)

// BuildCompleted reports the end of a build, successful or not.
type BuildCompleted struct {
	BuildID      string      `json:"build_id"`
	Tenant       string      `json:"tenant"`
	Namespace    string      `json:"namespace"`
	Function     string      `json:"function"`
	Runtime      string      `json:"runtime"`
	SourceSHA256 string      `json:"source_sha256"`
	Result       BuildResult `json:"result"`
	// Image is set by the kubernetes build driver, Artifact by the local one.
	Image    string `json:"image,omitempty"`
	Artifact string `json:"artifact,omitempty"`
	// Reason is a stable machine-readable cause of a failure (InvalidArchive,
	// MissingEntrypoint, DependencyInstallFailed, BuildReasonFunctionDeleted,
	// ...); Message says what to fix.
	Reason     string    `json:"reason,omitempty"`
	Message    string    `json:"message,omitempty"`
	LogKey     string    `json:"log_key,omitempty"`
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
}

// Type implements Message.
func (*BuildCompleted) Type() string { return TypeBuildCompleted }

// BuildReasonFunctionDeleted is the reason of a build its function's
// deletion ended: the operator failed it (no builder held it), or the
// builder stopped it when the operator asked (builds.cancelled_at).
const BuildReasonFunctionDeleted = "FunctionDeleted"
