// Package realdata finds the real SWE-bench data the tests check against
// (official harness logs, SWE-bench Lite instances). It lives beside the
// checkout, in ../shared/realdata, not in the repository: a clone elsewhere
// skips those tests, and CI (CI=true), which always has it, fails without it.
package realdata

import (
	"os"
	"path/filepath"
	"testing"
)

// Dir returns shared/realdata, found by walking up from the package
// directory, or skips t (fails it under CI=true) with where the data goes.
func Dir(t testing.TB) string {
	t.Helper()
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for {
		cand := filepath.Join(dir, "shared", "realdata")
		if st, err := os.Stat(cand); err == nil && st.IsDir() {
			return cand
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	const where = "shared/realdata (SWE-bench logs and instances) is not beside the checkout: put it at ../shared/realdata to run this test"
	if os.Getenv("CI") == "true" {
		t.Fatal(where + "; CI must have it")
	}
	t.Skip(where)
	return ""
}
