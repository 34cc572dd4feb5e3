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
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kube5s/sless/pkg/apis/sless/crds"
	"github.com/kube5s/sless/pkg/kubeclient"
)

// startTimeout bounds the start of etcd and of kube-apiserver, each;
// hack/dev.sh waits for the kubeconfig longer than both together.
const startTimeout = 40 * time.Second

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
	// envtest logs through controller-runtime's logger; without one it
	// prints only a stack trace saying that no logger was set.
	ctrllog.SetLogger(logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, nil)))
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
	if err := stopLeftovers(os.Getenv("SLESS_DEV_RUN")); err != nil {
		return err
	}
	env := &envtest.Environment{BinaryAssetsDirectory: os.Getenv("KUBEBUILDER_ASSETS"), CRDs: defs, Scheme: kubeclient.Scheme(),
		ControlPlaneStartTimeout: startTimeout}
	env.ControlPlane.Etcd = &envtest.Etcd{DataDir: *dataDir}
	// etcd and kube-apiserver run in process groups of their own (envtest
	// sets Setpgid), so a terminal's Ctrl-C never reaches them: every way
	// out of this function stops them, a failed start too (envtest leaves
	// what it started running when, say, the CRDs fail to install).
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "devcluster: stop control plane:", err)
		}
	}()
	if _, err := env.Start(); err != nil {
		return fmt.Errorf("start control plane: %w", err)
	}
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

// stopLeftovers kills the etcd and kube-apiserver that an earlier
// devcluster of the same make dev run left when it died (SIGKILL, a crash):
// envtest starts them in process groups of their own, so they outlive it,
// and that etcd holds the data directory this start needs. A process of
// the run carries SLESS_DEV_RUN=run (hack/dev.sh exports it); this
// devcluster has started none yet, so each such etcd or kube-apiserver is
// a leftover.
func stopLeftovers(run string) error {
	if run == "" {
		return nil
	}
	marker := "\x00SLESS_DEV_RUN=" + run + "\x00"
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return err
	}
	var killed []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", d.Name(), "environ"))
		if err != nil || !strings.Contains("\x00"+string(env), marker) {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		name := filepath.Base(strings.SplitN(string(cmdline), "\x00", 2)[0])
		if name != "etcd" && name != "kube-apiserver" {
			continue
		}
		fmt.Fprintf(os.Stderr, "devcluster: stopping %s (PID %d), left by an earlier start\n", name, pid)
		if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
			killed = append(killed, pid)
		}
	}
	for _, pid := range killed {
		for i := 0; alive(pid); i++ {
			if i == 100 {
				return fmt.Errorf("PID %d did not end after SIGKILL", pid)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

// alive reports whether pid runs (a zombie has ended: it holds nothing).
func alive(pid int) bool {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	// pid (comm) STATE ...: comm may hold spaces; the state follows the last ')'.
	rest := string(stat[strings.LastIndexByte(string(stat), ')')+1:])
	return !strings.HasPrefix(strings.TrimSpace(rest), "Z")
}
