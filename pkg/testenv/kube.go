package testenv

import (
	"fmt"
	"os"
	"path/filepath"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kube5s/sless/pkg/apis/sless/crds"
	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
)

// Scheme returns a scheme with the Kubernetes built-ins and the sless types.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = apiextensionsv1.AddToScheme(s)
	_ = slessv1.AddToScheme(s)
	return s
}

// Kube is a running envtest control plane (etcd and kube-apiserver built by
// hack/deps.sh) with the sless CRDs installed.
type Kube struct {
	Config *rest.Config
	env    *envtest.Environment
}

// StartKube starts a control plane; call it from TestMain and Stop it after.
func StartKube() (*Kube, error) {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		return nil, fmt.Errorf("KUBEBUILDER_ASSETS is not set; %s", hint)
	}
	if _, err := os.Stat(filepath.Join(assets, "kube-apiserver")); err != nil {
		return nil, fmt.Errorf("kube-apiserver not found in KUBEBUILDER_ASSETS=%s; %s", assets, hint)
	}
	defs, err := crds.All()
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDs:                  defs,
		ErrorIfCRDPathMissing: true,
		Scheme:                Scheme(),
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("start envtest control plane: %w", err)
	}
	return &Kube{Config: cfg, env: env}, nil
}

// Stop stops the control plane.
func (k *Kube) Stop() error { return k.env.Stop() }
