package api

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/kube5s/sless/pkg/objstore"
	"github.com/kube5s/sless/services/gateway/internal/store"
)

// The records of the history are read by the store.
type (
	Invocation = store.Invocation
	Build      = store.Build
)

// invocation cursors are (started_at, id) of the last item.
func encodeCursor(t time.Time, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(t.UnixNano(), 10) + "|" + id))
}

func decodeCursor(c string) (time.Time, string, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return time.Time{}, "", err
	}
	ns, id, ok := strings.Cut(string(b), "|")
	n, err := strconv.ParseInt(ns, 10, 64)
	if !ok || err != nil {
		return time.Time{}, "", errors.New("malformed cursor")
	}
	return time.Unix(0, n), id, nil
}

// afterCursor decodes a page cursor into the store's position (nil for
// the first page).
func afterCursor(ctx context.Context, cursor string) (*store.After, error) {
	if cursor == "" {
		return nil, nil
	}
	t, id, err := decodeCursor(cursor)
	if err != nil {
		return nil, withID(ctx, problem(400, "bad-cursor", "the cursor is malformed"))
	}
	return &store.After{Time: t, ID: id}, nil
}

// withResultURLs sets where each invocation's stored result is read.
func withResultURLs(tenant string, items []Invocation) []Invocation {
	for i := range items {
		if items[i].HasResult {
			items[i].ResultURL = resultURL(tenant, items[i].ID)
		}
	}
	return items
}

// storeProblem maps a store error: the database not answering is a 503
// with what could not be done; anything else a 500 saying what failed.
func storeProblem(ctx context.Context, err error, what string) *Problem {
	var u *store.Unavailable
	if errors.As(err, &u) {
		p := withID(ctx, problem(503, "", "%s", u.Detail)) // as problemOf maps it
		p.cause = err
		return p
	}
	p := withID(ctx, problem(500, "", "%s", what))
	p.cause = err
	return p
}

// historyStore reads the invocation and build history (store.Store).
type historyStore interface {
	Invocations(ctx context.Context, tenant string, f store.InvocationFilter, after *store.After, limit int64) ([]store.Invocation, error)
	Invocation(ctx context.Context, tenant, id string) (store.Invocation, error)
	Builds(ctx context.Context, tenant, function string, after *store.After, limit int64) ([]store.Build, error)
	Build(ctx context.Context, tenant, function, id string) (store.Build, error)
	Result(ctx context.Context, tenant, id string) (store.Result, error)
}

