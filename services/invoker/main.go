// Command invoker is the sless invoker service; see README.md.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/kube5s/sless/pkg/service"
)

func main() {
	if service.Command("invoker", "runs the queued invocations of sless (async calls, cron fires, job runs, queue triggers)", os.Args[1:], os.Stdout) {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "invoker:", err)
		os.Exit(1)
	}
}
