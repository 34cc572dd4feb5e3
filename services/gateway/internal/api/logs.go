package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humachi"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/services/gateway/internal/logs"
)

// LogRecord is one line a function's process wrote (application/x-ndjson,
// one per line); a type of its own so that the document names it.
type LogRecord logs.Record

// FunctionLogsIn selects the records of GET .../functions/{name}/logs.
type FunctionLogsIn struct {
	NamedPath
	Follow bool   `query:"follow" doc:"keep the response open and send new records as they are written, until the client goes away"`
	Since  string `query:"since" maxLength:"40" doc:"only records written in this last while (10m, 1h30m) or since this RFC 3339 time"`
	Tail   int    `query:"tail" minimum:"0" maximum:"10000" default:"1000" doc:"at most this many of the records written before the request (per replica)"`
}

// since parses ?since= against now.
func since(ctx context.Context, v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	msg := "a positive duration (10m, 1h30m) or an RFC 3339 time"
	return time.Time{}, withID(ctx, problem(422, "", "since %q: %s", v, msg).field("query.since", msg))
}

func (s *Server) registerLogs() {
	register(s, s.route("get-function-logs"),
		func(ctx context.Context, in *FunctionLogsIn) (*huma.StreamResponse, error) {
			if err := s.requireTenant(ctx, in.Tenant); err != nil {
				return nil, err
			}
			from, err := since(ctx, in.Since, time.Now())
			if err != nil {
				return nil, err
			}
			ns, err := s.namespace(ctx, in.Tenant)
			if err != nil {
				return nil, err
			}
			var f slessv1.Function
			if err := s.Kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: in.Name}, &f); err != nil {
				return nil, fromKube(ctx, "function "+in.Name, err)
			}
			if s.Logs == nil {
				return nil, withID(ctx, problem(503, "", "this gateway does not serve function logs"))
			}
			opt := logs.Options{Follow: in.Follow, Since: from, Tail: in.Tail}
			release := func() {}
			if in.Follow {
				if release, err = s.long.take(ctx, "follow", in.Tenant, MaxFollowsPerTenant); err != nil {
					return nil, err
				}
			}
			return &huma.StreamResponse{Body: func(hctx huma.Context) {
				defer release()
				hctx.SetHeader("Content-Type", "application/x-ndjson")
				hctx.SetHeader("X-Content-Type-Options", "nosniff")
				hctx.SetHeader("Cache-Control", "no-store")
				w := hctx.BodyWriter()
				flusher, _ := w.(http.Flusher)
				enc := json.NewEncoder(w)
				enc.SetEscapeHTML(false)
				sent := 0
				if in.Follow && flusher != nil {
					// The client learns at once that the follow started,
					// not with the first record.
					hctx.SetStatus(http.StatusOK)
					flusher.Flush()
					sent = -1 // the status is sent
				}
				if in.Follow {
					s.streams.WithLabelValues("logs").Inc()
					defer s.streams.WithLabelValues("logs").Dec()
				}
				err := s.Logs.Stream(hctx.Context(), ns, in.Name, opt, func(r logs.Record) error {
					if err := enc.Encode(LogRecord(r)); err != nil {
						return err // the client went away
					}
					sent = max(sent, 0) + 1
					if in.Follow && flusher != nil {
						flusher.Flush()
					}
					return nil
				})
				if err == nil || errors.Is(err, context.Canceled) || hctx.Context().Err() != nil {
					return
				}
				ctx := hctx.Context()
				if sent == 0 { // nothing written yet: the status can still say it
					r, w := humachi.Unwrap(hctx)
					s.writeError(w, r, s.internal(ctx, 502, err, "the function's logs could not be read"))
					return
				}
				// Mid-stream: the status is sent; say it in the stream and log why.
				logOf(ctx).ErrorContext(ctx, "function logs failed", "requestID", RequestID(ctx), "tenant", in.Tenant, "function", in.Name, "err", err)
				_ = enc.Encode(LogRecord{Time: time.Now().UTC(), Stream: logs.StreamRuntime, Level: "error", Message: "the log could not be read further"})
			}}, nil
		})
}
