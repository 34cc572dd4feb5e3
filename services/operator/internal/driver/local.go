package driver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/kube5s/sless/pkg/fncall"
	"github.com/kube5s/sless/pkg/funclog"
	"github.com/kube5s/sless/pkg/tenantns"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/jitter"
	"github.com/kube5s/sless/services/operator/internal/resources"
)

// Local runs each version of a function as runtime processes on
// 127.0.0.1 (its process set: as many processes as the scaler gives the
// version), started from the version's artifact directory and supervised:
// health-checked, restarted with backoff when they die, replaced without
// dropping traffic when the environment changes (a Secret's value: start
// a process with the new one, wait until healthy, switch the endpoint,
// drain the old set), and stopped when the version stops or the function
// goes.
//
// Each process has its own port; the status lists the ready ones
// (State.Endpoints) and the data plane spreads calls over them itself
// (pkg/wake's Take), so no balancer stands between. The first process
// keeps the version's port: at zero replicas every process stops and the
// next start takes that port again (the data plane waits there while the
// version wakes).
type Local struct {
	// Commands start a runtime: the interpreter and the wrapper script.
	Commands map[slessv1.Runtime][]string
	// Secrets resolves env values taken from Secrets.
	Secrets client.Reader
	// LogDir receives one log file per function (<namespace>_<function>.log).
	LogDir string
	Log    *slog.Logger
	// DrainDelay is how long an old process keeps serving after the
	// endpoint switched, so that every reader of the endpoint has moved on.
	DrainDelay time.Duration

	events chan event.GenericEvent
	mu     sync.Mutex
	fns    map[versionRef]*localFn
}

// versionRef names one version of one function.
type versionRef struct {
	types.NamespacedName
	Number int32
}

type localFn struct {
	set  []*proc // the processes of the current environment; set[0] has the version's port
	next *proc   // starting for a new environment
	port int     // the version's port, kept while it is at zero
}

// all lists every process of the version, starting ones too.
func (lf *localFn) all() []*proc {
	out := append([]*proc(nil), lf.set...)
	if lf.next != nil {
		out = append(out, lf.next)
	}
	return out
}

// state is what the version's set shows: ready while one process is
// healthy, every healthy one in Endpoints when there are several.
func (lf *localFn) state(switched bool) State {
	base := lf.set[0].state(switched)
	var ready []string
	for _, p := range lf.set {
		if ps := p.state(switched); ps.Serving {
			if len(ready) == 0 {
				base = ps
			}
			ready = append(ready, ps.Endpoint)
		}
	}
	base.ReadyReplicas, base.Address = int32(len(ready)), lf.address()
	if len(ready) > 1 {
		base.Endpoints = ready
	}
	return base
}

func (lf *localFn) address() string {
	if lf.port == 0 {
		return ""
	}
	return fmt.Sprintf("http://127.0.0.1:%d", lf.port)
}

// NewLocal returns a local driver.
func NewLocal(commands map[slessv1.Runtime][]string, secrets client.Reader, logDir string, log *slog.Logger) *Local {
	return &Local{Commands: commands, Secrets: secrets, LogDir: logDir, Log: log, DrainDelay: 3 * time.Second,
		events: make(chan event.GenericEvent, 64), fns: map[versionRef]*localFn{}}
}

// Watch reconciles a Function when one of its processes changes state.
func (l *Local) Watch(b *builder.Builder) *builder.Builder {
	return b.WatchesRawSource(source.Channel(l.events, &handler.EnqueueRequestForObject{}))
}

func (l *Local) notify(key types.NamespacedName) {
	fn := &slessv1.Function{}
	fn.Namespace, fn.Name = key.Namespace, key.Name
	select {
	case l.events <- event.GenericEvent{Object: fn}:
	default: // a reconcile is already queued
	}
}

