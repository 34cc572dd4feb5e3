package api

import (
	"context"

	"github.com/kube5s/sless/pkg/callback"
	"github.com/kube5s/sless/pkg/headers"
)

// CallbackSecretOut is the secret the tenant's callbacks are signed with.
type CallbackSecretOut struct {
	Body struct {
		Secret    string `json:"secret" doc:"the HMAC-SHA256 key (its UTF-8 bytes)"`
		Header    string `json:"header" doc:"the header carrying t=<unix seconds>,v1=<hex HMAC of \"<t>.<body>\">"`
		Tolerance int    `json:"tolerance_seconds" doc:"how old a signature receivers should accept"`
	}
}

func (s *Server) registerCallbackSecret() {
	out := func(secret string) *CallbackSecretOut {
		o := &CallbackSecretOut{}
		o.Body.Secret, o.Body.Header, o.Body.Tolerance = secret, headers.Signature, int(callback.Tolerance.Seconds())
		return o
	}
	register(s, s.route("get-callback-secret"),
		func(ctx context.Context, in *TenantPath) (*CallbackSecretOut, error) {
			if err := s.requireTenant(ctx, in.Tenant); err != nil {
				return nil, err
			}
			if _, err := s.namespace(ctx, in.Tenant); err != nil {
				return nil, err
			}
			secret, err := callback.Secret(ctx, s.DB, in.Tenant)
			if err != nil {
				return nil, s.internal(ctx, 503, err, "the callback secret cannot be read right now")
			}
			return out(secret), nil
		})
	register(s, s.route("rotate-callback-secret"),
		func(ctx context.Context, in *TenantPath) (*CallbackSecretOut, error) {
			if err := s.requireTenant(ctx, in.Tenant); err != nil {
				return nil, err
			}
			if _, err := s.namespace(ctx, in.Tenant); err != nil {
				return nil, err
			}
			secret, err := callback.Rotate(ctx, s.DB, in.Tenant)
			if err != nil {
				return nil, s.internal(ctx, 503, err, "the callback secret cannot be rotated right now")
			}
			return out(secret), nil
		})
}
