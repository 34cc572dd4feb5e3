// Command sless is the command line of the sless platform: log in, create
// a function from a template, deploy it, call it, read its logs, its
// invocations and its builds, and manage triggers, jobs, tenants and
// tokens. Exit codes: 0 success; 1 the operation failed (the API answered
// a problem, the build failed, a wait timed out); 2 the command line is
// wrong (unknown command or flag, bad argument).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
