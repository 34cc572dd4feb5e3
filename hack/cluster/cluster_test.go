package cluster_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/kube5s/sless/pkg/testenv"
)

// TestCluster brings the one-node cluster up with hack/cluster.sh and checks
// what the platform relies on: a pod from a locally assembled image pinned by
// digest from the local registry, reached through a ClusterIP Service by DNS
// name; NetworkPolicy enforcement (ingress default deny, an allow rule by
// podSelector and port, egress by namespaceSelector, ports and ipBlock); Pod
// Security "restricted"; and down/up twice, leaving nothing behind.
func TestCluster(t *testing.T) {
	registry := preflight(t)
	script, err := filepath.Abs("../cluster.sh")
	if err != nil {
		t.Fatal(err)
	}
	cluster(t, script, "down")
	t.Cleanup(func() { cluster(t, script, "down") })
	start := time.Now()
	cluster(t, script, "up")
	t.Logf("first up: %s", time.Since(start).Round(time.Second))

	env := clusterEnv(t, script)
	cs := client(t, env["KUBECONFIG"])
	ref := webImage(t, registry)
	t.Logf("web image: %s", ref)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ns := namespace(ctx, t, cs)

	// A pod under Pod Security "restricted" runs: the web server.
	web := restrictedPod("web", ref, []string{"/web", "serve", ":8080"})
	web.Labels = map[string]string{"app": "web"}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, web, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the web pod: %v", err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "web"},
			Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	if _, err := cs.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the web service: %v", err)
	}
	waitPod(ctx, t, cs, ns, "web", func(p *corev1.Pod) bool { return ready(p) })

	// A privileged pod is refused in that namespace.
	priv := restrictedPod("privileged", ref, []string{"/web", "serve", ":8080"})
	priv.Spec.SecurityContext = nil
	priv.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
	_, err = cs.CoreV1().Pods(ns).Create(ctx, priv, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "PodSecurity") {
		t.Fatalf("a privileged pod under restricted: want Forbidden by PodSecurity, got %v", err)
	}
	t.Logf("privileged pod refused: %v", err)

	url := fmt.Sprintf("http://web.%s.svc.cluster.local/", ns)
	// kube-proxy programs the Service some time after the pod is Ready.
	if ok, out := until(ctx, t, cs, ns, "get-open", map[string]string{"role": "client"}, ref, url, true); !ok || !strings.HasPrefix(out, "hello from web") {
		t.Fatalf("GET %s from another pod: want hello from web, got ok=%v %q", url, ok, out)
	}

	// NetworkPolicy is enforced: default deny drops the same request, an
	// allow rule for the clients lets it through again. A subtest, so that
	// down/up below is checked whatever it finds.
	t.Run("NetworkPolicy", func(t *testing.T) {
		if b, err := os.ReadFile(filepath.Join(env["SLESS_CLUSTER_DIR"], "netpol-not-enforced")); err == nil {
			t.Errorf("hack/cluster.sh up says: %s", b)
		}
		networkPolicies(ctx, t, cs, ns, ref, url)
	})

	// down then up, twice; each down leaves nothing behind.
	for i := 2; i <= 3; i++ {
		cluster(t, script, "down")
		assertClean(t, env["SLESS_CLUSTER_DIR"])
		start := time.Now()
		cluster(t, script, "up")
		t.Logf("up #%d (warm cache): %s", i, time.Since(start).Round(time.Second))
		cs := client(t, env["KUBECONFIG"])
		ns := namespace(ctx, t, cs)
		// The API server answers plain HTTP on its TLS port with a 400:
		// proof that DNS and the Service path work after a fresh up. The
		// proxy programs the Service's rules some time after the node is
		// up, so a first GET may time out: up to five pods, one after another.
		var ok bool
		var out string
		for try := 1; try <= 5; try++ {
			ok, out = get(ctx, t, cs, ns, fmt.Sprintf("get-after-up-%d", try), ref, "http://kubernetes.default.svc.cluster.local:443/")
			if !ok && (strings.Contains(out, "malformed HTTP response") || strings.Contains(out, "400")) {
				break
			}
			t.Logf("after up #%d, GET %d of the kubernetes Service: ok=%v %q", i, try, ok, out)
		}
		if ok || !strings.Contains(out, "malformed HTTP response") && !strings.Contains(out, "400") {
			t.Fatalf("after up #%d, GET the kubernetes Service from a pod: want the API server's plain-HTTP refusal, got ok=%v %q", i, ok, out)
		}
	}
	cluster(t, script, "down")
	assertClean(t, env["SLESS_CLUSTER_DIR"])
}

