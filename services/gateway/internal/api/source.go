package api

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"

	"go.opentelemetry.io/otel/propagation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/archive"
	"github.com/kube5s/sless/pkg/objstore"
	"github.com/kube5s/sless/services/gateway/internal/review"
)

// SourceOut describes the stored archive.
type SourceOut struct {
	Body struct {
		SHA256  string `json:"sha256"`
		Size    int    `json:"size"`
		S3Key   string `json:"s3_key"`
		Changed bool   `json:"changed" doc:"false when the function already had these bytes: nothing is rebuilt"`
		// Review is the source review's verdict (absent when uploads are
		// not reviewed); a deny answers 422 instead.
		Review *review.SourceReview `json:"review,omitempty"`
	}
}

// TraceparentAnnotation carries the upload's trace to the operator.
const TraceparentAnnotation = "sless.kube5s.ru/traceparent"

func (s *Server) registerSource() {
	register(s, s.route("upload-source"),
		func(ctx context.Context, in *struct {
			NamedPath
			ContentType string `header:"Content-Type"`
			RawBody     []byte `contentType:"application/zip"`
		}) (*SourceOut, error) {
			if err := s.requireTenant(ctx, in.Tenant); err != nil {
				return nil, err
			}
			ns, err := s.namespace(ctx, in.Tenant)
			if err != nil {
				return nil, err
			}
			if ct := strings.TrimSpace(strings.Split(in.ContentType, ";")[0]); ct != "application/zip" && ct != "application/x-zip-compressed" {
				return nil, withID(ctx, problem(415, "", "upload the source as application/zip, not %q", in.ContentType))
			}
			files, perr := checkZip(in.RawBody, s.Config.ArchiveLimits)
			if perr != nil {
				return nil, withID(ctx, perr)
			}
			var fn slessv1.Function
			if err := s.Kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: in.Name}, &fn); err != nil {
				return nil, fromKube(ctx, "function "+in.Name, err)
			}
			if fn.Spec.Image != "" {
				return nil, withID(ctx, problem(409, "", "function %s runs the prebuilt image %s; remove image to upload source", in.Name, fn.Spec.Image))
			}
			if err := archive.CheckEntrypoint(files, string(fn.Spec.Runtime), fn.Spec.Entrypoint); err != nil {
				return nil, withID(ctx, archiveProblem(err))
			}
			sum := sha256.Sum256(in.RawBody)
			sha := hex.EncodeToString(sum[:])
			out := &SourceOut{}
			if out.Body.Review, err = s.reviewSource(ctx, in.Tenant, &fn, in.RawBody, sha); err != nil {
				return nil, err
			}
			out.Body.SHA256, out.Body.Size, out.Body.S3Key = sha, len(in.RawBody), objstore.SourceKey(in.Tenant, in.Name, sha)
			if fn.Spec.Source != nil && fn.Spec.Source.SHA256 == sha {
				return out, nil
			}
			if ok, err := s.Store.Exists(ctx, out.Body.S3Key); err != nil {
				return nil, withID(ctx, problem(503, "", "the object store is unavailable"))
			} else if !ok {
				if err := s.Store.Put(ctx, out.Body.S3Key, bytes.NewReader(in.RawBody), int64(len(in.RawBody)), "application/zip"); err != nil {
					return nil, withID(ctx, problem(503, "", "the object store is unavailable"))
				}
			}
			carrier := propagation.MapCarrier{}
			s.prop.Inject(ctx, carrier)
			patch := map[string]any{
				"metadata": map[string]any{"annotations": map[string]any{TraceparentAnnotation: carrier["traceparent"]}},
				"spec":     map[string]any{"source": map[string]any{"s3Key": out.Body.S3Key, "sha256": sha}},
			}
			raw, _ := json.Marshal(patch)
			if err := s.Kube.Patch(ctx, &fn, client.RawPatch("application/merge-patch+json", raw)); err != nil {
				return nil, fromKube(ctx, "function "+in.Name, err)
			}
			out.Body.Changed = true
			return out, nil
		})
}

// checkZip refuses what is not a zip, and what its central directory
// shows to be unbuildable (entries that would escape the archive root or
// are links, more entries or unpacked bytes than the builder takes), so
// the upload answers at once instead of a build failing later; the builder
// checks everything again. It returns the archive's file names.
func checkZip(data []byte, lim archive.Limits) ([]string, *Problem) {
	if len(data) == 0 {
		return nil, problem(422, "invalid-archive", "the body is empty; upload a zip archive")
	}
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return nil, problem(422, "invalid-archive", "the body is not a zip archive: %v", err)
	}
	if lim.MaxEntries <= 0 || lim.MaxBytes <= 0 {
		lim = archive.DefaultLimits
	}
	files, err := archive.CheckDirectory(zr, lim)
	if err != nil {
		return nil, archiveProblem(err)
	}
	return files, nil
}

// archiveProblem maps a refused archive to its problem type.
func archiveProblem(err error) *Problem {
	var ae *archive.Error
	if !errors.As(err, &ae) {
		return problem(422, "invalid-archive", "%v", err)
	}
	typ := map[string]string{
		archive.ReasonUnsafePath: "unsafe-archive", archive.ReasonSymlink: "unsafe-archive",
		archive.ReasonTooLarge: "archive-too-large", archive.ReasonMissingEntrypoint: "missing-entrypoint",
	}[ae.Reason]
	if typ == "" {
		typ = "invalid-archive"
	}
	return problem(422, typ, "%s", ae.Message)
}
