// Command builder is the sless builder service; see README.md.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(os.Args) > 1 && os.Args[1] == "prepare-context" {
		if err := prepareContext(ctx, os.Args[2:], os.Getenv, os.Stdout); err != nil {
			// The termination message is what the builder reports as the reason.
			fmt.Fprintln(os.Stderr, "prepare-context:", err)
			if _, serr := os.Stat("/dev/termination-log"); serr == nil { // in a pod only
				_ = os.WriteFile("/dev/termination-log", []byte(err.Error()), 0o644)
			}
			os.Exit(1)
		}
		return
	}
	if err := run(ctx, os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "builder:", err)
		os.Exit(1)
	}
}