func networkPolicies(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, ref, url string) {
	client := map[string]string{"role": "client"}
	// Default deny: the same request is dropped.
	deny := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "default-deny"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
		},
	}
	if _, err := cs.NetworkingV1().NetworkPolicies(ns).Create(ctx, deny, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the default-deny policy: %v", err)
	}
	if ok, out := until(ctx, t, cs, ns, "get-denied", client, ref, url, false); ok {
		t.Fatalf("GET %s under default deny succeeded: %q", url, out)
	} else {
		t.Logf("under default deny: %q", out)
	}

	// An allow rule for the clients lets it through again.
	allow := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "allow-clients"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "client"}}}},
				Ports: []networkingv1.NetworkPolicyPort{{Port: ptr.To(intstr.FromInt32(8080))}},
			}},
		},
	}
	if _, err := cs.NetworkingV1().NetworkPolicies(ns).Create(ctx, allow, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the allow policy: %v", err)
	}
	if ok, out := until(ctx, t, cs, ns, "get-allowed", client, ref, url, true); !ok || !strings.HasPrefix(out, "hello from web") {
		t.Fatalf("GET %s with the allow rule: want hello from web, got ok=%v %q", url, ok, out)
	}
	// The rule selects role=client only: another pod is still denied, for
	// the whole 30 s of retries (a new pod's first GETs can be refused only
	// because the controller has not seen its address yet).
	if ok, out := until(ctx, t, cs, ns, "get-stranger", map[string]string{"role": "stranger"}, ref, url, true); ok {
		t.Fatalf("GET %s from a pod the allow rule does not select succeeded: %q", url, out)
	} else {
		t.Logf("a role=stranger pod under the allow rule: %q", out)
	}

	// Egress: clients labelled egress=locked may only reach DNS in
	// kube-system (namespaceSelector and ports): their GET is dropped on
	// the way out although web admits role=client.
	udp, tcp := corev1.ProtocolUDP, corev1.ProtocolTCP
	dnsOnly := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "egress-dns-only"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"egress": "locked"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress: []networkingv1.NetworkPolicyEgressRule{{
				To: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{
					MatchLabels: map[string]string{"kubernetes.io/metadata.name": "kube-system"}}}},
				Ports: []networkingv1.NetworkPolicyPort{
					{Protocol: &udp, Port: ptr.To(intstr.FromInt32(53))},
					{Protocol: &tcp, Port: ptr.To(intstr.FromInt32(53))},
				},
			}},
		},
	}
	if _, err := cs.NetworkingV1().NetworkPolicies(ns).Create(ctx, dnsOnly, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the egress policy: %v", err)
	}
	locked := map[string]string{"role": "client", "egress": "locked"}
	if ok, out := until(ctx, t, cs, ns, "get-egress-locked", locked, ref, url, true); ok {
		t.Fatalf("GET %s from a pod allowed only DNS egress succeeded: %q", url, out)
	} else {
		t.Logf("a pod allowed only DNS egress: %q", out)
	}

	// An ipBlock of web's own address on port 8080 lets it out again.
	webPod, err := cs.CoreV1().Pods(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil || webPod.Status.PodIP == "" {
		t.Fatalf("web pod's IP: %v %v", webPod, err)
	}
	toWeb := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "egress-to-web"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"egress": "locked"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress: []networkingv1.NetworkPolicyEgressRule{{
				To:    []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: webPod.Status.PodIP + "/32"}}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: ptr.To(intstr.FromInt32(8080))}},
			}},
		},
	}
	if _, err := cs.NetworkingV1().NetworkPolicies(ns).Create(ctx, toWeb, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the ipBlock egress policy: %v", err)
	}
	if ok, out := until(ctx, t, cs, ns, "get-egress-ipblock", locked, ref, url, true); !ok || !strings.HasPrefix(out, "hello from web") {
		t.Fatalf("GET %s with egress to web's ipBlock: want hello from web, got ok=%v %q", url, ok, out)
	}
}