// Ensure implements Driver.
func (l *Local) Ensure(ctx context.Context, fn *slessv1.Function, v Version) (State, error) {
	a := v.Artifact
	if a.Dir == "" {
		return State{}, fmt.Errorf("local driver: version %d of function %s/%s has no artifact directory", v.Number, fn.Namespace, fn.Name)
	}
	cmd, ok := l.Commands[fn.Spec.Runtime]
	if !ok {
		return State{}, fmt.Errorf("local driver: no command for runtime %s", fn.Spec.Runtime)
	}
	env, err := l.env(ctx, fn, a, v.Number)
	if err != nil {
		return State{}, err
	}
	key := versionKey(cmd, a.Dir, env)
	name := types.NamespacedName{Namespace: fn.Namespace, Name: fn.Name}
	ref := versionRef{NamespacedName: name, Number: v.Number}

	l.mu.Lock()
	defer l.mu.Unlock()
	lf := l.fns[ref]
	if lf == nil {
		lf = &localFn{}
		l.fns[ref] = lf
	}
	if v.Replicas == 0 {
		// At zero: the scaler's drain handshake left no call in flight.
		for _, p := range lf.all() {
			p.stop(0)
		}
		lf.set, lf.next = nil, nil
		return State{RolledOut: true, Address: lf.address(), Reason: "ScaledToZero", Message: "no process runs; the first call starts one"}, nil
	}
	run := func(port int) (*proc, error) {
		return l.start(name, key, cmd, a.Dir, env, fn.Spec.MemoryMB, fn.Spec.TimeoutSec, port)
	}
	if len(lf.set) == 0 || lf.set[0].key == key {
		// The first start, a wake from zero, or the set as it is: only the
		// count may change.
		if lf.next != nil {
			lf.next.stop(0)
			lf.next = nil
		}
		if err := lf.scale(run, v.Replicas, l.DrainDelay); err != nil {
			return State{}, err
		}
		return lf.state(true), nil
	}
	if lf.next == nil || lf.next.key != key {
		if lf.next != nil {
			lf.next.stop(0)
		}
		p, err := run(0)
		if err != nil {
			return State{}, err
		}
		lf.next = p
	}
	if lf.next.isHealthy() {
		old := lf.set
		lf.set, lf.next = []*proc{lf.next}, nil
		lf.port = lf.set[0].port
		for _, p := range old {
			p.stop(l.DrainDelay)
		}
		if err := lf.scale(run, v.Replicas, l.DrainDelay); err != nil {
			return State{}, err
		}
		return lf.state(true), nil
	}
	st := lf.state(false)
	if !st.Serving {
		return lf.next.state(false), nil
	}
	st.Reason, st.Message = slessv1.ReasonProgressing, "starting the process with the new environment: "+lf.next.state(false).Message
	return st, nil
}

// scale starts or stops processes of the set until it has n: a new first
// process takes the version's port; the ones beyond n (the last started
// first) stop after drain, once the status no longer lists them.
func (lf *localFn) scale(run func(port int) (*proc, error), n int32, drain time.Duration) error {
	for int32(len(lf.set)) < n {
		port := 0
		if len(lf.set) == 0 {
			port = lf.port
		}
		p, err := run(port)
		if err != nil {
			return err
		}
		lf.set = append(lf.set, p)
		if lf.port == 0 {
			lf.port = p.port
		}
	}
	for int32(len(lf.set)) > n {
		last := lf.set[len(lf.set)-1]
		lf.set = lf.set[:len(lf.set)-1]
		last.stop(drain)
	}
	return nil
}

// Stop implements Driver: version n's processes get SIGTERM and finish
// their in-flight work (Stop does not wait for them).
func (l *Local) Stop(_ context.Context, fn *slessv1.Function, n int32) error {
	ref := versionRef{NamespacedName: types.NamespacedName{Namespace: fn.Namespace, Name: fn.Name}, Number: n}
	l.mu.Lock()
	lf := l.fns[ref]
	delete(l.fns, ref)
	l.mu.Unlock()
	if lf != nil {
		for _, p := range lf.all() {
			p.stop(0)
		}
	}
	return nil
}

