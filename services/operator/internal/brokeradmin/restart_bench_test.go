package brokeradmin

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/kube5s/sless/pkg/testenv"
	"github.com/kube5s/sless/services/operator/internal/resources"
)

// make bench-scale sets these; without -broker.vhosts
// BenchmarkBrokerRestart skips.
var (
	restartSteps   = flag.String("broker.vhosts", "", "cumulative tenant vhost counts to grow a private broker to, restarting it at each, e.g. 100,300,1000; empty skips BenchmarkBrokerRestart")
	restartQueues  = flag.Int("broker.queues", 1, "durable queues declared in each tenant vhost, each holding one persistent message")
	restartWorkers = flag.Int("broker.workers", 4, "tenants being provisioned at once")
)

// BenchmarkBrokerRestart measures how long a RabbitMQ node holding many
// tenant vhosts takes to stop and to start again. The machine's broker is
// shared by every test, so the benchmark starts a private node (name,
// ports, state of its own) through hack/deps.sh, the code path of the
// fallback test, with the management plugin. It provisions tenants as the
// operator does (EnsureTenant: vhost, user, permissions, limits, policy),
// declares -broker.queues durable queues with a persistent message in
// each vhost as the tenant's user, and at each step of -broker.vhosts
// stops the node and starts it again, timing: the stop (hack/deps.sh
// rabbitmq stop: rabbitmqctl stop until the node's process ended), and
// from the start until the management API answers, until every vhost is
// running (/api/health/checks/virtual-hosts and each vhost's state) and
// until every tenant queue is running again. The same restart of the node
// while it holds no tenant vhost is the baseline: it holds the CLI's and
// the VM's own start. docs/scale.md holds a run's figures.
func BenchmarkBrokerRestart(b *testing.B) {
	if *restartSteps == "" {
		b.Skip("make bench-scale runs this (-broker.vhosts)")
	}
	var steps []int
	for _, s := range strings.Split(*restartSteps, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 || (len(steps) > 0 && n <= steps[len(steps)-1]) {
			b.Fatalf("-broker.vhosts=%s: want increasing positive vhost counts", *restartSteps)
		}
		steps = append(steps, n)
	}
	node := startPrivateBroker(b)
	for range b.N {
		mem := node.memory(b)
		rows := []restartRow{node.restart(b, 0)}
		rows[0].memBefore = mem
		made := 0
		for _, n := range steps {
			provision := node.provision(b, made, n)
			made = n
			mem := node.memory(b)
			row := node.restart(b, n)
			row.vhosts, row.memBefore, row.provision = n, mem, provision
			node.checkMessages(b, []int{0, n - 1})
			rows = append(rows, row)
			printRestartTable(rows)
		}
		last := rows[len(rows)-1]
		b.ReportMetric(last.stop.Seconds(), "stop-s")
		b.ReportMetric(last.vhostsRunning.Seconds(), "start-to-vhosts-running-s")
		b.ReportMetric(last.queuesRunning.Seconds(), "start-to-queues-running-s")
	}
}

// restartTimeout bounds one start of the node, in hack/deps.sh too
// (SLESS_RABBITMQ_START_TIMEOUT).
const restartTimeout = 30 * time.Minute

// privateBroker is a RabbitMQ node of the benchmark's own, run by
// hack/deps.sh with its state in a temporary directory.
type privateBroker struct {
	env                  []string // hack/deps.sh's environment: the node's ports and state
	script, state        string   // hack/deps.sh and its SLESS_STATE_DIR
	amqpPort, management string   // AMQP port, management API base URL
	admin                *Admin
}

func startPrivateBroker(b *testing.B) *privateBroker {
	script := os.Getenv("SLESS_DEPS_SCRIPT")
	if script == "" {
		b.Fatal(`SLESS_DEPS_SCRIPT is not set: eval "$(hack/deps.sh env)" first`)
	}
	// The node's AMQP, distribution and management ports: three distinct ones.
	var ports []string
	for len(ports) < 3 {
		_, p, _ := strings.Cut(testenv.FreeAddr(b), ":")
		if !slices.Contains(ports, p) {
			ports = append(ports, p)
		}
	}
	n := &privateBroker{script: script, state: b.TempDir(), amqpPort: ports[0], management: "http://127.0.0.1:" + ports[2]}
	n.env = append(os.Environ(), "SLESS_STATE_DIR="+n.state, "SLESS_RABBITMQ_PORT="+ports[0],
		"SLESS_RABBITMQ_DIST_PORT="+ports[1], "SLESS_RABBITMQ_MANAGEMENT_PORT="+ports[2],
		"SLESS_RABBITMQ_START_TIMEOUT="+strconv.Itoa(int(restartTimeout.Seconds())))
	// Registered after TempDir's removal, so run before it.
	b.Cleanup(func() {
		if out, err := n.deps("stop"); err != nil {
			b.Errorf("hack/deps.sh rabbitmq stop: %v\n%s", err, out)
		}
	})
	if out, err := n.deps("up"); err != nil {
		b.Fatalf("hack/deps.sh rabbitmq up: %v\n%s", err, out)
	}
	a, err := New(n.management, "guest", "guest", 60*time.Second)
	if err != nil {
		b.Fatal(err)
	}
	n.admin = a
	return n
}

