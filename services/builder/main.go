// Command builder is the sless builder service; see README.md.
package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/kube5s/sless/pkg/service"
)

func main() {
	if service.Command("builder", "turns a function source archive into a runnable artifact (sless); builder assemble and builder prepare-context are steps of a build Job", os.Args[1:], os.Stdout) {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(os.Args) > 1 && (os.Args[1] == "prepare-context" || os.Args[1] == "assemble") {
		// A step of a build Job (kubernetes profile). Its termination
		// message is what the builder reads: the pushed digest, or the
		// error it reports as the reason.
		var err error
		if os.Args[1] == "prepare-context" {
			err = prepareContext(ctx, os.Args[2:], os.Getenv, os.Stdout)
		} else {
			var digest bytes.Buffer
			if err = assemble(ctx, os.Args[2:], os.Getenv, &digest, os.Stderr); err == nil {
				fmt.Print(digest.String())
				terminationMessage(strings.TrimSpace(digest.String()))
			}
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", os.Args[1], err)
			terminationMessage(err.Error())
			stop()
			os.Exit(1)
		}
		return
	}
	if err := run(ctx, os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "builder:", err)
		os.Exit(1)
	}
}

// terminationMessage writes the container's termination message, in a pod only.
func terminationMessage(m string) {
	if _, err := os.Stat("/dev/termination-log"); err == nil {
		_ = os.WriteFile("/dev/termination-log", []byte(m), 0o644)
	}
}
