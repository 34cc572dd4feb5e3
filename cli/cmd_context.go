package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/kube5s/sless/cli/internal/config"
	"github.com/kube5s/sless/cli/internal/output"
	"github.com/kube5s/sless/pkg/client"
)

func (a *app) loginCommand() *cobra.Command {
	var name, tenant string
	c := &cobra.Command{
		Use:   "login URL",
		Short: "Save a platform, tenant and token as a context and make it the current one",
		Long: `login checks the token against the platform and saves it in a context.

The token is read from stdin when stdin is not a terminal
(e.g. 'cat token | sless login URL --tenant demo'), else from a prompt that
does not echo it. It is never a flag: flags end up in shell history.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			url := strings.TrimRight(args[0], "/")
			token, err := a.readToken()
			if err != nil {
				return err
			}
			if name == "" {
				name = tenant
				if name == "" {
					name = "admin"
				}
			}
			api, err := client.New(url, token, "sless-cli/"+version)
			if err != nil {
				return err
			}
			// The token must work: a tenant token reads its tenant, the
			// admin token lists tenants.
			if tenant != "" {
				_, err = client.Do(api.GetTenantWithResponse(cmd.Context(), tenant))
			} else {
				_, err = client.Do(api.ListTenantsWithResponse(cmd.Context(), &client.ListTenantsParams{}))
			}
			if err != nil {
				return fmt.Errorf("the platform refused the token: %w", err)
			}
			path, err := a.configPath()
			if err != nil {
				return err
			}
			f, err := config.Load(path)
			if err != nil {
				return err
			}
			f.Put(config.Context{Name: name, URL: url, Tenant: tenant, Token: token})
			f.CurrentContext = name
			if err := f.Save(path); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "Logged in to %s as tenant %q; context %q saved in %s and current.\n", url, tenant, name, path)
			return nil
		},
	}
	c.Flags().StringVar(&tenant, "tenant", "", "the tenant the token belongs to (none for the admin token)")
	c.Flags().StringVar(&name, "name", "", "the context's name (default: the tenant, or admin)")
	return c
}

// readToken reads a token from stdin, prompting on a terminal.
func (a *app) readToken() (string, error) {
	if f, ok := a.stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprint(a.stderr, "Token: ")
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(a.stderr)
		if err != nil {
			return "", fmt.Errorf("read the token: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	line, err := bufio.NewReader(a.stdin).ReadString('\n')
	token := strings.TrimSpace(line)
	if token == "" {
		if err != nil {
			return "", errors.New("no token on stdin: pipe it in or run login on a terminal")
		}
		return "", errors.New("the token read from stdin is empty")
	}
	return token, nil
}

func (a *app) contextCommand() *cobra.Command {
	c := &cobra.Command{Use: "context", Short: "List the saved contexts or switch between them"}
	list := &cobra.Command{
		Use:   "list",
		Short: "List the contexts; * marks the current one (tokens are not shown)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			path, err := a.configPath()
			if err != nil {
				return err
			}
			f, err := config.Load(path)
			if err != nil {
				return err
			}
			p, err := a.printer()
			if err != nil {
				return err
			}
			type shown struct {
				Name    string `json:"name"`
				URL     string `json:"url"`
				Tenant  string `json:"tenant,omitempty"`
				Current bool   `json:"current"`
			}
			var items []shown
			rows := output.Rows{Header: []string{"CURRENT", "NAME", "URL", "TENANT"}}
			for _, x := range f.Contexts {
				cur := x.Name == f.CurrentContext
				items = append(items, shown{x.Name, x.URL, x.Tenant, cur})
				mark := ""
				if cur {
					mark = "*"
				}
				rows.Rows = append(rows.Rows, []string{mark, x.Name, x.URL, x.Tenant})
			}
			return p.Print(mustJSON(orEmpty(items)), rows)
		},
	}
	a.addOutputFlag(list)
	use := &cobra.Command{
		Use:   "use NAME",
		Short: "Make a context the current one",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path, err := a.configPath()
			if err != nil {
				return err
			}
			f, err := config.Load(path)
			if err != nil {
				return err
			}
			if _, ok := f.Get(args[0]); !ok {
				return fmt.Errorf("no context %q ('sless context list' shows them)", args[0])
			}
			f.CurrentContext = args[0]
			if err := f.Save(path); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "Switched to context %q.\n", args[0])
			return nil
		},
	}
	c.AddCommand(list, use)
	return c
}

func (a *app) versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the CLI's version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, args []string) {
			fmt.Fprintf(a.stdout, "sless %s\n", version)
		},
	}
}

func (a *app) completionCommand(root *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use:       "completion bash|zsh|fish",
		Short:     "Print the shell completion script",
		Long:      "Load it with e.g. 'source <(sless completion bash)', or write it where your shell reads completions.",
		Args:      cobra.MatchAll(cobra.ExactArgs(1), cobra.OnlyValidArgs),
		ValidArgs: []string{"bash", "zsh", "fish"},
		RunE: func(cmd *cobra.Command, args []string) error {
			switch args[0] {
			case "bash":
				return root.GenBashCompletionV2(a.stdout, true)
			case "zsh":
				return root.GenZshCompletion(a.stdout)
			default:
				return root.GenFishCompletion(a.stdout, true)
			}
		},
	}
}
