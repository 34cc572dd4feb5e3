package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/kube5s/sless/cli/internal/config"
	"github.com/kube5s/sless/cli/internal/output"
	"github.com/kube5s/sless/pkg/client"
)

// Exit codes (documented in the root command's help and in main.go).
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// version is set at link time (-ldflags "-X main.version=...").
var version = "dev"

// app is what every command shares: the environment, the streams, the
// global flags and, once resolved, the context and the client.
type app struct {
	getenv func(string) string
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer

	contextName string
	tenantFlag  string
	outputFlag  string

	mu       sync.Mutex
	lastWait string // the reason sayWaiting printed last
}

// usageError marks a wrong command line (exit code 2).
type usageError struct{ error }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// run executes one command line and returns the exit code.
func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	a := &app{getenv: getenv, stdin: stdin, stdout: stdout, stderr: stderr}
	root := a.rootCommand()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	var p *client.Problem
	var u usageError
	switch {
	case errors.As(err, &p):
		fmt.Fprintln(stderr, "Error:", err)
		if p.RequestID != "" {
			fmt.Fprintln(stderr, "Request id:", p.RequestID)
		}
	case errors.As(err, &u) || isFlagError(err):
		fmt.Fprintln(stderr, "Error:", err)
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		return exitUsage
	case errors.Is(err, errReported):
		// the command printed what went wrong
	default:
		fmt.Fprintln(stderr, "Error:", err)
	}
	return exitError
}

// errReported: the command already printed the failure (a failed build's
// reason and log tail); exit 1 without saying it again.
var errReported = errors.New("reported")

// isFlagError recognizes cobra's and pflag's command line errors.
func isFlagError(err error) bool {
	s := err.Error()
	for _, p := range []string{"unknown flag", "unknown shorthand flag", "unknown command", "flag needs an argument", "invalid argument", "accepts ", "requires at least", "requires exactly", "bad flag syntax", "required flag"} {
		if strings.Contains(s, p) {
			return true
		}
	}
	return false
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "sless",
		Short: "The command line of the sless functions platform",
		Long: `sless deploys and operates functions on a sless platform.

Start with 'sless login URL --tenant NAME' (the token is read from stdin or
a prompt), then 'sless init --runtime python3.11 hello' and 'sless deploy hello'.

Configuration: contexts in $XDG_CONFIG_HOME/sless/config.yaml
(~/.config/sless/config.yaml); SLESS_URL, SLESS_TOKEN and SLESS_TENANT
override the current context's fields.

Output: read commands take -o table|json|yaml; a table with a header on a
terminal, plain tab-separated lines without one when piped. NO_COLOR is
honoured.

Exit codes: 0 success; 1 the operation failed (the API answered a problem,
the build failed, a wait timed out); 2 the command line is wrong.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&a.contextName, "context", "", "the context to use instead of the current one")
	root.PersistentFlags().StringVar(&a.tenantFlag, "tenant", "", "the tenant to act on instead of the context's")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(
		a.loginCommand(), a.contextCommand(), a.initCommand(), a.deployCommand(), a.invokeCommand(), a.logsCommand(),
		a.invocationsCommand(), a.buildsCommand(), a.fnCommand(), a.triggersCommand(), a.jobsCommand(),
		a.tenantsCommand(), a.tokensCommand(), a.traceCommand(), a.versionsCommand(), a.trafficCommand(), a.rollbackCommand(), a.versionCommand(), a.completionCommand(root),
	)
	return root
}

// group makes c a command of subcommands: alone it prints its help, with
// an unknown subcommand it is a usage error (exit 2).
func group(c *cobra.Command) *cobra.Command {
	c.Args = cobra.ArbitraryArgs
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usagef("unknown command %q for %q", args[0], cmd.CommandPath())
		}
		return cmd.Help()
	}
	return c
}

// addOutputFlag gives a read command -o.
func (a *app) addOutputFlag(c *cobra.Command) {
	c.Flags().StringVarP(&a.outputFlag, "output", "o", "", "output format: table, json or yaml (default: table on a terminal, plain lines when piped)")
}

// printer is how a read command prints, given -o and where stdout goes.
func (a *app) printer() (*output.Printer, error) {
	f, err := output.Parse(a.outputFlag)
	if err != nil {
		return nil, usageError{err}
	}
	tty := isTerminal(a.stdout)
	return &output.Printer{W: a.stdout, Format: f, Terminal: tty, Color: tty && a.getenv("NO_COLOR") == ""}, nil
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// configPath is where the contexts are kept.
func (a *app) configPath() (string, error) { return config.Path(a.getenv) }

// platformWait is how long a command waits out answers that ask to be
// repeated (503 or 409 with Retry-After: a tenant whose namespace is being
// made or removed, a quota being counted) before it fails with the last.
const platformWait = 2 * time.Minute

// sayWaiting tells stderr what a command waits for, once per reason.
func (a *app) sayWaiting(_ context.Context, w client.Wait) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if w.Problem == nil || w.Problem.Detail == a.lastWait {
		return
	}
	a.lastWait = w.Problem.Detail
	fmt.Fprintf(a.stderr, "Waiting: %s (asking again in %s, for up to %s)\n", w.Problem.Detail, w.After, platformWait)
}

// target is the platform, tenant and client a command talks to.
type target struct {
	config.Context
	api *client.ClientWithResponses
}

// connect resolves the context (flags, then environment) and builds the client.
func (a *app) connect(needTenant bool) (*target, error) {
	path, err := a.configPath()
	if err != nil {
		return nil, err
	}
	f, err := config.Load(path)
	if err != nil {
		return nil, err
	}
	c, err := f.Resolve(a.contextName, a.getenv)
	if err != nil {
		return nil, err
	}
	if a.tenantFlag != "" {
		c.Tenant = a.tenantFlag
	}
	if needTenant && c.Tenant == "" {
		return nil, errors.New("no tenant: pass --tenant, set SLESS_TENANT or log in with --tenant")
	}
	api, err := client.New(c.URL, c.Token, "sless-cli/"+version, client.WithWaits(platformWait, a.sayWaiting))
	if err != nil {
		return nil, err
	}
	return &target{Context: c, api: api}, nil
}
