// Package runtimes carries the runtime wrappers and their image Dockerfiles
// into Go programs: the builder's prepare-context writes these very files
// into the build context of a function image, so the kubernetes profile runs
// the same wrapper the local profile and the tests run.
package runtimes

import (
	"embed"
	"fmt"
	"io/fs"
)

//go:embed python3.11/runtime.py python3.11/Dockerfile nodejs20/runtime.js nodejs20/Dockerfile
var files embed.FS

// wrappers names each runtime's wrapper file.
var wrappers = map[string]string{"python3.11": "runtime.py", "nodejs20": "runtime.js"}

// Image is what a function image of one runtime is built from.
type Image struct {
	Dockerfile  []byte
	Wrapper     []byte
	WrapperName string // the file name the Dockerfile copies
}

// ImageFiles returns the Dockerfile and the wrapper of runtime.
func ImageFiles(runtime string) (Image, error) {
	name, ok := wrappers[runtime]
	if !ok {
		return Image{}, fmt.Errorf("unknown runtime %q", runtime)
	}
	df, err := fs.ReadFile(files, runtime+"/Dockerfile")
	if err != nil {
		return Image{}, err
	}
	w, err := fs.ReadFile(files, runtime+"/"+name)
	if err != nil {
		return Image{}, err
	}
	return Image{Dockerfile: df, Wrapper: w, WrapperName: name}, nil
}