// deps runs hack/deps.sh rabbitmq <verb> for this node.
func (n *privateBroker) deps(verb string) (string, error) {
	c := exec.Command(n.script, "rabbitmq", verb)
	c.Env = n.env
	out, err := c.CombinedOutput()
	return string(out), err
}

func restartTenant(i int) resources.BrokerAccount {
	name := fmt.Sprintf("restart-%04d", i)
	return resources.TenantBroker(name, "pw-"+name)
}

// provision makes tenants from up to to, as the operator does, each with
// its queues and messages, and returns how long that took.
func (n *privateBroker) provision(b *testing.B, from, to int) time.Duration {
	start := time.Now()
	work := make(chan int)
	errs := make(chan error, to-from)
	var wg sync.WaitGroup
	for range *restartWorkers {
		wg.Go(func() {
			for i := range work {
				if err := n.tenant(restartTenant(i)); err != nil {
					errs <- err
				}
			}
		})
	}
	for i := from; i < to; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	if err := errors.Join(all...); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

// tenant provisions one tenant: the operator's EnsureTenant, then the
// tenant's own durable queues, each with one persistent, confirmed message.
func (n *privateBroker) tenant(acc resources.BrokerAccount) error {
	ctx := context.Background()
	if err := n.admin.EnsureTenant(ctx, acc); err != nil {
		return err
	}
	if *restartQueues == 0 {
		return nil
	}
	conn, err := amqp.Dial(n.tenantURL(acc))
	if err != nil {
		return fmt.Errorf("dial %s: %w", acc.Vhost, err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	if err := ch.Confirm(false); err != nil {
		return err
	}
	for q := range *restartQueues {
		name := fmt.Sprintf("q-%d", q)
		// Without arguments, as the platform declares a queue trigger's
		// missing queue.
		if _, err := ch.QueueDeclare(name, true, false, false, false, nil); err != nil {
			return fmt.Errorf("declare %s in %s: %w", name, acc.Vhost, err)
		}
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", name, true, false,
			amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte(acc.Vhost)})
		if err != nil {
			return err
		}
		if ok, err := dc.WaitContext(ctx); err != nil || !ok {
			return fmt.Errorf("publish to %s in %s: acked %v: %v", name, acc.Vhost, ok, err)
		}
	}
	return nil
}

func (n *privateBroker) tenantURL(acc resources.BrokerAccount) string {
	return (&url.URL{Scheme: "amqp", User: url.UserPassword(acc.User, acc.Password), Host: "127.0.0.1:" + n.amqpPort, Path: "/" + acc.Vhost}).String()
}

// restartRow is one restart of the node.
type restartRow struct {
	vhosts             int
	provision          time.Duration // creating this step's tenants
	memBefore          int64         // the node's RSS before the stop
	memAfter           int64         // once every queue runs again
	stop               time.Duration
	upReturned         time.Duration // hack/deps.sh rabbitmq up returned: AMQP listens, rabbitmqctl await_startup, management listens
	management         time.Duration // from the start to the management API's first answer
	vhostsRunning      time.Duration // to every vhost running
	queuesRunning      time.Duration // to every tenant queue running
	loadStart, loadEnd string        // 1-minute load average
}

// restart stops the node and starts it again, and times both until its n
// tenant vhosts and their queues run.
func (n *privateBroker) restart(b *testing.B, tenants int) restartRow {
	row := restartRow{loadStart: loadAverage()}
	start := time.Now()
	if out, err := n.deps("stop"); err != nil {
		b.Fatalf("hack/deps.sh rabbitmq stop: %v\n%s", err, out)
	}
	row.stop = time.Since(start)

	start = time.Now()
	up := make(chan error, 1)
	go func() {
		out, err := n.deps("up")
		row.upReturned = time.Since(start)
		if err != nil {
			err = fmt.Errorf("hack/deps.sh rabbitmq up: %w\n%s", err, out)
		}
		up <- err
	}()
	wantQueues := tenants * *restartQueues
	var saw string
	upDone := false
	for deadline := start.Add(restartTimeout); ; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("the node did not recover within %s; last saw: %s", restartTimeout, saw)
		}
		select {
		case err := <-up:
			if err != nil {
				b.Fatal(err)
			}
			upDone = true
		default:
		}
		if row.management == 0 {
			if err := n.get("/api/overview", nil); err != nil {
				saw = err.Error()
				continue
			}
			row.management = time.Since(start)
		}
		if row.vhostsRunning == 0 {
			if saw = n.vhostsDown(tenants + 1); saw != "" { // and the default vhost
				continue
			}
			row.vhostsRunning = time.Since(start)
		}
		if saw = n.queuesDown(wantQueues); saw != "" {
			continue
		}
		row.queuesRunning = time.Since(start)
		break
	}
	if !upDone {
		if err := <-up; err != nil {
			b.Fatal(err)
		}
	}
	row.memAfter = n.memory(b)
	row.loadEnd = loadAverage()
	return row
}

