package doccheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docName is a test, benchmark or fuzz target named in the docs.
var docName = regexp.MustCompile(`\b(?:Test|Benchmark|Fuzz)[A-Z][A-Za-z0-9_]*`)

// funcName is the declaration of one in a _test.go file.
var funcName = regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz)[A-Z][A-Za-z0-9_]*)\(`)

// TestNamedTestsExist checks that every test, benchmark and fuzz target
// that README.md and docs/*.md name is declared in a _test.go file of the
// repository (any of its modules), or begins the name of one (a -run
// pattern such as TestSaturated). A name on a line that says the test was
// replaced is history and may be gone. Why: design.md named a property
// test that never existed, and a reader trusted the check it described.
func TestNamedTestsExist(t *testing.T) {
	root := repoRoot(t)
	names, err := funcs(root, "./...", funcName)
	if err != nil {
		t.Fatal(err)
	}
	declared := map[string]bool{}
	for _, n := range names {
		declared[n] = true
	}
	if !declared["TestNamedTestsExist"] {
		t.Fatalf("the walk of %s found %d declarations, not this test's", root, len(declared))
	}
	named := 0
	for _, f := range docFiles(t, root) {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "replaced") {
				continue
			}
			for _, name := range docName.FindAllString(line, -1) {
				named++
				if !declared[name] && !prefixOfOne(name, declared) {
					t.Errorf("%s:%d names %s, which no _test.go declares", f, i+1, name)
				}
			}
		}
	}
	if named == 0 {
		t.Fatal("the docs name no test: the pattern is wrong")
	}
}

// prefixOfOne reports whether name begins a declared name.
func prefixOfOne(name string, declared map[string]bool) bool {
	for d := range declared {
		if strings.HasPrefix(d, name) {
			return true
		}
	}
	return false
}
