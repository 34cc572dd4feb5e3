package api

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
)

// TenantBrokerOut is the tenant's own account on the platform broker.
type TenantBrokerOut struct {
	CacheControl string `header:"Cache-Control"`
	Body         struct {
		URL      string `json:"url" doc:"amqp URL of the tenant's vhost, with its credentials"`
		Vhost    string `json:"vhost"`
		Username string `json:"username"`
		Password string `json:"password"`
	}
}

func (s *Server) registerBroker() {
	register(s, s.route("get-tenant-broker"),
		func(ctx context.Context, in *TenantPath) (*TenantBrokerOut, error) {
			if err := s.requireTenant(ctx, in.Tenant); err != nil {
				return nil, err
			}
			ns, err := s.namespace(ctx, in.Tenant)
			if err != nil {
				return nil, err
			}
			var sec corev1.Secret
			if err := s.Kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: slessv1.BrokerSecretName}, &sec); err != nil {
				return nil, fromKube(ctx, "the broker account of tenant "+in.Tenant+" (the operator creates it with the tenant)", err)
			}
			out := &TenantBrokerOut{CacheControl: "no-store"}
			out.Body.URL = string(sec.Data[slessv1.BrokerKeyURL])
			out.Body.Vhost = string(sec.Data[slessv1.BrokerKeyVhost])
			out.Body.Username = string(sec.Data[slessv1.BrokerKeyUsername])
			out.Body.Password = string(sec.Data[slessv1.BrokerKeyPassword])
			return out, nil
		})
}
