package fnimage

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kube5s/sless/pkg/testenv"
	"github.com/kube5s/sless/runtimes"
	"github.com/kube5s/sless/runtimes/contract"
	"github.com/kube5s/sless/services/builder/internal/imagetest"
)

// TestAssembledImageServesTheContract assembles the contract's fixture
// handler onto the real runtime bases (Debian bookworm with Python 3.11 or
// Node 20, made by hack/runtime-bases.sh and pushed here from their cached
// layout), pulls the image back by digest, unpacks it and runs its
// entrypoint as its user, in its working directory and with its
// environment, chrooted into the image's filesystem alone (its own
// interpreter and libraries; only /dev and a /proc of its own PID
// namespace come from the host). Every fixture of the runtime contract
// must then be answered as contract.json says.
func TestAssembledImageServesTheContract(t *testing.T) {
	reg := testenv.Registry(t)
	for _, rt := range []struct{ runtime, entry string }{{"python3.11", "main.handler"}, {"nodejs20", "index.handler"}} {
		t.Run(rt.runtime, func(t *testing.T) {
			base := imagetest.RuntimeBase(t, reg, rt.runtime)
			code := t.TempDir()
			file, body, err := runtimes.FixtureHandler(rt.runtime)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(code, file), body, 0o644); err != nil {
				t.Fatal(err)
			}
			dest := reg + "/" + testenv.Name("acme-") + "/fixtures"
			d, err := Assemble(t.Context(), Request{Runtime: rt.runtime, Base: base, Code: code, Destination: dest,
				SourceSHA256: strings.Repeat("ab", 32), Tenant: "test", Function: "fixtures"}, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			img := imagetest.Pull(t, dest, d)
			url := imagetest.Run(t, img, "SLESS_ENTRYPOINT="+rt.entry, "SLESS_FUNCTION=fixtures", "SLESS_TENANT=test", "SLESS_WORKERS=1")
			contract.Run(t, url, "fixtures", "test")
		})
	}
}
