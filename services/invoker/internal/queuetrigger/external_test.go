package queuetrigger

import (
	"context"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/kube5s/sless/pkg/egress"
	"github.com/kube5s/sless/pkg/testenv"
)

// TestExternalBrokerDialsOnlyWhereThePolicyAllows: a tenant's external
// broker URL that points at the platform's broker (here on loopback) is
// refused at dial time; the same URL connects once the range is allowed.
func TestExternalBrokerDialsOnlyWhereThePolicyAllows(t *testing.T) {
	url := testenv.RabbitURL(t)
	run := func(policy *egress.Policy, until func(log string, connected bool) bool) string {
		var out testenv.SyncBuffer
		c := externalBroker(url, "sless-test-external", slog.New(slog.NewTextHandler(&out, nil)), policy)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { _ = c.Run(ctx); close(done) }()
		defer func() { cancel(); <-done }()
		testenv.Eventually(t, 20*time.Second, "the connect to succeed or fail", func() (bool, string) {
			return until(out.String(), c.Connected()), "log:\n" + out.String()
		})
		return out.String()
	}
	refused := run(egress.New(), func(log string, connected bool) bool {
		if connected {
			t.Fatal("connected to a loopback broker without an allow-list")
		}
		return strings.Contains(log, "rabbitmq connect failed")
	})
	if !strings.Contains(refused, "not a public address") {
		t.Errorf("the connect failed for another reason:\n%s", refused)
	}
	run(egress.New(netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")), func(_ string, connected bool) bool { return connected })
}
