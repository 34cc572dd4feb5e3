package api

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/jackc/pgx/v5"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/callback"
	"github.com/kube5s/sless/pkg/pgtext"
)

var tenantKind = kind[Tenant, *slessv1.Tenant, *slessv1.TenantList]{
	name: "tenant", plural: "tenants",
	newObj: func() *slessv1.Tenant { return &slessv1.Tenant{} }, newList: func() *slessv1.TenantList { return &slessv1.TenantList{} },
	items: func(l *slessv1.TenantList) []*slessv1.Tenant {
		out := make([]*slessv1.Tenant, len(l.Items))
		for i := range l.Items {
			out[i] = &l.Items[i]
		}
		return out
	},
	toREST: func(t *slessv1.Tenant) Tenant { return tenantREST(t) },
}

// TokenOut is a new token, shown once.
type TokenOut struct {
	Body struct {
		ID        string    `json:"id"`
		Tenant    string    `json:"tenant"`
		Name      string    `json:"name,omitempty"`
		Token     string    `json:"token" doc:"shown only in this response; only its hash is stored"`
		CreatedAt time.Time `json:"created_at"`
	}
}

func (s *Server) registerTenants() {
	tag := []string{"tenants"}
	register(s, huma.Operation{OperationID: "create-tenant", Method: http.MethodPost, Path: "/v1/tenants", Tags: tag,
		Summary: "Create a tenant (admin)", DefaultStatus: http.StatusCreated, MaxBodyBytes: 64 << 10},
		func(ctx context.Context, in *struct{ Body TenantInput }) (*One[Tenant], error) {
			if err := s.requireAdmin(ctx); err != nil {
				return nil, err
			}
			return tenantKind.create(ctx, s, in.Body.Name, tenantCR(&in.Body))
		})
	register(s, huma.Operation{OperationID: "list-tenants", Method: http.MethodGet, Path: "/v1/tenants", Tags: tag, Summary: "List tenants (admin)"},
		func(ctx context.Context, in *Page) (*ListOut[Tenant], error) {
			if err := s.requireAdmin(ctx); err != nil {
				return nil, err
			}
			l := &slessv1.TenantList{}
			if err := s.Kube.List(ctx, l, client.Limit(in.Limit), client.Continue(in.Cursor)); err != nil {
				return nil, fromKube(ctx, "tenants", err)
			}
			out := &ListOut[Tenant]{}
			out.Body.Items = []Tenant{}
			for i := range l.Items {
				out.Body.Items = append(out.Body.Items, tenantREST(&l.Items[i]))
			}
			out.Body.NextCursor = l.Continue
			return out, nil
		})
	register(s, huma.Operation{OperationID: "get-tenant", Method: http.MethodGet, Path: "/v1/tenants/{t}", Tags: tag, Summary: "Read a tenant"},
		func(ctx context.Context, in *TenantPath) (*One[Tenant], error) {
			if err := s.requireTenant(ctx, in.Tenant); err != nil {
				return nil, err
			}
			var t slessv1.Tenant
			if err := s.Kube.Get(ctx, client.ObjectKey{Name: in.Tenant}, &t); err != nil {
				return nil, fromKube(ctx, "tenant "+in.Tenant, err)
			}
			return &One[Tenant]{Status: 200, Body: tenantREST(&t)}, nil
		})
	register(s, huma.Operation{OperationID: "delete-tenant", Method: http.MethodDelete, Path: "/v1/tenants/{t}", Tags: tag,
		Summary: "Delete a tenant and everything it owns (admin)", DefaultStatus: http.StatusAccepted},
		func(ctx context.Context, in *TenantPath) (*Accepted, error) {
			if err := s.requireAdmin(ctx); err != nil {
				return nil, err
			}
			t := &slessv1.Tenant{ObjectMeta: metav1.ObjectMeta{Name: in.Tenant}}
			if err := s.Kube.Delete(ctx, t); err != nil {
				return nil, fromKube(ctx, "tenant "+in.Tenant, err)
			}
			// The notification goes out with the commit, to every gateway.
			if _, err := s.DB.Exec(ctx, `WITH r AS (UPDATE api_tokens SET revoked_at = now() WHERE tenant = $1 AND revoked_at IS NULL)
				SELECT pg_notify('`+tokenChannel+`', $1::text || '/')`, in.Tenant); err != nil {
				return nil, s.internal(ctx, 500, err, "the tenant's tokens could not be revoked")
			}
			s.tokens.forget(in.Tenant, "")
			// A tenant made again under this name must not verify with the old secret.
			if err := callback.Forget(ctx, s.DB, in.Tenant); err != nil {
				return nil, s.internal(ctx, 500, err, "the tenant's callback secret could not be deleted")
			}
			out := &Accepted{}
			out.Body.Status = "deleting"
			return out, nil
		})

	type tokenIn struct {
		TenantPath
		Body struct {
			Name string `json:"name,omitempty" maxLength:"64"`
		}
	}
	register(s, huma.Operation{OperationID: "create-token", Method: http.MethodPost, Path: "/v1/tenants/{t}/tokens", Tags: []string{"tokens"},
		Summary: "Issue a tenant token (admin); the token is shown once", DefaultStatus: http.StatusCreated, MaxBodyBytes: 4 << 10},
		func(ctx context.Context, in *tokenIn) (*TokenOut, error) {
			if err := s.requireAdmin(ctx); err != nil {
				return nil, err
			}
			if _, err := s.namespace(ctx, in.Tenant); err != nil {
				return nil, err
			}
			tok, id := newToken()
			out := &TokenOut{}
			err := s.DB.QueryRow(ctx, `INSERT INTO api_tokens (id, tenant, name, token_hash) VALUES ($1, $2, $3, $4) RETURNING created_at`,
				id, in.Tenant, pgtext.Clean(in.Body.Name), hashToken(tok)).Scan(&out.Body.CreatedAt)
			if err != nil {
				return nil, s.internal(ctx, 500, err, "the token could not be stored")
			}
			out.Body.ID, out.Body.Tenant, out.Body.Name, out.Body.Token = id, in.Tenant, in.Body.Name, tok
			return out, nil
		})
	type tokenPath struct {
		TenantPath
		ID string `path:"id" maxLength:"64"`
	}
	register(s, huma.Operation{OperationID: "revoke-token", Method: http.MethodDelete, Path: "/v1/tenants/{t}/tokens/{id}", Tags: []string{"tokens"},
		Summary: "Revoke a tenant token (admin)", DefaultStatus: http.StatusNoContent},
		func(ctx context.Context, in *tokenPath) (*struct{}, error) {
			if err := s.requireAdmin(ctx); err != nil {
				return nil, err
			}
			var id string
			err := s.DB.QueryRow(ctx, `WITH r AS (UPDATE api_tokens SET revoked_at = now() WHERE id = $1 AND tenant = $2 AND revoked_at IS NULL RETURNING id)
				SELECT r.id FROM r, LATERAL (SELECT pg_notify('`+tokenChannel+`', $2::text || '/' || r.id)) AS n`, in.ID, in.Tenant).Scan(&id)
			if errors.Is(err, pgx.ErrNoRows) {
				return nil, withID(ctx, problem(404, "", "token %s of tenant %s not found or already revoked", in.ID, in.Tenant))
			}
			if err != nil {
				return nil, s.internal(ctx, 500, err, "the token could not be revoked")
			}
			s.tokens.forget(in.Tenant, in.ID)
			return &struct{}{}, nil
		})
}
