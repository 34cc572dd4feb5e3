package service

import (
	"fmt"
	"io"
	"runtime/debug"
)

// Version is what the binary was built from: the main module's version
// when it was built from a module at a version, else the VCS revision it
// was built at ("-dirty" when the tree had changes), else "devel".
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if rev == "" {
		return "devel"
	}
	return rev[:min(len(rev), 12)] + dirty
}

// Command answers the arguments every service takes: --version (or
// version) prints "sless-<name> <version> <go version>", --help (or -h,
// help) what the service is and where its settings are. It reports
// whether it handled the arguments; a service runs when it did not.
// A service is configured by its environment only, so any other
// argument is left to the caller.
func Command(name, summary string, args []string, stdout io.Writer) bool {
	if len(args) == 0 {
		return false
	}
	switch args[0] {
	case "--version", "-version", "version":
		goVersion := "unknown"
		if bi, ok := debug.ReadBuildInfo(); ok {
			goVersion = bi.GoVersion
		}
		fmt.Fprintf(stdout, "sless-%s %s %s\n", name, Version(), goVersion)
		return true
	case "--help", "-help", "-h", "help":
		fmt.Fprintf(stdout, "%s: %s\n\nUsage: %s [--version | --help]\n\n"+
			"The %s is configured by its environment (SLESS_*, LOG_LEVEL, OTEL_*);\n"+
			"services/%s/README.md lists every variable. It serves /healthz,\n"+
			"/readyz and /metrics on SLESS_OPS_ADDR and stops on SIGTERM.\n",
			name, summary, name, name, name)
		return true
	}
	return false
}
