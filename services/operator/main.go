// Command operator is the sless operator service; see README.md.
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
	if service.Command("operator", "the sless reconcilers of Tenant, Function, Trigger and FunctionJob", os.Args[1:], os.Stdout) {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "operator:", err)
		os.Exit(1)
	}
}
