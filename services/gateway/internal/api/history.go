package api

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/danielgtaylor/huma/v2"
	"github.com/jackc/pgx/v5"

	"github.com/kube5s/sless/pkg/objstore"
	"github.com/kube5s/sless/pkg/pgtext"
)

// Invocation is one record of the history.
type Invocation struct {
	ID                string     `json:"id"`
	Function          string     `json:"function"`
	Trigger           string     `json:"trigger"`
	TriggerName       string     `json:"trigger_name,omitempty"`
	Status            string     `json:"status" enum:"succeeded,failed,timeout,rejected"`
	HTTPStatus        *int       `json:"http_status,omitempty"`
	Attempts          int        `json:"attempts"`
	EnqueuedAt        *time.Time `json:"enqueued_at,omitempty"`
	StartedAt         time.Time  `json:"started_at"`
	FinishedAt        time.Time  `json:"finished_at"`
	QueueWaitMs       int64      `json:"queue_wait_ms"`
	DurationMs        int64      `json:"duration_ms"`
	ColdStart         bool       `json:"cold_start"`
	RequestBytes      int64      `json:"request_bytes"`
	ResponseBytes     int64      `json:"response_bytes"`
	Error             string     `json:"error,omitempty"`
	TraceID           string     `json:"trace_id,omitempty"`
	Result            string     `json:"result,omitempty" doc:"text, or base64 when result_base64 is true; absent when large"`
	ResultBase64      bool       `json:"result_base64,omitempty"`
	ResultContentType string     `json:"result_content_type,omitempty"`
	ResultKey         string     `json:"result_key,omitempty"`
	ResultURL         string     `json:"result_url,omitempty" doc:"where the stored result is read, large ones included"`
}

// Build is one build of a function.
type Build struct {
	ID           string     `json:"id"`
	Function     string     `json:"function"`
	SourceSHA256 string     `json:"source_sha256"`
	Runtime      string     `json:"runtime"`
	Driver       string     `json:"driver"`
	State        string     `json:"state" enum:"queued,running,succeeded,failed"`
	Reason       string     `json:"reason,omitempty"`
	Message      string     `json:"message,omitempty"`
	Artifact     string     `json:"artifact,omitempty"`
	Image        string     `json:"image,omitempty"`
	Attempts     int        `json:"attempts"`
	RequestedAt  time.Time  `json:"requested_at"`
	StartedAt    *time.Time `json:"started_at,omitempty"`
	FinishedAt   *time.Time `json:"finished_at,omitempty"`
}

const invocationColumns = `id, function, trigger_kind, trigger_name, status, http_status, attempts, enqueued_at, started_at, finished_at,
	queue_wait_ms, duration_ms, cold_start, request_bytes, response_bytes, coalesce(error, ''), coalesce(trace_id, ''), result,
	coalesce(result_content_type, ''), coalesce(result_key, '')`

func scanInvocation(row pgx.Row, tenant string) (Invocation, error) {
	var v Invocation
	var result []byte
	err := row.Scan(&v.ID, &v.Function, &v.Trigger, &v.TriggerName, &v.Status, &v.HTTPStatus, &v.Attempts, &v.EnqueuedAt, &v.StartedAt, &v.FinishedAt,
		&v.QueueWaitMs, &v.DurationMs, &v.ColdStart, &v.RequestBytes, &v.ResponseBytes, &v.Error, &v.TraceID, &result, &v.ResultContentType, &v.ResultKey)
	if utf8.Valid(result) {
		v.Result = string(result)
	} else {
		v.Result, v.ResultBase64 = base64.StdEncoding.EncodeToString(result), true
	}
	if v.ResultKey != "" || result != nil {
		v.ResultURL = resultURL(tenant, v.ID)
	}
	return v, err
}

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

