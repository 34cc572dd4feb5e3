package runtimes

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
)

// TestWrappersAreTheFilesOnDisk: the embedded copies are the wrappers of
// this directory.
func TestWrappersAreTheFilesOnDisk(t *testing.T) {
	for rt, name := range wrappers {
		w, err := WrapperOf(string(rt))
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(filepath.Join(string(rt), name))
		if err != nil {
			t.Fatal(err)
		}
		if w.Name != name || !bytes.Equal(w.Data, want) {
			t.Errorf("%s/%s: the embedded copy differs from the file", rt, name)
		}
	}
	if _, err := WrapperOf("ruby3"); err == nil {
		t.Error("an unknown runtime has a wrapper")
	}
}

// TestFixturesAreTheFilesOnDisk: the embedded contract and fixture
// handlers are this directory's files.
func TestFixturesAreTheFilesOnDisk(t *testing.T) {
	want, err := os.ReadFile(filepath.Join("fixtures", "contract.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ContractFixtures(), want) {
		t.Error("the embedded contract.json differs from the file")
	}
	for rt, file := range fixtureHandlers {
		name, data, err := FixtureHandler(string(rt))
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(filepath.Join("fixtures", "handlers", file))
		if err != nil {
			t.Fatal(err)
		}
		if name != file || !bytes.Equal(data, want) {
			t.Errorf("%s: the embedded fixture handler differs from %s", rt, file)
		}
	}
	if _, _, err := FixtureHandler("ruby3"); err == nil {
		t.Error("an unknown runtime has a fixture handler")
	}
}

// TestEveryRuntimeHasAWrapper: each runtime the API accepts has a wrapper
// and a fixture handler here, and nothing else does.
func TestEveryRuntimeHasAWrapper(t *testing.T) {
	for _, rt := range slessv1.Runtimes() {
		if _, err := WrapperOf(string(rt)); err != nil {
			t.Errorf("runtime %s: %v", rt, err)
		}
		if _, _, err := FixtureHandler(string(rt)); err != nil {
			t.Errorf("runtime %s: %v", rt, err)
		}
	}
	if n := len(slessv1.Runtimes()); len(wrappers) != n || len(fixtureHandlers) != n {
		t.Errorf("%d wrappers and %d fixture handlers for %d runtimes", len(wrappers), len(fixtureHandlers), n)
	}
}
