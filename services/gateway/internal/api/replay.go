package api

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"golang.org/x/net/http/httpguts"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/services/gateway/internal/enqueue"
	"github.com/kube5s/sless/services/gateway/internal/proxy"
	"github.com/kube5s/sless/services/gateway/internal/store"
)

// KeptRequest is the request an invocation that did not succeed kept, as
// its function received it, without credentials.
type KeptRequest struct {
	Method      string              `json:"method"`
	Path        string              `json:"path"`
	Query       string              `json:"query,omitempty"`
	Headers     map[string][]string `json:"headers"`
	Body        string              `json:"body,omitempty" doc:"text, or base64 when body_base64 is true"`
	BodyBase64  bool                `json:"body_base64,omitempty"`
	BodyOmitted bool                `json:"body_omitted,omitempty" doc:"the body was over 256 KiB and is not kept; a replay must give one"`
	BodySize    int64               `json:"body_size"`
}

// ReplayEdits change the kept request before it runs again; an absent
// field keeps what was kept.
type ReplayEdits struct {
	Method     *string             `json:"method,omitempty" pattern:"^[A-Z]{1,16}$"`
	Path       *string             `json:"path,omitempty" maxLength:"2048" doc:"below the function's root, starting with /"`
	Query      *string             `json:"query,omitempty" maxLength:"8192"`
	Headers    map[string][]string `json:"headers,omitempty" doc:"replace the kept headers; credentials and the platform's own are refused"`
	Body       *string             `json:"body,omitempty" doc:"replaces the kept body"`
	BodyBase64 bool                `json:"body_base64,omitempty" doc:"body is base64"`
}

// ReplayAccepted names the new invocation.
type ReplayAccepted struct {
	InvocationID string `json:"invocation_id" doc:"the new invocation; its record says replay_of"`
	ReplayOf     string `json:"replay_of"`
	Status       string `json:"status"`
}

// keptReplayer reads and replays kept requests (enqueue.Replayer).
type keptReplayer interface {
	KeptRequest(ctx context.Context, k enqueue.Kept) (msg.KeptRequest, error)
	ReplayInvocation(ctx context.Context, k enqueue.Kept, e enqueue.Edits) (enqueue.Replay, error)
}

func (s *Server) registerReplay() {
	type InvocationPath struct {
		TenantPath
		ID string `path:"id" maxLength:"128"`
	}
	// kept is the invocation's kept request's place, read as the tenant.
	kept := func(ctx context.Context, in *InvocationPath) (enqueue.Kept, store.Invocation, error) {
		if err := s.requireTenant(ctx, in.Tenant); err != nil {
			return enqueue.Kept{}, store.Invocation{}, err
		}
		v, err := s.history.Invocation(ctx, in.Tenant, in.ID)
		if errors.Is(err, store.ErrNotFound) {
			return enqueue.Kept{}, v, withID(ctx, problem(404, "", "invocation %s is not recorded (yet): an async invocation appears once it has run", in.ID))
		}
		if err != nil {
			return enqueue.Kept{}, v, storeProblem(ctx, err, "the invocation could not be read")
		}
		return enqueue.Kept{Tenant: in.Tenant, Namespace: slessv1.NamespaceFor(in.Tenant), Function: v.Function, InvocationID: v.ID, Key: v.RequestKey}, v, nil
	}
	register(s, s.route("get-invocation-request"),
		func(ctx context.Context, in *InvocationPath) (*One[KeptRequest], error) {
			k, _, err := kept(ctx, in)
			if err != nil {
				return nil, err
			}
			kr, err := s.kept.KeptRequest(ctx, k)
			if err != nil {
				return nil, keptProblem(ctx, err)
			}
			out := KeptRequest{Method: kr.Method, Path: kr.Path, Query: kr.Query, Headers: kr.Headers, BodyOmitted: kr.BodyOmitted, BodySize: kr.BodySize}
			if out.Headers == nil {
				out.Headers = map[string][]string{}
			}
			out.Body, out.BodyBase64 = store.TextOrBase64(kr.Body)
			return &One[KeptRequest]{Status: 200, Body: out}, nil
		})
	register(s, s.route("replay-invocation"),
		func(ctx context.Context, in *struct {
			InvocationPath
			Body *ReplayEdits
		}) (*One[ReplayAccepted], error) {
			var e enqueue.Edits
			if in.Body != nil {
				var err error
				if e, err = checkEdits(*in.Body); err != nil {
					return nil, withID(ctx, problem(422, "bad-edit", "%v", err))
				}
			}
			k, v, err := kept(ctx, &in.InvocationPath)
			if err != nil {
				return nil, err
			}
			if _, err := s.function(ctx, in.Tenant, v.Function); err != nil {
				return nil, s.lookupFailed(ctx, err, "function %s no longer exists", v.Function)
			}
			r, err := s.kept.ReplayInvocation(ctx, k, e)
			if err != nil {
				return nil, keptProblem(ctx, err)
			}
			return &One[ReplayAccepted]{Status: http.StatusAccepted, Location: fmt.Sprintf("/v1/tenants/%s/invocations/%s", in.Tenant, r.InvocationID),
				Body: ReplayAccepted{InvocationID: r.InvocationID, ReplayOf: v.ID, Status: "queued"}}, nil
		})
}

// keptProblem maps an error of reading or replaying a kept request.
func keptProblem(ctx context.Context, err error) *Problem {
	var not *enqueue.NotKept
	if errors.As(err, &not) {
		return withID(ctx, problem(409, "request-not-kept", "%s", not.Detail))
	}
	return replayProblem(ctx, err, "the invocation could not be read")
}

// checkEdits refuses what a replay must not send: a path outside the
// function's root or with control characters, an invalid header, a
// credential or one of the platform's own headers, a body over the async
// limit.
func checkEdits(in ReplayEdits) (enqueue.Edits, error) {
	e := enqueue.Edits{Method: in.Method, Path: in.Path, Query: in.Query}
	if in.Path != nil && (!strings.HasPrefix(*in.Path, "/") || strings.ContainsFunc(*in.Path, isControlOrSpace)) {
		return e, fmt.Errorf("path must start with / and hold no spaces or control characters")
	}
	if in.Query != nil && strings.ContainsFunc(*in.Query, isControlOrSpace) {
		return e, fmt.Errorf("query must hold no spaces or control characters")
	}
	if in.Headers != nil {
		e.Headers = make(map[string][]string, len(in.Headers))
		for name, values := range in.Headers {
			canon := http.CanonicalHeaderKey(name)
			if !httpguts.ValidHeaderFieldName(name) {
				return e, fmt.Errorf("header name %q is not valid", name)
			}
			if proxy.Hidden(canon) || msg.IsCredential(canon) {
				return e, fmt.Errorf("header %s is a credential or the platform's own and is not sent to a function", canon)
			}
			for _, v := range values {
				if !httpguts.ValidHeaderFieldValue(v) {
					return e, fmt.Errorf("the value of header %s is not valid", canon)
				}
			}
			e.Headers[canon] = values
		}
	}
	if in.Body != nil {
		body := []byte(*in.Body)
		if in.BodyBase64 {
			var err error
			if body, err = base64.StdEncoding.DecodeString(*in.Body); err != nil {
				return e, fmt.Errorf("body is not base64")
			}
		}
		if len(body) > maxAsyncBody {
			return e, fmt.Errorf("a replayed body is limited to %d bytes", maxAsyncBody)
		}
		e.Body = &body
	}
	return e, nil
}

func isControlOrSpace(r rune) bool { return r <= ' ' || r == 0x7f }
