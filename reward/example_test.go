package reward_test

import (
	"fmt"

	"github.com/swetui/swetui/reward"
)

// Extract finds the diff in a completion, normalises it and parses it; a
// broken one comes back with the syntax check's first problem.
func ExampleExtract() {
	e := reward.Extract("The bug is in add.\n\n```diff\n--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n" +
		"-    return a - b\n+    return a + b\n```\nThat should fix it.")
	fmt.Println(e.Form, e.Valid(), e.Patch.Files[0].Path())
	fmt.Print(e.Diff)

	e = reward.Extract("```diff\n--- a/calc.py\n+++ b/calc.py\n@@ -1,3 +1,3 @@\n-    return a - b\n+    return a + b\n```")
	fmt.Println(e.Form, e.Valid(), e.Err)
	// Output:
	// fenced true calc.py
	// --- a/calc.py
	// +++ b/calc.py
	// @@ -1,2 +1,2 @@
	//  def add(a, b):
	// -    return a - b
	// +    return a + b
	// fenced false diff line 3: hunk ends early: 2 old and 2 new lines missing at end of diff
}
