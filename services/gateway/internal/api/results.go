package api

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/danielgtaylor/huma/v2"

	"github.com/kube5s/sless/pkg/objstore"
	"github.com/kube5s/sless/services/gateway/internal/store"
)

// resultURL is where an invocation's stored result is read.
func resultURL(tenant, id string) string {
	return "/v1/tenants/" + tenant + "/invocations/" + id + "/result"
}

func (s *Server) registerResults() {
	register(s, s.route("get-invocation-result"),
		func(ctx context.Context, in *struct {
			TenantPath
			ID string `path:"id" maxLength:"128"`
		}) (*huma.StreamResponse, error) {
			if err := s.requireTenant(ctx, in.Tenant); err != nil {
				return nil, err
			}
			res, err := s.history.Result(ctx, in.Tenant, in.ID)
			if errors.Is(err, store.ErrNotFound) {
				return nil, withID(ctx, problem(404, "", "invocation %s is not recorded (yet): an async invocation appears once it has run", in.ID))
			}
			if err != nil {
				return nil, storeProblem(ctx, err, "the invocation could not be read")
			}
			inline, key, ct := res.Inline, res.Key, res.ContentType
			var body io.ReadCloser
			var size int64
			switch {
			case key != "":
				// Only the tenant's own payloads, whatever a record says.
				if !strings.HasPrefix(key, objstore.PayloadKey(in.Tenant, "")) {
					return nil, withID(ctx, problem(404, "no-result", "invocation %s has no stored result", in.ID))
				}
				body, size, err = s.Store.Get(ctx, key)
				if errors.Is(err, objstore.ErrNotFound) {
					return nil, withID(ctx, problem(404, "no-result", "the result of invocation %s is no longer stored", in.ID))
				}
				if err != nil {
					return nil, withID(ctx, problem(503, "", "the object store is unavailable"))
				}
			case inline != nil:
				body, size = io.NopCloser(bytes.NewReader(inline)), int64(len(inline))
			default:
				return nil, withID(ctx, problem(404, "no-result", "invocation %s has no stored result (synchronous results over the inline limit are not kept)", in.ID))
			}
			if ct == "" {
				ct = "application/octet-stream"
			}
			return &huma.StreamResponse{Body: func(hctx huma.Context) {
				defer body.Close()
				// The bytes are the function's: the browser must not run them.
				hctx.SetHeader("Content-Type", ct)
				hctx.SetHeader("Content-Length", strconv.FormatInt(size, 10))
				hctx.SetHeader("X-Content-Type-Options", "nosniff")
				hctx.SetHeader("Content-Security-Policy", "sandbox")
				hctx.SetStatus(http.StatusOK)
				_, _ = io.Copy(hctx.BodyWriter(), body)
			}}, nil
		})
}
