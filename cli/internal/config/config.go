// Package config reads and writes the CLI's contexts: where a platform is,
// which tenant, and the token, in $XDG_CONFIG_HOME/sless/config.yaml
// (~/.config/sless/config.yaml), readable by its owner only.
package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"sigs.k8s.io/yaml"
)

// Context is one platform and tenant the CLI talks to.
type Context struct {
	Name   string `json:"name"`
	URL    string `json:"url"`
	Tenant string `json:"tenant,omitempty"`
	Token  string `json:"token,omitempty"`
}

// File is the config file.
type File struct {
	CurrentContext string    `json:"current-context,omitempty"`
	Contexts       []Context `json:"contexts,omitempty"`
}

// Path is where the config file is, given the environment.
func Path(getenv func(string) string) (string, error) {
	if d := getenv("XDG_CONFIG_HOME"); d != "" {
		return filepath.Join(d, "sless", "config.yaml"), nil
	}
	home := getenv("HOME")
	if home == "" {
		return "", errors.New("neither XDG_CONFIG_HOME nor HOME is set: no place for the config file")
	}
	return filepath.Join(home, ".config", "sless", "config.yaml"), nil
}

// Load reads the config file; a missing file is an empty config.
func Load(path string) (*File, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return &File{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read config %s: %w", path, err)
	}
	var f File
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		return nil, fmt.Errorf("parse config %s: %w", path, err)
	}
	return &f, nil
}

// Save writes the file atomically with mode 0600 (it holds tokens).
func (f *File) Save(path string) error {
	sort.Slice(f.Contexts, func(i, j int) bool { return f.Contexts[i].Name < f.Contexts[j].Name })
	b, err := yaml.Marshal(f)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("save config: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".config-*.yaml")
	if err != nil {
		return fmt.Errorf("save config: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("save config: %w", err)
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("save config: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("save config: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("save config: %w", err)
	}
	return nil
}

// Get returns the context called name.
func (f *File) Get(name string) (Context, bool) {
	for _, c := range f.Contexts {
		if c.Name == name {
			return c, true
		}
	}
	return Context{}, false
}

// Put adds or replaces a context.
func (f *File) Put(c Context) {
	for i := range f.Contexts {
		if f.Contexts[i].Name == c.Name {
			f.Contexts[i] = c
			return
		}
	}
	f.Contexts = append(f.Contexts, c)
}

// Resolve is the context a command uses: the one named (or the current
// one), with SLESS_URL, SLESS_TOKEN and SLESS_TENANT overriding its fields.
func (f *File) Resolve(name string, getenv func(string) string) (Context, error) {
	if name == "" {
		name = f.CurrentContext
	}
	var c Context
	if name != "" {
		var ok bool
		if c, ok = f.Get(name); !ok {
			return c, fmt.Errorf("no context %q in the config file ('sless context list' shows them)", name)
		}
	}
	if v := getenv("SLESS_URL"); v != "" {
		c.URL = v
	}
	if v := getenv("SLESS_TOKEN"); v != "" {
		c.Token = v
	}
	if v := getenv("SLESS_TENANT"); v != "" {
		c.Tenant = v
	}
	if c.URL == "" {
		return c, errors.New("no platform URL: run 'sless login URL' or set SLESS_URL")
	}
	return c, nil
}
