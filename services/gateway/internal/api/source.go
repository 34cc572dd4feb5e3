package api

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"net/http"
	"path"
	"strings"

	"github.com/danielgtaylor/huma/v2"
	"go.opentelemetry.io/otel/propagation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/objstore"
)

// SourceOut describes the stored archive.
type SourceOut struct {
	Body struct {
		SHA256  string `json:"sha256"`
		Size    int    `json:"size"`
		S3Key   string `json:"s3_key"`
		Changed bool   `json:"changed" doc:"false when the function already had these bytes: nothing is rebuilt"`
	}
}

// TraceparentAnnotation carries the upload's trace to the operator.
const TraceparentAnnotation = "sless.kube5s.ru/traceparent"

func (s *Server) registerSource() {
	register(s, huma.Operation{OperationID: "upload-source", Method: http.MethodPut, Path: "/v1/tenants/{t}/functions/{name}/source",
		Tags: []string{"functions"}, Summary: "Upload the function's source as a zip; the same bytes again change nothing",
		MaxBodyBytes: s.Config.MaxSourceBytes},
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
			if err := checkZip(in.RawBody); err != nil {
				return nil, withID(ctx, err)
			}
			var fn slessv1.Function
			if err := s.Kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: in.Name}, &fn); err != nil {
				return nil, fromKube(ctx, "function "+in.Name, err)
			}
			if fn.Spec.Image != "" {
				return nil, withID(ctx, problem(409, "", "function %s runs the prebuilt image %s; remove image to upload source", in.Name, fn.Spec.Image))
			}
			sum := sha256.Sum256(in.RawBody)
			sha := hex.EncodeToString(sum[:])
			out := &SourceOut{}
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

// checkZip refuses what is not a zip, and entries that would escape the
// archive root or are links; the builder checks everything again.
func checkZip(data []byte) *Problem {
	if len(data) == 0 {
		return problem(422, "invalid-archive", "the body is empty; upload a zip archive")
	}
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return problem(422, "invalid-archive", "the body is not a zip archive: %v", err)
	}
	for _, f := range zr.File {
		name := strings.ReplaceAll(f.Name, "\\", "/")
		clean := path.Clean(name)
		if path.IsAbs(name) || clean == ".." || strings.HasPrefix(clean, "../") {
			return problem(422, "unsafe-archive", "entry %q points outside the archive root", f.Name)
		}
		if f.Mode()&fs.ModeSymlink != 0 {
			return problem(422, "unsafe-archive", "entry %q is a symbolic link", f.Name)
		}
	}
	return nil
}
