// Command devcluster runs the local profile's control plane for make dev:
// etcd and kube-apiserver (the binaries hack/deps.sh built) with the sless
// CRDs installed and etcd's data kept in a directory, so that a second
// make dev finds what the first one deployed. It writes an admin
// kubeconfig and runs until SIGINT or SIGTERM.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kube5s/sless/pkg/apis/sless/crds"
	"github.com/kube5s/sless/pkg/kubeclient"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "devcluster:", err)
		os.Exit(1)
	}
}

func run() error {
	// A flag set of its own: controller-runtime registers -kubeconfig on the global one.
	fs := flag.NewFlagSet("devcluster", flag.ExitOnError)
	dataDir := fs.String("data", "", "etcd data directory (kept between runs)")
	kubeconfig := fs.String("write-kubeconfig", "", "where to write the admin kubeconfig")
	_ = fs.Parse(os.Args[1:])
	if *dataDir == "" || *kubeconfig == "" || os.Getenv("KUBEBUILDER_ASSETS") == "" {
		return fmt.Errorf("usage: KUBEBUILDER_ASSETS=... devcluster -data DIR -write-kubeconfig FILE")
	}
	signal.Ignore(syscall.SIGPIPE) // a closed log pipe must not stop the shutdown
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	defs, err := crds.All()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*dataDir, 0o700); err != nil {
		return err
	}
	env := &envtest.Environment{BinaryAssetsDirectory: os.Getenv("KUBEBUILDER_ASSETS"), CRDs: defs, Scheme: kubeclient.Scheme()}
	env.ControlPlane.Etcd = &envtest.Etcd{DataDir: *dataDir}
	if _, err := env.Start(); err != nil {
		return fmt.Errorf("start control plane: %w", err)
	}
	defer env.Stop()
	u, err := env.AddUser(envtest.User{Name: "sless-dev", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return err
	}
	b, err := u.KubeConfig()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(*kubeconfig), 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(*kubeconfig+".tmp", b, 0o600); err != nil {
		return err
	}
	if err := os.Rename(*kubeconfig+".tmp", *kubeconfig); err != nil {
		return err
	}
	fmt.Println("control plane ready; kubeconfig:", *kubeconfig)
	<-ctx.Done()
	// make dev sends SIGTERM after Ctrl-C's SIGINT: let the stop finish.
	signal.Ignore(os.Interrupt, syscall.SIGTERM)
	fmt.Println("stopping the control plane")
	return nil
}
