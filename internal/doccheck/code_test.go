package doccheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// codeMarkRE is the line that ties the fenced Go block right after it to
// a function of a Go file: <!-- code: path/to/file.go FuncName -->, the
// path relative to the repository's root.
var codeMarkRE = regexp.MustCompile(`^<!--\s*code:\s*(\S+\.go)\s+(\w+)\s*-->\s*$`)

// TestCodeBlocksMatchCode checks the code the docs show as a function of
// the repository (an example that runs as a test, say): a fenced Go block
// after a line <!-- code: file.go Func --> must be that function's source
// as it is in file.go, from "func" to its closing brace.
func TestCodeBlocksMatchCode(t *testing.T) {
	root := repoRoot(t)
	files := docFiles(t, root)
	marks := 0
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		n, problems := checkCode(root, f, string(b))
		marks += n
		for _, p := range problems {
			t.Error(p)
		}
	}
	if marks == 0 {
		t.Error("no <!-- code: file.go Func --> mark in README.md or docs/*.md: the check checks nothing")
	}
}

// TestCodeRule checks the rule itself on small documents, against this
// file's own functions.
func TestCodeRule(t *testing.T) {
	root := repoRoot(t)
	src, err := funcSource(root, "internal/doccheck/code_test.go", "sampleForTheRule")
	if err != nil {
		t.Fatal(err)
	}
	const mark = "<!-- code: internal/doccheck/code_test.go sampleForTheRule -->\n"
	for _, tc := range []struct {
		md   string
		want string // a problem that must be reported, "" for none
	}{
		{"# A\n\n" + mark + "```go\n" + src + "\n```\n", ""},
		{"# A\n\n" + mark + "```go\n" + strings.Replace(src, "42", "43", 1) + "\n```\n", "differs from"},
		{"# A\n\n" + mark + "\n```go\n" + src + "\n```\n", "no fenced Go block"},
		{"# A\n\n" + mark + "Some text.\n", "no fenced Go block"},
		{"# A\n\n" + mark + "```go\n" + src + "\n", "not closed"},
		{"# A\n\n<!-- code: internal/doccheck/code_test.go noSuchFunc -->\n```go\nfunc noSuchFunc() {}\n```\n", "no function noSuchFunc"},
		{"# A\n\n<!-- code: nosuch.go f -->\n```go\nfunc f() {}\n```\n", "nosuch.go"},
	} {
		n, problems := checkCode(root, "x.md", tc.md)
		got := strings.Join(problems, "\n")
		if n != 1 {
			t.Errorf("%q: %d marks found, want 1", tc.md, n)
		}
		if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
			t.Errorf("%q:\n got problems %q\nwant one with %q", tc.md, got, tc.want)
		}
	}
}

// sampleForTheRule is a function for TestCodeRule to show.
//
//lint:ignore U1000 only named, in TestCodeRule's Markdown
func sampleForTheRule() int {
	return 42
}

// checkCode returns the number of code marks in the Markdown file md,
// named file, and the problems with them.
func checkCode(root, file, md string) (int, []string) {
	var problems []string
	lines := strings.Split(md, "\n")
	marks := 0
	for i, l := range lines {
		m := codeMarkRE.FindStringSubmatch(strings.TrimSpace(l))
		if m == nil {
			continue
		}
		marks++
		where := fmt.Sprintf("%s:%d", file, i+1)
		if i+1 >= len(lines) || strings.TrimSpace(lines[i+1]) != "```go" {
			problems = append(problems, fmt.Sprintf("%s: no fenced Go block (```go) on the line after the mark of %s %s", where, m[1], m[2]))
			continue
		}
		end := -1
		for j := i + 2; j < len(lines); j++ {
			if strings.TrimSpace(lines[j]) == "```" {
				end = j
				break
			}
		}
		if end < 0 {
			problems = append(problems, fmt.Sprintf("%s: the Go block of %s %s is not closed", where, m[1], m[2]))
			continue
		}
		want, err := funcSource(root, m[1], m[2])
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", where, err))
			continue
		}
		if got := strings.Join(lines[i+2:end], "\n"); got != want {
			problems = append(problems, fmt.Sprintf("%s: the Go block differs from %s in %s, first at its line %d: copy the function into the block",
				where, m[2], m[1], firstDiff(got, want)))
		}
	}
	return marks, problems
}

// funcSource returns the source of the function name in the Go file path
// (relative to root), from "func" to its closing brace.
func funcSource(root, path, name string) (string, error) {
	src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(path)))
	if err != nil {
		return "", err
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
	if err != nil {
		return "", err
	}
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil && fd.Name.Name == name {
			return string(src[fset.Position(fd.Pos()).Offset:fset.Position(fd.End()).Offset]), nil
		}
	}
	return "", fmt.Errorf("%s has no function %s", path, name)
}

// firstDiff returns the 1-based number of the first line where a and b
// differ.
func firstDiff(a, b string) int {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range min(len(al), len(bl)) {
		if al[i] != bl[i] {
			return i + 1
		}
	}
	return min(len(al), len(bl)) + 1
}