// Running implements Driver.
func (l *Local) Running(_ context.Context, fn *slessv1.Function) ([]int32, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []int32
	for ref := range l.fns {
		if ref.Namespace == fn.Namespace && ref.Name == fn.Name {
			out = append(out, ref.Number)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, nil
}

// RemoveLegacy implements Driver: the local driver's processes do not
// outlive the operator, so nothing from before versions runs.
func (l *Local) RemoveLegacy(context.Context, *slessv1.Function) error { return nil }

// Delete implements Driver: every process of every version of the
// function gets SIGTERM, finishes its in-flight work and exits; then its
// log file goes, so that a function or tenant made again under the same
// name does not read the output of the one deleted.
func (l *Local) Delete(_ context.Context, fn *slessv1.Function) error {
	var stopped []*localFn
	l.mu.Lock()
	for ref, lf := range l.fns {
		if ref.Namespace == fn.Namespace && ref.Name == fn.Name {
			stopped = append(stopped, lf)
			delete(l.fns, ref)
		}
	}
	l.mu.Unlock()
	for _, lf := range stopped {
		for _, p := range lf.all() {
			p.stop(0)
			p.wait()
		}
	}
	if err := os.Remove(l.LogPath(fn.Namespace, fn.Name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove the log of %s/%s: %w", fn.Namespace, fn.Name, err)
	}
	return nil
}

// Shutdown stops every process; the operator calls it on exit.
func (l *Local) Shutdown() {
	l.mu.Lock()
	all := l.fns
	l.fns = map[versionRef]*localFn{}
	l.mu.Unlock()
	for _, lf := range all {
		for _, p := range lf.all() {
			p.stop(0)
			p.wait()
		}
	}
}

// env is the process environment: a minimal base, the runtime contract's
// settings and the user's variables with Secret references resolved.
func (l *Local) env(ctx context.Context, fn *slessv1.Function, a Artifact, version int32) ([]string, error) {
	// MALLOC_ARENA_MAX: the memory limit is one of address space
	// (limitMemory), and glibc reserves 64 MiB of it per malloc arena, up
	// to one per thread: a runtime with a thread per call would run out
	// of address space, not memory, long before its concurrency.
	out := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + a.Dir, "SLESS_HOST=127.0.0.1", "SLESS_CODE_DIR=" + a.Dir,
		"PYTHONPATH=" + filepath.Join(a.Dir, "deps"), "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1", "MALLOC_ARENA_MAX=2"}
	for _, e := range resources.RuntimeEnv(fn, version, 0) {
		if e.Name == resources.EnvPort {
			continue // chosen per process
		}
		v := e.Value
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			ref := e.ValueFrom.SecretKeyRef
			var s corev1.Secret
			if err := l.Secrets.Get(ctx, types.NamespacedName{Namespace: fn.Namespace, Name: ref.Name}, &s); err != nil {
				return nil, fmt.Errorf("env %s: secret %s: %w", e.Name, ref.Name, err)
			}
			b, ok := s.Data[ref.Key]
			if !ok {
				return nil, fmt.Errorf("env %s: secret %s has no key %s", e.Name, ref.Name, ref.Key)
			}
			v = string(b)
		}
		out = append(out, e.Name+"="+v)
	}
	return out, nil
}

func versionKey(cmd []string, dir string, env []string) string {
	sorted := append([]string(nil), env...)
	sort.Strings(sorted)
	b, _ := json.Marshal([]any{cmd, dir, sorted})
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:8])
}

// proc is one supervised runtime process and its restarts.
type proc struct {
	l        *Local
	name     types.NamespacedName
	key      string
	cmd      []string
	dir      string
	env      []string
	memoryMB int32
	grace    time.Duration
	port     int
	endpoint string

	mu        sync.Mutex
	healthy   bool
	lastErr   string
	restarts  int
	stopping  bool
	stopCh    chan struct{}
	done      chan struct{}
	current   *exec.Cmd
	startedAt time.Time
}