// preflight checks what every test here needs (root, the registry of
// hack/deps.sh) and returns the registry's address.
func preflight(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the cluster runs as root (containerd, the kubelet); run this test as root")
	}
	registry := os.Getenv("SLESS_TEST_REGISTRY")
	if registry == "" {
		t.Fatal("SLESS_TEST_REGISTRY is not set: eval \"$(hack/deps.sh env)\" after hack/deps.sh up")
	}
	return registry
}

func cluster(t *testing.T, script, verb string) {
	t.Helper()
	cmd := exec.Command("bash", script, verb)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("hack/cluster.sh %s: %v\n%s", verb, err, out.String())
	}
}

func clusterEnv(t *testing.T, script string) map[string]string {
	t.Helper()
	out, err := exec.Command("bash", script, "env").Output()
	if err != nil {
		t.Fatalf("hack/cluster.sh env: %v", err)
	}
	env := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		k, v, ok := strings.Cut(strings.TrimPrefix(line, "export "), "=")
		if ok {
			env[k] = strings.Trim(v, "'")
		}
	}
	return env
}

func client(t *testing.T, kubeconfig string) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	// Each up makes a new CA and certificates at the same paths; client-go
	// caches TLS transports by file name, so pass the contents instead.
	for _, f := range []struct {
		file *string
		data *[]byte
	}{{&cfg.CAFile, &cfg.CAData}, {&cfg.CertFile, &cfg.CertData}, {&cfg.KeyFile, &cfg.KeyData}} {
		if *f.file == "" {
			continue
		}
		b, err := os.ReadFile(*f.file)
		if err != nil {
			t.Fatal(err)
		}
		*f.data, *f.file = b, ""
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// webImage builds cmd web, assembles it with the image helper and pushes it
// to the local registry; it returns the reference pinned by digest.
func webImage(t *testing.T, registry string) string {
	t.Helper()
	dir := t.TempDir()
	for _, p := range []string{"web", "image"} {
		cmd := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(dir, p), "./"+p)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build ./%s: %v\n%s", p, err, out)
		}
	}
	out, err := exec.Command(filepath.Join(dir, "image"), "-ref", registry+"/sless-cluster-test/web:"+suffix(),
		"-push", "-user", "65532", "-entrypoint", "/web", "/web="+filepath.Join(dir, "web")).Output()
	if err != nil {
		t.Fatalf("assembling and pushing the web image: %v", err)
	}
	return strings.TrimSpace(string(out))
}

func suffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// namespace makes a namespace enforcing Pod Security "restricted".
func namespace(ctx context.Context, t *testing.T, cs kubernetes.Interface) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name:   "cluster-test-" + suffix(),
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"},
	}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	// The service account controller makes "default"; pods wait for it.
	testenv.Eventually(t, time.Minute, "namespace "+ns.Name+"'s default service account", func() (bool, string) {
		_, err := cs.CoreV1().ServiceAccounts(ns.Name).Get(ctx, "default", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	return ns.Name
}

func restrictedPod(name, image string, args []string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To(int64(1)),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				RunAsUser:      ptr.To(int64(65532)),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:            name,
				Image:           image,
				ImagePullPolicy: corev1.PullIfNotPresent,
				Command:         args,
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false),
					ReadOnlyRootFilesystem:   ptr.To(true),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
		},
	}
}

// get runs `web get URL` in a pod labelled role=client and returns whether
// it succeeded and what it printed.
func get(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, name, image, url string) (bool, string) {
	t.Helper()
	return getAs(ctx, t, cs, ns, name, map[string]string{"role": "client"}, image, url)
}

