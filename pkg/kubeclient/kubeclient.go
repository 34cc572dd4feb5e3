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
	"github.com/kube5s/sless/pkg/envconf"
)

// Rate bounds one process's requests to the API server: client-go's token
// bucket, QPS requests a second on average and up to Burst at once. The
// API server's priority and fairness protects it from all its clients;
// this keeps one busy process of a shared cluster to its share, and is
// what bounds the operator's bulk work (docs/scale.md).
type Rate struct {
	QPS   int
	Burst int
}

// DefaultRate is the default of the services that read through watch
// caches and write little (gateway, invoker, scheduler).
var DefaultRate = Rate{QPS: 50, Burst: 100}

// ReadRate reads SLESS_KUBE_QPS and SLESS_KUBE_BURST, each def's when
// unset; zero, negative and non-integer values are errors (client-go
// would take a zero QPS for its own default of 5).
func ReadRate(r *envconf.Reader, def Rate) Rate {
	return Rate{
		QPS:   r.Int("SLESS_KUBE_QPS", def.QPS, 1, 100_000),
		Burst: r.Int("SLESS_KUBE_BURST", def.Burst, 1, 100_000),
	}
}

// Config loads kubeconfig, or the in-cluster configuration when it is
// empty, and limits its clients to rate.
func Config(kubeconfig string, rate Rate) (*rest.Config, error) {
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
	cfg.QPS, cfg.Burst = float32(rate.QPS), rate.Burst
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
