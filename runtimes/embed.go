// Package runtimes carries the runtime wrappers into Go programs: the
// builder's assemble step puts these very files into a function image, so
// the kubernetes profile runs the same wrapper the local profile and the
// tests run.
package runtimes

import (
	"embed"
	"fmt"
	"io/fs"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
)

//go:embed python3.11/runtime.py nodejs20/runtime.js fixtures/contract.json fixtures/handlers/main.py fixtures/handlers/index.js
var files embed.FS

// wrappers names each runtime's wrapper file.
var wrappers = map[slessv1.Runtime]string{slessv1.RuntimePython311: "runtime.py", slessv1.RuntimeNodeJS20: "runtime.js"}

// Wrapper is the wrapper program of one runtime.
type Wrapper struct {
	Name string // runtime.py or runtime.js
	Data []byte
}

// WrapperOf returns the wrapper of runtime.
func WrapperOf(runtime string) (Wrapper, error) {
	name, ok := wrappers[slessv1.Runtime(runtime)]
	if !ok {
		return Wrapper{}, fmt.Errorf("unknown runtime %q", runtime)
	}
	w, err := fs.ReadFile(files, runtime+"/"+name)
	if err != nil {
		return Wrapper{}, err
	}
	return Wrapper{Name: name, Data: w}, nil
}

// fixtureHandlers names each runtime's fixture handler file.
var fixtureHandlers = map[slessv1.Runtime]string{slessv1.RuntimePython311: "main.py", slessv1.RuntimeNodeJS20: "index.js"}

// ContractFixtures is fixtures/contract.json, the requests every runtime
// must answer as it says (package contract checks them).
func ContractFixtures() []byte {
	b, err := files.ReadFile("fixtures/contract.json")
	if err != nil {
		panic(err) // embedded: cannot fail
	}
	return b
}

// FixtureHandler is the function the contract fixtures are run against,
// in runtime's language: its file name and content.
func FixtureHandler(runtime string) (string, []byte, error) {
	name, ok := fixtureHandlers[slessv1.Runtime(runtime)]
	if !ok {
		return "", nil, fmt.Errorf("unknown runtime %q", runtime)
	}
	b, err := fs.ReadFile(files, "fixtures/handlers/"+name)
	return name, b, err
}