// vhostsDown says why not every one of want vhosts runs yet ("" when all do).
func (n *privateBroker) vhostsDown(want int) string {
	if err := n.get("/api/health/checks/virtual-hosts", nil); err != nil {
		return err.Error()
	}
	var vhosts []struct {
		Name  string            `json:"name"`
		State map[string]string `json:"cluster_state"`
	}
	if err := n.get("/api/vhosts?columns=name,cluster_state", &vhosts); err != nil {
		return err.Error()
	}
	down := 0
	for _, v := range vhosts {
		for _, s := range v.State {
			if s != "running" {
				down++
			}
		}
	}
	if len(vhosts) != want || down > 0 {
		return fmt.Sprintf("%d of %d vhosts listed, %d not running", len(vhosts), want, down)
	}
	return ""
}

// queuesDown says why not every one of want tenant queues runs yet.
func (n *privateBroker) queuesDown(want int) string {
	var queues []struct {
		Vhost string `json:"vhost"`
		State string `json:"state"`
	}
	if err := n.get("/api/queues?columns=vhost,state", &queues); err != nil {
		return err.Error()
	}
	running := 0
	for _, q := range queues {
		// live: the queue's record (the columns leave its process's
		// statistics out); running, idle, flow: its process.
		up := q.State == "live" || q.State == "running" || q.State == "idle" || q.State == "flow"
		if strings.HasPrefix(q.Vhost, "sless-t-restart-") && up {
			running++
		}
	}
	if running != want {
		return fmt.Sprintf("%d of %d tenant queues running", running, want)
	}
	return ""
}

// checkMessages fails when a queue of the numbered tenants lost its
// persistent message in the restart.
func (n *privateBroker) checkMessages(b *testing.B, tenants []int) {
	if *restartQueues == 0 {
		return
	}
	for _, i := range tenants {
		acc := restartTenant(i)
		conn, err := amqp.Dial(n.tenantURL(acc))
		if err != nil {
			b.Fatalf("dial %s after the restart: %v", acc.Vhost, err)
		}
		ch, err := conn.Channel()
		if err != nil {
			b.Fatal(err)
		}
		q, err := ch.QueueDeclarePassive("q-0", true, false, false, false, nil)
		conn.Close()
		if err != nil || q.Messages != 1 {
			b.Fatalf("q-0 in %s after the restart: %d messages, want 1 (%v)", acc.Vhost, q.Messages, err)
		}
	}
}

// memory is the resident memory of the node's process (its pid file is
// hack/deps.sh's): the management API's own figure is a sample up to
// collect_statistics_interval old.
func (n *privateBroker) memory(b *testing.B) int64 {
	pid, err := os.ReadFile(filepath.Join(n.state, "rabbitmq-"+n.amqpPort, "pid"))
	if err != nil {
		b.Fatalf("the node's pid: %v", err)
	}
	status, err := os.ReadFile(filepath.Join("/proc", strings.TrimSpace(string(pid)), "status"))
	if err != nil {
		b.Fatalf("the node's memory: %v", err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if kb, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(kb), "kB")), 10, 64)
			if err != nil {
				b.Fatalf("the node's VmRSS %q: %v", kb, err)
			}
			return n << 10
		}
	}
	b.Fatal("the node's status has no VmRSS")
	return 0
}

var restartHTTP = &http.Client{Timeout: 10 * time.Second}

// get asks the management API, decoding the answer into out when not nil.
func (n *privateBroker) get(path string, out any) error {
	req, err := http.NewRequest(http.MethodGet, n.management+path, nil)
	if err != nil {
		return err
	}
	req.SetBasicAuth("guest", "guest")
	resp, err := restartHTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	if out == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "?"
}

func printRestartTable(rows []restartRow) {
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n== broker restart (a private RabbitMQ node, %d queue(s) with a persistent message per tenant vhost)\n", *restartQueues)
	fmt.Fprintf(&sb, "| tenant vhosts | provision (s) | RSS before/after (MiB) | stop (s) | start: management answers (s) | all vhosts running (s) | all queues running (s) | deps.sh up returned (s) | load 1m start/end |\n")
	fmt.Fprintf(&sb, "|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	s := func(d time.Duration) string { return fmt.Sprintf("%.1f", d.Seconds()) }
	for _, r := range rows {
		prov := "-"
		if r.vhosts > 0 {
			prov = s(r.provision)
		}
		fmt.Fprintf(&sb, "| %d | %s | %d/%d | %s | %s | %s | %s | %s | %s/%s |\n", r.vhosts, prov, r.memBefore>>20, r.memAfter>>20,
			s(r.stop), s(r.management), s(r.vhostsRunning), s(r.queuesRunning), s(r.upReturned), r.loadStart, r.loadEnd)
	}
	fmt.Print(sb.String())
}