func (s *Server) registerHistory() {
	tag := []string{"invocations"}
	register(s, huma.Operation{OperationID: "list-invocations", Method: http.MethodGet, Path: "/v1/tenants/{t}/invocations", Tags: tag,
		Summary: "List invocations, newest first"},
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
			q := `SELECT ` + invocationColumns + ` FROM invocations WHERE tenant = $1`
			args := []any{in.Tenant}
			add := func(cond string, v any) {
				args = append(args, v)
				q += fmt.Sprintf(" AND "+cond, len(args))
			}
			if in.Function != "" {
				add("function = $%d", pgtext.Clean(in.Function))
			}
			if in.Status != "" {
				add("status = $%d", in.Status)
			}
			if in.Trigger != "" {
				add("trigger_kind = $%d", in.Trigger)
			}
			if !in.Since.IsZero() {
				add("started_at >= $%d", in.Since)
			}
			if in.Cursor != "" {
				t, id, err := decodeCursor(in.Cursor)
				if err != nil {
					return nil, withID(ctx, problem(400, "bad-cursor", "the cursor is malformed"))
				}
				args = append(args, t, pgtext.Clean(id))
				q += fmt.Sprintf(" AND (started_at, id) < ($%d, $%d)", len(args)-1, len(args))
			}
			args = append(args, in.Limit+1)
			q += fmt.Sprintf(" ORDER BY started_at DESC, id DESC LIMIT $%d", len(args))
			rows, err := s.DB.Query(ctx, q, args...)
			if err != nil {
				return nil, withID(ctx, problem(503, "", "the invocation history is unavailable"))
			}
			defer rows.Close()
			out := &ListOut[Invocation]{}
			out.Body.Items = []Invocation{}
			for rows.Next() {
				v, err := scanInvocation(rows, in.Tenant)
				if err != nil {
					return nil, s.internal(ctx, 500, err, "the invocations could not be read")
				}
				out.Body.Items = append(out.Body.Items, v)
			}
			if int64(len(out.Body.Items)) > in.Limit {
				out.Body.Items = out.Body.Items[:in.Limit]
				last := out.Body.Items[len(out.Body.Items)-1]
				out.Body.NextCursor = encodeCursor(last.StartedAt, last.ID)
			}
			return out, nil
		})
	register(s, huma.Operation{OperationID: "get-invocation", Method: http.MethodGet, Path: "/v1/tenants/{t}/invocations/{id}", Tags: tag,
		Summary: "Read one invocation with its timings and stored result"},
		func(ctx context.Context, in *struct {
			TenantPath
			ID string `path:"id" maxLength:"128"`
		}) (*One[Invocation], error) {
			if err := s.requireTenant(ctx, in.Tenant); err != nil {
				return nil, err
			}
			v, err := scanInvocation(s.DB.QueryRow(ctx, `SELECT `+invocationColumns+` FROM invocations WHERE tenant = $1 AND id = $2`, in.Tenant, pgtext.Clean(in.ID)), in.Tenant)
			if errors.Is(err, pgx.ErrNoRows) {
				return nil, withID(ctx, problem(404, "", "invocation %s is not recorded (yet): an async invocation appears once it has run", in.ID))
			}
			if err != nil {
				return nil, withID(ctx, problem(503, "", "the invocation history is unavailable"))
			}
			return &One[Invocation]{Status: 200, Body: v}, nil
		})

	btag := []string{"builds"}
	const buildColumns = `id, function, source_sha256, runtime, driver, state, coalesce(reason, ''), coalesce(message, ''), coalesce(artifact, ''),
		coalesce(image, ''), attempts, requested_at, started_at, finished_at`
	scanBuild := func(row pgx.Row) (Build, error) {
		var b Build
		err := row.Scan(&b.ID, &b.Function, &b.SourceSHA256, &b.Runtime, &b.Driver, &b.State, &b.Reason, &b.Message, &b.Artifact, &b.Image,
			&b.Attempts, &b.RequestedAt, &b.StartedAt, &b.FinishedAt)
		return b, err
	}
	register(s, huma.Operation{OperationID: "list-builds", Method: http.MethodGet, Path: "/v1/tenants/{t}/functions/{name}/builds", Tags: btag,
		Summary: "List a function's builds, newest first"},
		func(ctx context.Context, in *struct {
			NamedPath
			Page
		}) (*ListOut[Build], error) {
			if err := s.requireTenant(ctx, in.Tenant); err != nil {
				return nil, err
			}
			q := `SELECT ` + buildColumns + ` FROM builds WHERE tenant = $1 AND function = $2`
			args := []any{in.Tenant, pgtext.Clean(in.Name)}
			if in.Cursor != "" {
				t, id, err := decodeCursor(in.Cursor)
				if err != nil {
					return nil, withID(ctx, problem(400, "bad-cursor", "the cursor is malformed"))
				}
				args = append(args, t, id)
				q += ` AND (requested_at, id) < ($3, $4)`
			}
			args = append(args, in.Limit+1)
			q += fmt.Sprintf(" ORDER BY requested_at DESC, id DESC LIMIT $%d", len(args))
			rows, err := s.DB.Query(ctx, q, args...)
			if err != nil {
				return nil, withID(ctx, problem(503, "", "the build history is unavailable"))
			}
			defer rows.Close()
			out := &ListOut[Build]{}
			out.Body.Items = []Build{}
			for rows.Next() {
				b, err := scanBuild(rows)
				if err != nil {
					return nil, s.internal(ctx, 500, err, "the builds could not be read")
				}
				out.Body.Items = append(out.Body.Items, b)
			}
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
		b, err := scanBuild(s.DB.QueryRow(ctx, `SELECT `+buildColumns+` FROM builds WHERE tenant = $1 AND function = $2 AND id = $3`, in.Tenant, pgtext.Clean(in.Name), pgtext.Clean(in.ID)))
		if errors.Is(err, pgx.ErrNoRows) {
			return b, withID(ctx, problem(404, "", "build %s of function %s not found", in.ID, in.Name))
		}
		if err != nil {
			return b, withID(ctx, problem(503, "", "the build history is unavailable"))
		}
		return b, nil
	}
	register(s, huma.Operation{OperationID: "get-build", Method: http.MethodGet, Path: "/v1/tenants/{t}/functions/{name}/builds/{id}", Tags: btag,
		Summary: "Read one build"},
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
	register(s, huma.Operation{OperationID: "get-build-log", Method: http.MethodGet, Path: "/v1/tenants/{t}/functions/{name}/builds/{id}/log", Tags: btag,
		Summary: "The build log as text; follow=true streams it until the build ends"},
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
