package e2e

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestDepsStartsPrivateServersWhenNoneAnswers: where no PostgreSQL or
// RabbitMQ answers, hack/deps.sh starts private ones with a state
// directory of their own, and down stops them. Run as root, the state
// directory (a 0700 test directory, as root's ~/.cache is to others) is
// one the postgres user cannot enter: initdb must still work. The servers
// get ports of their own, so that the machine's servers on 5432 and 5672,
// which this test leaves alone, cannot hide the fallback.
func TestDepsStartsPrivateServersWhenNoneAnswers(t *testing.T) {
	script, err := filepath.Abs(filepath.Join("..", "hack", "deps.sh"))
	if err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(t.TempDir(), "state")
	pgPort, rabbitPort, distPort := freePort(t), freePort(t), freePort(t)
	env := append(os.Environ(), "SLESS_STATE_DIR="+state, "SLESS_PG_PORT="+pgPort, "SLESS_RABBITMQ_PORT="+rabbitPort,
		"SLESS_RABBITMQ_DIST_PORT="+distPort)
	deps := func(args ...string) (string, error) {
		c := exec.Command(script, args...)
		c.Env = env
		out, err := c.CombinedOutput()
		return string(out), err
	}
	t.Cleanup(func() {
		if out, err := deps("down"); err != nil {
			t.Errorf("deps.sh down: %v\n%s", err, out)
		}
		// A cluster kept outside the state directory (as root) goes too.
		if dir, err := os.ReadFile(filepath.Join(state, "postgres.datadir")); err == nil {
			if d := strings.TrimSpace(string(dir)); strings.HasPrefix(d, "/var/lib/sless/postgres-") {
				_ = os.RemoveAll(d)
			}
		}
	})

	if out, err := deps("postgres", "up"); err != nil {
		t.Fatalf("deps.sh postgres up: %v\n%s", err, out)
	}
	psql := exec.Command("psql", "-h", "127.0.0.1", "-p", pgPort, "-U", "postgres", "-Atc", "SELECT 40 + 2")
	if out, err := psql.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "42" {
		t.Fatalf("the private PostgreSQL on %s does not answer: %v %s", pgPort, err, out)
	}

	if out, err := deps("rabbitmq", "up"); err != nil {
		t.Fatalf("deps.sh rabbitmq up: %v\n%s", err, out)
	}
	conn, err := amqp.Dial("amqp://guest:guest@127.0.0.1:" + rabbitPort + "/")
	if err != nil {
		t.Fatalf("the private RabbitMQ on %s does not answer: %v", rabbitPort, err)
	}
	ch, err := conn.Channel()
	if err == nil {
		_, err = ch.QueueDeclare("", false, true, true, false, nil)
	}
	conn.Close()
	if err != nil {
		t.Fatalf("the private RabbitMQ does not take a queue: %v", err)
	}

	// Up again is idempotent: the running servers are used as they are.
	if out, err := deps("postgres", "up"); err != nil || strings.Contains(out, "starting") {
		t.Errorf("a second postgres up: %v\n%s", err, out)
	}
	if out, err := deps("down"); err != nil {
		t.Fatalf("deps.sh down: %v\n%s", err, out)
	}
	for _, p := range []string{pgPort, rabbitPort} {
		if c, err := net.Dial("tcp", "127.0.0.1:"+p); err == nil {
			c.Close()
			t.Errorf("a private server still listens on %s after down", p)
		}
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}
