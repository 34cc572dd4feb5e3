package api

import (
	"context"
	"errors"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/callback"
	"github.com/kube5s/sless/pkg/pgtext"
	"github.com/kube5s/sless/services/gateway/internal/auth"
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

// Token is what the API shows of a tenant's token: never the token nor its hash.
type Token = auth.Token

// tokenIssuer issues, lists and revokes a tenant's tokens (auth.Tokens).
type tokenIssuer interface {
	Issue(ctx context.Context, tenant, name string) (token, id string, created time.Time, err error)
	List(ctx context.Context, tenant string, afterCreated time.Time, afterID string, limit int64) ([]Token, error)
	Revoke(ctx context.Context, tenant, id string) error
	RevokeAll(ctx context.Context, tenant string) error
}

func (s *Server) registerTenants() {
	register(s, s.route("create-tenant"),
		func(ctx context.Context, in *struct{ Body TenantInput }) (*One[Tenant], error) {
			return s.createTenant(ctx, &in.Body)
		})
	register(s, s.route("list-tenants"),
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
	register(s, s.route("get-tenant"),
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
	register(s, s.route("delete-tenant"),
		func(ctx context.Context, in *TenantPath) (*Accepted, error) {
			if err := s.requireAdmin(ctx); err != nil {
				return nil, err
			}
			t := &slessv1.Tenant{ObjectMeta: metav1.ObjectMeta{Name: in.Tenant}}
			if err := s.Kube.Delete(ctx, t); err != nil {
				return nil, fromKube(ctx, "tenant "+in.Tenant, err)
			}
			// The notification goes out with the commit, to every gateway.
			if err := s.issuer.RevokeAll(ctx, in.Tenant); err != nil {
				return nil, s.internal(ctx, 500, err, "the tenant's tokens could not be revoked")
			}
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
	register(s, s.route("create-token"),
		func(ctx context.Context, in *tokenIn) (*TokenOut, error) {
			if err := s.requireAdmin(ctx); err != nil {
				return nil, err
			}
			if _, err := s.namespace(ctx, in.Tenant); err != nil {
				return nil, err
			}
			out := &TokenOut{}
			tok, id, created, err := s.issuer.Issue(ctx, in.Tenant, pgtext.Clean(in.Body.Name))
			out.Body.CreatedAt = created
			if err != nil {
				return nil, s.internal(ctx, 500, err, "the token could not be stored")
			}
			out.Body.ID, out.Body.Tenant, out.Body.Name, out.Body.Token = id, in.Tenant, in.Body.Name, tok
			return out, nil
		})
	register(s, s.route("list-tokens"),
		func(ctx context.Context, in *struct {
			TenantPath
			Page
		}) (*ListOut[Token], error) {
			// The admin's, like issuing and revoking: a tenant token does
			// not learn of the tenant's other tokens.
			if err := s.requireAdmin(ctx); err != nil {
				return nil, err
			}
			after, err := afterCursor(ctx, in.Cursor)
			if err != nil {
				return nil, err
			}
			var afterCreated time.Time
			var afterID string
			if after != nil {
				afterCreated, afterID = after.Time, after.ID
			}
			items, err := s.issuer.List(ctx, in.Tenant, afterCreated, afterID, in.Limit+1)
			if err != nil {
				return nil, s.internal(ctx, 500, err, "the tokens could not be read")
			}
			out := &ListOut[Token]{}
			out.Body.Items = items
			if int64(len(items)) > in.Limit {
				out.Body.Items = items[:in.Limit]
				last := out.Body.Items[len(out.Body.Items)-1]
				out.Body.NextCursor = encodeCursor(last.CreatedAt, last.ID)
			}
			return out, nil
		})
	type tokenPath struct {
		TenantPath
		ID string `path:"id" maxLength:"64"`
	}
	register(s, s.route("revoke-token"),
		func(ctx context.Context, in *tokenPath) (*struct{}, error) {
			if err := s.requireAdmin(ctx); err != nil {
				return nil, err
			}
			err := s.issuer.Revoke(ctx, in.Tenant, in.ID)
			if errors.Is(err, auth.ErrNotFound) {
				return nil, withID(ctx, problem(404, "", "token %s of tenant %s not found or already revoked", in.ID, in.Tenant))
			}
			if err != nil {
				return nil, s.internal(ctx, 500, err, "the token could not be revoked")
			}
			return &struct{}{}, nil
		})
}
