package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kube5s/sless/pkg/apis/sless/crds"
	"github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/kubeclient"
	"github.com/kube5s/sless/pkg/tenantns"
)

// Scheme returns a scheme with the Kubernetes built-ins and the sless types.
func Scheme() *runtime.Scheme { return kubeclient.Scheme() }

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
	// What etcd and the API server print is kept (its end) to say why a
	// start failed; envtest would otherwise discard it.
	out := &tail{max: 16 << 10}
	env := &envtest.Environment{
		ControlPlane: envtest.ControlPlane{
			APIServer: &envtest.APIServer{Out: out, Err: out},
			Etcd:      &envtest.Etcd{Out: out, Err: out},
		},
		BinaryAssetsDirectory: assets,
		CRDs:                  defs,
		ErrorIfCRDPathMissing: true,
		Scheme:                Scheme(),
		// envtest gives etcd and the API server 20 s each (retried five
		// times); on a loaded 2-core machine one start can take longer.
		ControlPlaneStartTimeout: startTimeout(),
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("start envtest control plane: %w; the end of what etcd and kube-apiserver printed:\n%s", err, out)
	}
	return &Kube{Config: cfg, env: env}, nil
}

// startTimeout is KUBEBUILDER_CONTROLPLANE_START_TIMEOUT, or 3 minutes.
func startTimeout() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("KUBEBUILDER_CONTROLPLANE_START_TIMEOUT")); err == nil && d > 0 {
		return d
	}
	return 3 * time.Minute
}

// Stop stops the control plane.
func (k *Kube) Stop() error { return k.env.Stop() }

// Kubeconfig writes a kubeconfig for an admin user of the control plane into
// dir and returns its path, for services started in tests.
func (k *Kube) Kubeconfig(dir string) (string, error) {
	u, err := k.env.AddUser(envtest.User{Name: "sless-test-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return "", fmt.Errorf("add envtest user: %w", err)
	}
	b, err := u.KubeConfig()
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, "kubeconfig")
	return p, os.WriteFile(p, b, 0o600)
}

// UserConfig is a client configuration for a user of the control plane in
// groups; with none, a user that RBAC allows nothing but discovery.
func (k *Kube) UserConfig(name string, groups ...string) (*rest.Config, error) {
	u, err := k.env.AddUser(envtest.User{Name: name, Groups: groups}, nil)
	if err != nil {
		return nil, fmt.Errorf("add envtest user %s: %w", name, err)
	}
	return u.Config(), nil
}

// KubeconfigFile is Kubeconfig into the test's temporary directory; it
// fails the test when the file cannot be written.
func (k *Kube) KubeconfigFile(t testing.TB) string {
	t.Helper()
	p, err := k.Kubeconfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// MainWithKube runs the tests of a package against one control plane that
// it starts first and stops after; use it as os.Exit(MainWithKube(m, &kube)).
func MainWithKube(m interface{ Run() int }, kube **Kube) int {
	k, err := StartKube()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	*kube = k
	defer func() { _ = k.Stop() }()
	return m.Run()
}

// TenantNamespace creates the namespace of tenant as the operator does:
// named for it and labelled with its name. It returns the namespace.
func TenantNamespace(ctx context.Context, t testing.TB, c client.Client, tenant string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.NamespaceFor(tenant), Labels: map[string]string{tenantns.Label: tenant}}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatalf("create the namespace of tenant %s: %v", tenant, err)
	}
	return ns.Name
}

// CheckCacheKeepsNoManagedFields creates a Function through c (in a
// namespace of its own), which the API server returns with managedFields,
// and checks that cached, a watch cache (kubeclient.CacheTransform), holds
// it without them once it holds it.
func CheckCacheKeepsNoManagedFields(t testing.TB, c client.Client, cached client.Reader) {
	t.Helper()
	ctx := t.Context()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Name("fields-")}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	fn := &v1alpha1.Function{ObjectMeta: metav1.ObjectMeta{Name: "f", Namespace: ns.Name},
		Spec: v1alpha1.FunctionSpec{Runtime: v1alpha1.RuntimePython311, Entrypoint: "main.handler"}}
	if err := c.Create(ctx, fn); err != nil {
		t.Fatal(err)
	}
	if len(fn.ManagedFields) == 0 {
		t.Fatal("the API server sent no managedFields with the Function: nothing to drop")
	}
	var got v1alpha1.Function
	Eventually(t, time.Minute, "the Function in the cache", func() (bool, string) {
		err := cached.Get(ctx, client.ObjectKeyFromObject(fn), &got)
		return err == nil, fmt.Sprint(err)
	})
	if n := len(got.ManagedFields); n != 0 {
		t.Errorf("the cached Function keeps %d managedFields entries", n)
	}
}

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