func (s *Server) registerHistory() {
	register(s, s.route("list-invocations"),
		func(ctx context.Context, in *struct {
			TenantPath
			Page
			Function string    `query:"function" maxLength:"63"`
			Status   string    `query:"status" enum:"succeeded,failed,timeout,rejected,"`
			Trigger  string    `query:"trigger" enum:"http,async,cron,queue,job,"`
			Since    time.Time `query:"since" doc:"RFC 3339; only invocations started at or after it"`
		}) (*ListOut[Invocation], error) {
			if err := s.requireTenant(ctx, in.Tenant); err != nil {
				return nil, err
			}
			after, err := afterCursor(ctx, in.Cursor)
			if err != nil {
				return nil, err
			}
			items, err := s.history.Invocations(ctx, in.Tenant, store.InvocationFilter{Function: in.Function, Status: in.Status, Trigger: in.Trigger, Since: in.Since},
				after, in.Limit+1)
			if err != nil {
				return nil, storeProblem(ctx, err, "the invocations could not be read")
			}
			out := &ListOut[Invocation]{}
			out.Body.Items = withResultURLs(in.Tenant, items)
			if int64(len(out.Body.Items)) > in.Limit {
				out.Body.Items = out.Body.Items[:in.Limit]
				last := out.Body.Items[len(out.Body.Items)-1]
				out.Body.NextCursor = encodeCursor(last.StartedAt, last.ID)
			}
			return out, nil
		})
	register(s, s.route("get-invocation"),
		func(ctx context.Context, in *struct {
			TenantPath
			ID string `path:"id" maxLength:"128"`
		}) (*One[Invocation], error) {
			if err := s.requireTenant(ctx, in.Tenant); err != nil {
				return nil, err
			}
			v, err := s.history.Invocation(ctx, in.Tenant, in.ID)
			if errors.Is(err, store.ErrNotFound) {
				return nil, withID(ctx, problem(404, "", "invocation %s is not recorded (yet): an async invocation appears once it has run", in.ID))
			}
			if err != nil {
				return nil, storeProblem(ctx, err, "the invocation could not be read")
			}
			return &One[Invocation]{Status: 200, Body: withResultURLs(in.Tenant, []Invocation{v})[0]}, nil
		})

	register(s, s.route("list-builds"),
		func(ctx context.Context, in *struct {
			NamedPath
			Page
		}) (*ListOut[Build], error) {
			if err := s.requireTenant(ctx, in.Tenant); err != nil {
				return nil, err
			}
			after, err := afterCursor(ctx, in.Cursor)
			if err != nil {
				return nil, err
			}
			items, err := s.history.Builds(ctx, in.Tenant, in.Name, after, in.Limit+1)
			if err != nil {
				return nil, storeProblem(ctx, err, "the builds could not be read")
			}
			out := &ListOut[Build]{}
			out.Body.Items = items
			if int64(len(out.Body.Items)) > in.Limit {
				out.Body.Items = out.Body.Items[:in.Limit]
				last := out.Body.Items[len(out.Body.Items)-1]
				out.Body.NextCursor = encodeCursor(last.RequestedAt, last.ID)
			}
			return out, nil
		})
	type BuildPath struct {
		NamedPath
		ID string `path:"id" maxLength:"64"`
	}
	getBuild := func(ctx context.Context, in *BuildPath) (Build, error) {
		b, err := s.history.Build(ctx, in.Tenant, in.Name, in.ID)
		if errors.Is(err, store.ErrNotFound) {
			return b, withID(ctx, problem(404, "", "build %s of function %s not found", in.ID, in.Name))
		}
		if err != nil {
			return b, storeProblem(ctx, err, "the build could not be read")
		}
		return b, nil
	}
	register(s, s.route("get-build"),
		func(ctx context.Context, in *BuildPath) (*One[Build], error) {
			if err := s.requireTenant(ctx, in.Tenant); err != nil {
				return nil, err
			}
			b, err := getBuild(ctx, in)
			if err != nil {
				return nil, err
			}
			return &One[Build]{Status: 200, Body: b}, nil
		})
	register(s, s.route("get-build-log"),
		func(ctx context.Context, in *struct {
			BuildPath
			Follow bool `query:"follow"`
		}) (*huma.StreamResponse, error) {
			if err := s.requireTenant(ctx, in.Tenant); err != nil {
				return nil, err
			}
			if _, err := getBuild(ctx, &in.BuildPath); err != nil {
				return nil, err
			}
			key := objstore.BuildLogKey(in.Tenant, in.Name, in.ID)
			return &huma.StreamResponse{Body: func(hctx huma.Context) {
				hctx.SetHeader("Content-Type", "text/plain; charset=utf-8")
				hctx.SetHeader("X-Content-Type-Options", "nosniff")
				finished := func(ctx context.Context) bool {
					b, err := getBuild(ctx, &in.BuildPath)
					return err != nil || b.State == "succeeded" || b.State == "failed"
				}
				followLog(hctx.Context(), hctx.BodyWriter(), s.Store, key, in.Follow, finished, 500*time.Millisecond)
			}}, nil
		})
}

// logSource reads a build log from a byte offset on.
type logSource interface {
	GetFrom(ctx context.Context, key string, offset int64) (io.ReadCloser, error)
}

// followLog writes the log at key to w; with follow, it polls every
// interval for the bytes written since (a ranged read, so a long log is
// not fetched again every time) until finished says the build ended or
// ctx ends. The builder only appends to a log, so an offset stays valid.
func followLog(ctx context.Context, w io.Writer, src logSource, key string, follow bool, finished func(context.Context) bool, interval time.Duration) {
	var sent int64
	for {
		done := finished(ctx) // before the read, so the last bytes are not missed
		if rc, err := src.GetFrom(ctx, key, sent); err == nil {
			n, _ := io.Copy(w, rc)
			rc.Close()
			sent += n
			if f, ok := w.(http.Flusher); ok && n > 0 {
				f.Flush()
			}
		}
		if !follow || done || ctx.Err() != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}