// until runs `web until ok|fail URL` in one pod with the given labels: the
// GET is repeated in the pod until it has the outcome wanted (or 30 s have
// passed), because the policy controller applies a policy, and a new pod's
// own address, some time after the API server has them: one GET right after
// a change proves nothing. It returns whether the last GET succeeded and
// what the pod printed.
func until(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, name string, labels map[string]string, image, url string, wantOK bool) (bool, string) {
	t.Helper()
	mode := "fail"
	if wantOK {
		mode = "ok"
	}
	return run(ctx, t, cs, ns, name, labels, image, []string{"/web", "until", mode, url})
}

// getAs is get from a pod with the given labels.
func getAs(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, name string, labels map[string]string, image, url string) (bool, string) {
	t.Helper()
	return run(ctx, t, cs, ns, name, labels, image, []string{"/web", "get", url})
}

// run runs args in a one-shot pod and returns whether it succeeded and its log.
func run(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, name string, labels map[string]string, image string, args []string) (bool, string) {
	t.Helper()
	p := restrictedPod(name, image, args)
	p.Labels = labels
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s: %v", name, err)
	}
	done := waitPod(ctx, t, cs, ns, name, func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
	})
	logs, err := cs.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("logs of pod %s: %v", name, err)
	}
	return done.Status.Phase == corev1.PodSucceeded, string(logs)
}

func waitPod(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, name string, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var got *corev1.Pod
	testenv.Eventually(t, 2*time.Minute, "pod "+ns+"/"+name+"'s condition", func() (bool, string) {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		got = p
		return cond(p), fmt.Sprintf("phase %s, conditions %v, containers %v", p.Status.Phase, p.Status.Conditions, p.Status.ContainerStatuses)
	})
	return got
}

func ready(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// assertClean checks that down left nothing: no process, mount or network
// namespace under the cluster's directory, no nftables table of kube-proxy,
// the policy agent or portmap, no bridge and no veth on it.
func assertClean(t *testing.T, dir string) {
	t.Helper()
	if dir == "" {
		t.Fatal("SLESS_CLUSTER_DIR missing from hack/cluster.sh env")
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("down left %s (stat: %v)", dir, err)
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(mounts), "\n") {
		if strings.Contains(line, dir) {
			t.Errorf("down left a mount: %s", line)
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && bytes.Contains(b, []byte(dir)) {
			t.Errorf("down left a process: %s: %s", p, bytes.ReplaceAll(b, []byte{0}, []byte{' '}))
		}
	}
	if out, err := exec.Command("nft", "list", "tables").CombinedOutput(); err != nil {
		t.Errorf("nft list tables: %v: %s", err, out)
	} else {
		for _, tbl := range []string{"kube-proxy", "kube-network-policies", "cni_hostport"} {
			if strings.Contains(string(out), tbl) {
				t.Errorf("down left the nftables table %s:\n%s", tbl, out)
			}
		}
	}
	if out, err := exec.Command("ip", "-o", "link").CombinedOutput(); err != nil {
		t.Errorf("ip link: %v", err)
	} else if strings.Contains(string(out), "sless0") || strings.Contains(string(out), "veth") {
		t.Errorf("down left links:\n%s", out)
	}
	if out, _ := exec.Command("iptables-save").CombinedOutput(); strings.Contains(string(out), "KUBE-") || strings.Contains(string(out), "CNI-") {
		t.Errorf("down left iptables rules:\n%s", out)
	}
	if out, err := exec.Command("ipset", "list", "-n").CombinedOutput(); err != nil {
		t.Errorf("ipset list -n: %v: %s", err, out)
	} else if strings.Contains(string(out), "KUBE-") || strings.Contains(string(out), "kube-router") {
		t.Errorf("down left kube-router's ipsets:\n%s", out)
	}
	if cg, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods"); len(cg) > 0 {
		t.Errorf("down left cgroups: %v", cg)
	}
}
