// Package kubeclient builds the Kubernetes client configuration and scheme
// every sless service uses: a kubeconfig file when one is named (the local
// profile), the in-cluster service account otherwise.
package kubeclient

import (
	"context"
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
)

// Config loads kubeconfig, or the in-cluster configuration when it is empty.
func Config(kubeconfig string, qps float32, burst int) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client config: %w", err)
	}
	if qps > 0 {
		cfg.QPS, cfg.Burst = qps, burst
	}
	return cfg, nil
}

// Scheme returns a scheme with the Kubernetes built-ins, CRDs and sless types.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, slessv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(fmt.Sprintf("build scheme: %v", err)) // only on a programming error
		}
	}
	return s
}

// CacheTransform is the default transform of every sless watch cache (the
// operator's manager and the services' KubeWatching): it drops each
// object's managedFields, which no reader uses (server-side apply does not
// need them in the request) and which are a large part of every cached
// Function, Trigger and Tenant: a Function written by the gateway and
// the operator carries an entry per writer listing every field it set.
// Each cache holds every object of its kinds, so this is paid per object
// and per process (docs/scale.md).
func CacheTransform() toolscache.TransformFunc { return cache.TransformStripManagedFields() }

// Check returns a readiness check that asks the API server's /readyz.
func Check(cfg *rest.Config) (func(context.Context) error, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes clientset: %w", err)
	}
	return func(ctx context.Context) error {
		return cs.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).Error()
	}, nil
}
