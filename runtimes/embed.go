// Package runtimes carries the runtime wrappers into Go programs: the
// builder's assemble step puts these very files into a function image, so
// the kubernetes profile runs the same wrapper the local profile and the
// tests run.
package runtimes

import (
	"embed"
	"fmt"
	"io/fs"
)

//go:embed python3.11/runtime.py nodejs20/runtime.js
var files embed.FS

// wrappers names each runtime's wrapper file.
var wrappers = map[string]string{"python3.11": "runtime.py", "nodejs20": "runtime.js"}

// Wrapper is the wrapper program of one runtime.
type Wrapper struct {
	Name string // runtime.py or runtime.js
	Data []byte
}

// WrapperOf returns the wrapper of runtime.
func WrapperOf(runtime string) (Wrapper, error) {
	name, ok := wrappers[runtime]
	if !ok {
		return Wrapper{}, fmt.Errorf("unknown runtime %q", runtime)
	}
	w, err := fs.ReadFile(files, runtime+"/"+name)
	if err != nil {
		return Wrapper{}, err
	}
	return Wrapper{Name: name, Data: w}, nil
}
