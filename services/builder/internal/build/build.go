// Package build is what the builder's parts say to each other about one
// build: the Job a driver runs, the Artifact it makes, and the failures a
// user can act on, each with the stable reason that build.completed.v1
// carries.
package build

import (
	"fmt"
	"io"

	"github.com/kube5s/sless/pkg/archive"
	"github.com/kube5s/sless/pkg/msg"
)

// Failure reasons reported in build.completed.v1 besides the archive's own
// (archive.Reason*); each names what to fix.
const (
	ReasonSyntaxError       = "SyntaxError"
	ReasonDependencies      = "DependencyInstallFailed"
	ReasonSourceUnavailable = "SourceUnavailable"
	ReasonBuildJobFailed    = "BuildJobFailed"
	ReasonBuildDeadline     = "BuildDeadlineExceeded"
	ReasonInternal          = "InternalError"
	ReasonFunctionDeleted   = msg.BuildReasonFunctionDeleted // stopped when its function's deletion asked
)

// Fail is a build failure a user can act on. It is an *archive.Error, so
// that a refused archive (by the builder or by the gateway's rules) and
// every other failure with a reason are one kind, found with errors.As.
func Fail(reason, format string, args ...any) *archive.Error {
	return &archive.Error{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// Job is one build handed to a driver.
type Job struct {
	ID           string
	Tenant       string
	Function     string
	Runtime      string
	Entrypoint   string
	SourceKey    string
	SourceSHA256 string
	// AllowSourceBuilds lets pip build source distributions.
	AllowSourceBuilds bool
	// Archive is the zip (local driver; the kubernetes driver's Job fetches it).
	Archive []byte
	Log     io.Writer
}

// Artifact is what a driver produced.
type Artifact struct {
	Dir   string // local driver
	Image string // kubernetes driver
	// Reused is true when an identical artifact existed and nothing was built.
	Reused bool
}