// start starts a process on port (0: a free one).
func (l *Local) start(name types.NamespacedName, key string, cmd []string, dir string, env []string, memoryMB, timeoutSec int32, port int) (*proc, error) {
	if port == 0 {
		var err error
		if port, err = freePort(); err != nil {
			return nil, err
		}
	}
	// env is shared by the processes an Ensure starts: each gets its own
	// copy with its port (appending to env itself would write every
	// process's port into the one spare slot of its array).
	p := &proc{l: l, name: name, key: key, cmd: cmd, dir: dir, env: append(slices.Clip(env), "PORT="+strconv.Itoa(port)),
		memoryMB: memoryMB, grace: time.Duration(timeoutSec)*time.Second + 5*time.Second,
		port: port, endpoint: fmt.Sprintf("http://127.0.0.1:%d", port), stopCh: make(chan struct{}), done: make(chan struct{})}
	go p.supervise()
	return p, nil
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick a port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func (p *proc) isHealthy() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.healthy
}

func (p *proc) state(switched bool) State {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := State{Endpoint: p.endpoint, Address: p.endpoint, Serving: p.healthy, RolledOut: p.healthy && switched}
	if p.healthy {
		st.ReadyReplicas = 1
	}
	if !st.Serving {
		st.Endpoint = ""
	}
	switch {
	case p.healthy && p.restarts > 0:
		st.Reason, st.Message = "Restarted", fmt.Sprintf("restarted %d times; last: %s", p.restarts, p.lastErr)
	case !p.healthy && p.lastErr != "":
		st.Reason, st.Message = "NotHealthy", p.lastErr
	case !p.healthy:
		st.Reason, st.Message = "Starting", "waiting for the runtime's health check"
	}
	return st
}

// supervise runs the process, checks its health and restarts it with
// backoff until stop.
func (p *proc) supervise() {
	defer close(p.done)
	restart := jitter.NewRedial(500*time.Millisecond, 30*time.Second)
	for {
		exited, err := p.run()
		if err != nil {
			p.setErr("start: " + err.Error())
		}
		if exited != nil {
			p.watchHealth(exited)
		}
		p.mu.Lock()
		stopping := p.stopping
		if !stopping {
			p.restarts++
			p.healthy = false
		}
		p.mu.Unlock()
		if stopping {
			return
		}
		p.l.notify(p.name)
		wait := restart.After(p.startedAt)
		p.l.Log.Warn("function process exited; restarting", "tenant", tenantns.Named(p.name.Namespace), "function", p.name.Name,
			"err", p.lastErrText(), "retryIn", wait.String())
		select {
		case <-p.stopCh:
			return
		case <-time.After(wait):
		}
	}
}

// run starts the process; the returned channel closes when it exits.
func (p *proc) run() (<-chan struct{}, error) {
	logf, err := os.OpenFile(p.l.LogPath(p.name.Namespace, p.name.Name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	c := exec.Command(p.cmd[0], p.cmd[1:]...)
	c.Dir, c.Env, c.Stdout, c.Stderr = p.dir, p.env, logf, logf
	// Own process group, so that a stop reaches the runtime's workers, and
	// killed with the operator, so that none outlives it.
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := c.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	limitMemory(c.Process.Pid, p.cmd, p.memoryMB)
	p.mu.Lock()
	p.current, p.startedAt = c, time.Now()
	p.mu.Unlock()
	exited := make(chan struct{})
	go func() {
		err := c.Wait()
		// The runtime's workers share its process group; none outlives it.
		_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
		logf.Close()
		if err != nil {
			p.setErr("process exited: " + err.Error())
		} else {
			p.setErr("process exited")
		}
		close(exited)
	}()
	return exited, nil
}

// startPoll is how often a starting process's health endpoint is asked,
// until its first success: a Python runtime answers about 140 ms after
// its start, so 5 ms is 30 loopback GETs per start.
const startPoll = 5 * time.Millisecond

// watchHealth polls the runtime's health endpoint until the process exits.
func (p *proc) watchHealth(exited <-chan struct{}) {
	hc := &http.Client{Timeout: 2 * time.Second}
	// Poll fast until the first success (a loopback GET costs little and
	// half the poll interval is added to every cold start, a wake from
	// zero and a rollback to a stopped version on average), then every 2s.
	interval := startPoll
	failures := 0
	for {
		select {
		case <-exited:
			return
		case <-time.After(interval):
		}
		ok, reason := fncall.Health(context.Background(), hc, p.endpoint)
		if ok {
			failures = 0
		} else {
			failures++
		}
		p.mu.Lock()
		// A healthy process leaves the endpoints on the second failure in a
		// row, as the kubelet's readiness probe does (threshold 2): one
		// failed probe is rechecked at once instead.
		recheck := !ok && p.healthy && failures < 2
		changed := ok != p.healthy && !recheck
		if !recheck {
			p.healthy = ok
		}
		if !ok && reason != "" {
			p.lastErr = reason
		}
		p.mu.Unlock()
		if changed {
			p.l.notify(p.name)
		}
		switch {
		case recheck:
			interval = 100 * time.Millisecond
		case ok:
			interval = 2 * time.Second
		case time.Since(p.startedAt) < 10*time.Second:
			interval = startPoll
		default: // a runtime that will not load: stop hammering it
			interval = 500 * time.Millisecond
		}
	}
}

func (p *proc) setErr(s string) {
	p.mu.Lock()
	p.lastErr = s
	p.mu.Unlock()
}

func (p *proc) lastErrText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastErr
}

// stop marks the process stopping and, after delay, sends SIGTERM to its
// group; SIGKILL follows when it has not exited within its grace period.
func (p *proc) stop(delay time.Duration) {
	p.mu.Lock()
	if p.stopping {
		p.mu.Unlock()
		return
	}
	p.stopping = true
	close(p.stopCh)
	p.mu.Unlock()
	go func() {
		time.Sleep(delay)
		p.mu.Lock()
		c := p.current
		p.mu.Unlock()
		if c == nil || c.Process == nil {
			return
		}
		_ = syscall.Kill(-c.Process.Pid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(p.grace):
			_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
		}
	}()
}

// wait blocks until the supervisor has ended, after stop.
func (p *proc) wait() {
	select {
	case <-p.done:
	case <-time.After(p.grace + p.l.DrainDelay + 5*time.Second):
	}
}

// LocalCommands are the commands that start each runtime's wrapper.
func LocalCommands(python, node, runtimesDir string) map[slessv1.Runtime][]string {
	abs, err := filepath.Abs(runtimesDir)
	if err != nil {
		abs = runtimesDir
	}
	return map[slessv1.Runtime][]string{
		slessv1.RuntimePython311: {python, filepath.Join(abs, string(slessv1.RuntimePython311), "runtime.py")},
		slessv1.RuntimeNodeJS20:  {node, filepath.Join(abs, string(slessv1.RuntimeNodeJS20), "runtime.js")},
	}
}

// LogPath is the file that receives the output of a function's process.
func (l *Local) LogPath(namespace, name string) string {
	return funclog.Path(l.LogDir, namespace, name)
}

// PID is the process id of the first process of version n of the
// function, or 0.
func (l *Local) PID(namespace, name string, n int32) int {
	l.mu.Lock()
	lf := l.fns[versionRef{NamespacedName: types.NamespacedName{Namespace: namespace, Name: name}, Number: n}]
	l.mu.Unlock()
	if lf == nil || len(lf.set) == 0 {
		return 0
	}
	p := lf.set[0]
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.current == nil || p.current.Process == nil {
		return 0
	}
	return p.current.Process.Pid
}
