// Package doccheck keeps the measured figures in README.md and docs/*.md
// tied to the commands that print them, and the code the docs show tied
// to the code it shows (code_test.go: a fenced Go block after a line
// <!-- code: file.go Func --> must be Func's source in file.go), and every
// test, benchmark and fuzz target they name tied to its declaration
// (names_test.go). It has only tests.
//
// The rule for figures:
//
//  1. A figure is a number followed by a unit of measurement: ns/op, ns,
//     µs (or us), ms/op, B/op, allocs/op, allocs/tenant, allocations,
//     B/tenant; or a ratio followed by a comparison, such as "134x fewer"
//     or "2.5x faster" (more, fewer, faster, slower, less). Ranges such as
//     "14-42 ns/op" count once.
//  2. A figure's section (from one Markdown heading to the next, the
//     heading included; headings in fenced code blocks do not count) must
//     name a command that prints it: in a code span or a line of a fenced
//     code block, one of
//     - go test ... -bench <pattern> <packages>
//     - cd <module> && go test ... -bench <pattern> <packages>, for the
//     nested modules (integration, grpcquota, cmd/leasequota-sim), the
//     packages relative to the module's directory
//     - go test ... -run <pattern> ... -v <packages>, for a test that logs
//     its figures (t.Logf, shown with -v)
//     - make bench, make demo, make simulation-fleet
//     - cd cmd/leasequota-sim && go run . ... (the simulator is a module
//     of its own)
//     - bash scripts/<file> ..., for a script of this repository
//     - a go test command above piped into go run ./<dir> (a formatter
//     of the same module, such as integration's cmd/benchtable)
//  3. The command must be real: every package a go test names exists and
//     has a benchmark that its -bench pattern selects (without -bench, a
//     test that its -run pattern selects); a cd names a directory with a
//     go.mod; a make target is in the Makefile; go run's directory and a
//     script exist; so does the directory a pipe's go run names.
//  4. Benchmark output quoted in a fenced block (a line "BenchmarkX-N ...")
//     must come from a go test command of its section that runs BenchmarkX.
//
// Times in ms and s are not checked: most are settings (100 ms, 1 s), and
// the measured ones in docs/failure-modes.md name the tests that measure
// them. A figure that is a setting or a constant of the code, not a
// measurement, goes in notMeasured with the reason.
package doccheck

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// notMeasured lists figures in the docs that are not measurements. Each
// must still be found, so that the list stays current.
var notMeasured = []struct {
	file, text, why string
}{
	{"docs/failure-modes.md", "300 µs per command", "syncer's perCommand, the time a pipeline gets per command: a constant"},
}

var (
	figureRE = regexp.MustCompile(`\d[\d,]*(?:\.\d+)?(?:\s?[-–]\s?\d[\d,]*(?:\.\d+)?)?\s?` +
		`(?:ns/op|ms/op|B/op|allocs/op|allocs/tenant|B/tenant|allocations|allocs|ns|[µμu]s)\b` +
		`|\d[\d,]*(?:\.\d+)?\s?[x×]\s(?:more|fewer|faster|slower|less)\b`)
	codeSpanRE  = regexp.MustCompile("`([^`]+)`")
	headingRE   = regexp.MustCompile(`^#{1,6}\s`)
	fenceRE     = regexp.MustCompile("^\\s*(```|~~~)")
	benchLineRE = regexp.MustCompile(`^(Benchmark\w+)-\d+\s`)
	benchFuncRE = regexp.MustCompile(`(?m)^func (Benchmark\w+)\(b \*testing\.B\)`)
	testFuncRE  = regexp.MustCompile(`(?m)^func (Test\w+)\(t \*testing\.T\)`)
	makeTarget  = regexp.MustCompile(`^make\s+([\w-]+)$`)
)

// docFiles returns README.md and docs/*.md, relative to root, slashed.
func docFiles(t *testing.T, root string) []string {
	t.Helper()
	files := []string{"README.md"}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		rel, _ := filepath.Rel(root, d)
		files = append(files, filepath.ToSlash(rel))
	}
	return files
}

func TestFiguresNameTheirCommand(t *testing.T) {
	root := repoRoot(t)
	files := docFiles(t, root)
	used := make([]bool, len(notMeasured))
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range checkFile(root, f, string(b), used) {
			t.Error(p)
		}
	}
	for i, u := range used {
		if !u {
			t.Errorf("notMeasured: %q is no longer in %s: remove it from the list", notMeasured[i].text, notMeasured[i].file)
		}
	}
}

// TestRule checks the rule itself on small documents.
func TestRule(t *testing.T) {
	root := repoRoot(t)
	for _, tc := range []struct {
		md   string
		want string // a problem that must be reported, "" for none
	}{
		{"# A\n\nAllow takes 12 ns/op.\n", "12 ns/op: no command"},
		{"# A\n\nIt is 4.3x faster.\n", "4.3x faster: no command"},
		{"# A\n\n`go test -run '^$' -bench Allow -benchmem .` prints\n\n```\nBenchmarkAllow-2  100  12.35 ns/op  0 B/op  0 allocs/op\n```\n", ""},
		{"# A\n\n`go test -bench . ./middleware` on 2 cores.\n\n# B\n\nIt adds 170 ns.\n", "170 ns: no command"},
		{"# A\n\n```sh\n# make demo\n```\nIt adds 170 ns.\n", "170 ns: no command"},
		{"## See it: `make demo`\n\n```\np50 150ns\n```\n", ""},
		{"# A\n\n`cd cmd/leasequota-sim && go run . -redis redis://x` shows 7.5 round trips, 1.2µs each\n", ""},
		{"# A\n\n`go test -bench NoSuch .`: 3 ns\n", "selects no benchmark"},
		{"# A\n\n`go test -bench . ./nosuch`: 3 ns\n", "no such directory"},
		{"# A\n\n`cd integration && go test -run '^$' -bench RedisPerRequest -benchmem .`\n\n```\nBenchmarkRedisPerRequest-2  100  50000 ns/op\n```\n", ""},
		{"# A\n\n`cd integration && go test -bench NoSuch .`: 3 ns\n", "selects no benchmark"},
		{"# A\n\n`cd nosuch && go test -bench . .`: 3 ns\n", "no go.mod"},
		{"# A\n\n`cd integration && go test -bench RedisPerRequest .`\n\n```\nBenchmarkAllow-2  100  12 ns/op\n```\n", "BenchmarkAllow: no go test command"},
		{"# A\n\n`go test -bench Allow .`\n\n```\nBenchmarkMiddleware-2  100  170 ns/op\n```\n", "BenchmarkMiddleware: no go test command"},
		{"# A\n\nThe default is 100 ms, 1 s and 3x its quota.\n", ""},
		{"# A\n\n`go test -count=1 -run '^TestFleetSimulation$' -v .` logs 84.8 us per admitted\n", ""},
		{"# A\n\n`go test -run '^TestNoSuch$' -v .`: 3 us\n", "selects no test"},
		{"# A\n\n`go test -run '^TestFleetSimulation$' .`: 3 us\n", "3 us: no command"},
		{"# A\n\n`make simulation-fleet` logs 3 us\n", ""},
		{"# A\n\n`bash scripts/redis-cost.sh 1000` prints 3 us\n", ""},
		{"# A\n\n`bash scripts/nosuch.sh` prints 3 us\n", "nosuch.sh"},
		{"# A\n\n`cd integration && go test -run '^$' -bench BenchmarkCompare -benchmem . | go run ./cmd/benchtable` prints 3 ns\n", ""},
		{"# A\n\n`cd integration && go test -run '^$' -bench BenchmarkCompare . | go run ./cmd/nosuch` prints 3 ns\n", "no such directory"},
		{"# A\n\n`cd integration && go test -bench NoSuch . | go run ./cmd/benchtable` prints 3 ns\n", "selects no benchmark"},
		{"# A\n\n`go test -bench Allow . | sort` prints 3 ns\n", "only be piped into go run"},
		{"# A\n\n`go test -bench Allow .`\n\n```\n| a | 3 ns |\n```\n", ""},
	} {
		problems := checkFile(root, "x.md", tc.md, make([]bool, len(notMeasured)))
		got := strings.Join(problems, "\n")
		if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
			t.Errorf("%q:\n got problems %q\nwant one with %q", tc.md, got, tc.want)
		}
	}
}

// line is one line of a Markdown file, and whether it is in a fenced
// code block.
type line struct {
	n      int // 1-based
	text   string
	fenced bool
}

// section is the lines from one heading to the next.
type section []line

// sections splits a Markdown file at its headings.
func sections(md string) []section {
	var out []section
	var cur section
	fenced := false
	for i, text := range strings.Split(md, "\n") {
		if fenceRE.MatchString(text) {
			fenced = !fenced
			continue
		}
		if !fenced && headingRE.MatchString(text) && len(cur) > 0 {
			out = append(out, cur)
			cur = nil
		}
		cur = append(cur, line{n: i + 1, text: text, fenced: fenced})
	}
	return append(out, cur)
}

// command is a command that prints figures, as named in a section.
type command struct {
	text    string
	benches []string // go test: the benchmarks it runs; nil for others
}

// checkFile returns the problems of the Markdown file md, named file.
func checkFile(root, file, md string, used []bool) []string {
	var problems []string
	for _, sec := range sections(md) {
		problems = append(problems, checkSection(root, file, sec, used)...)
	}
	return problems
}

func checkSection(root, file string, sec section, used []bool) []string {
	var problems []string
	var cmds []command
	for _, l := range sec {
		var cands []string
		if l.fenced {
			cands = []string{strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l.text), "$ "))}
		} else {
			for _, m := range codeSpanRE.FindAllStringSubmatch(l.text, -1) {
				cands = append(cands, strings.TrimSpace(m[1]))
			}
		}
		for _, c := range cands {
			cmd, ok, err := parseCommand(root, c)
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s:%d: %v", file, l.n, err))
			}
			if ok {
				cmds = append(cmds, cmd)
			}
		}
	}
	for _, l := range sec {
		figs := figureRE.FindAllString(l.text, -1)
		if len(figs) == 0 {
			continue
		}
		figs = exempt(file, l.text, figs, used)
		if len(figs) > 0 && len(cmds) == 0 {
			problems = append(problems, fmt.Sprintf("%s:%d: %s: no command in its section prints it (go test -bench, go test -run -v, make bench, make demo, make simulation-fleet, cd cmd/leasequota-sim && go run ., bash scripts/...)",
				file, l.n, strings.Join(figs, ", ")))
		}
		if !l.fenced {
			continue
		}
		if m := benchLineRE.FindStringSubmatch(l.text); m != nil && !runs(cmds, m[1]) {
			problems = append(problems, fmt.Sprintf("%s:%d: %s: no go test command of its section runs it", file, l.n, m[1]))
		}
	}
	return problems
}

// exempt drops the figures of text that notMeasured lists for file.
func exempt(file, text string, figs []string, used []bool) []string {
	var keep []string
next:
	for _, f := range figs {
		for i, e := range notMeasured {
			if e.file == file && strings.Contains(text, e.text) && strings.Contains(e.text, f) {
				used[i] = true
				continue next
			}
		}
		keep = append(keep, f)
	}
	return keep
}

func runs(cmds []command, bench string) bool {
	for _, c := range cmds {
		for _, b := range c.benches {
			if b == bench {
				return true
			}
		}
	}
	return false
}

// parseCommand reports whether s is a command that prints figures, and
// checks that it is real (rule 3).
func parseCommand(root, s string) (command, bool, error) {
	if m := makeTarget.FindStringSubmatch(s); m != nil {
		if m[1] != "bench" && m[1] != "demo" && m[1] != "simulation-fleet" {
			return command{}, false, nil
		}
		mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
		if err != nil {
			return command{}, false, err
		}
		if !regexp.MustCompile(`(?m)^` + m[1] + `:`).Match(mk) {
			return command{}, false, fmt.Errorf("%q: the Makefile has no target %s", s, m[1])
		}
		return command{text: s}, true, nil
	}
	args := shellWords(s)
	// A go test piped into a formatter: the go test prints the figures.
	var filter []string
	if i := slices.Index(args, "|"); i >= 0 {
		args, filter = args[:i], args[i+1:]
	}
	if filter != nil && isGoTest(args) {
		return pipedGoTest(root, s, args, filter)
	}
	switch {
	case len(args) >= 2 && args[0] == "bash" && strings.HasPrefix(args[1], "scripts/"):
		if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(args[1]))); err != nil {
			return command{}, false, fmt.Errorf("%q: %v", s, err)
		}
		return command{text: s}, true, nil
	case len(args) >= 6 && args[0] == "cd" && args[1] == "cmd/leasequota-sim" && args[2] == "&&" &&
		args[3] == "go" && args[4] == "run" && args[5] == ".":
		for _, f := range []string{"main.go", "go.mod"} {
			if _, err := os.Stat(filepath.Join(root, "cmd", "leasequota-sim", f)); err != nil {
				return command{}, false, fmt.Errorf("%q: %v", s, err)
			}
		}
		return command{text: s}, true, nil
	case len(args) >= 2 && args[0] == "go" && args[1] == "test":
		return goTest(root, s, args[2:])
	case len(args) >= 5 && args[0] == "cd" && args[2] == "&&" && args[3] == "go" && args[4] == "test":
		// A nested module: its packages are relative to its directory.
		dir := filepath.Join(root, filepath.FromSlash(args[1]))
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
			return command{}, false, fmt.Errorf("%q: cd %s: no go.mod there (%v)", s, args[1], err)
		}
		return goTest(dir, s, args[5:])
	}
	return command{}, false, nil
}

// pipedGoTest checks a go test command (args) piped into filter, which
// must be go run ./<dir>, the directory in the go test's module.
func pipedGoTest(root, s string, args, filter []string) (command, bool, error) {
	dir := root
	if len(args) >= 3 && args[0] == "cd" && args[2] == "&&" {
		dir = filepath.Join(root, filepath.FromSlash(args[1]))
	}
	if len(filter) < 3 || filter[0] != "go" || filter[1] != "run" || !strings.HasPrefix(filter[2], "./") {
		return command{}, false, fmt.Errorf("%q: a go test may only be piped into go run ./<dir>", s)
	}
	if st, err := os.Stat(filepath.Join(dir, filepath.FromSlash(filter[2]))); err != nil || !st.IsDir() {
		return command{}, false, fmt.Errorf("%q: go run %s: no such directory", s, filter[2])
	}
	cmd, ok, err := parseCommand(root, strings.Join(quoteWords(args), " "))
	if err == nil && ok && cmd.benches == nil {
		return command{}, false, fmt.Errorf("%q: only a go test -bench may be piped", s)
	}
	cmd.text = s
	return cmd, ok, err
}

// isGoTest reports whether args are go test ... or cd <dir> && go test ....
func isGoTest(args []string) bool {
	return len(args) >= 2 && args[0] == "go" && args[1] == "test" ||
		len(args) >= 5 && args[0] == "cd" && args[2] == "&&" && args[3] == "go" && args[4] == "test"
}

// quoteWords quotes each word for shellWords, so that joined they split
// back into the same words.
func quoteWords(words []string) []string {
	out := make([]string, len(words))
	for i, w := range words {
		out[i] = "'" + w + "'"
	}
	return out
}

// goTest checks a go test command with -bench, run in the module
// directory root: its packages exist and its pattern selects benchmarks
// in them. Without -bench, with -run and -v, it prints what the tests it
// selects log: its packages exist and its pattern selects tests. Else it
// prints no figures and is not a command for this check.
func goTest(root, s string, args []string) (command, bool, error) {
	valued := map[string]bool{"-run": true, "-bench": true, "-count": true, "-benchtime": true, "-cpu": true,
		"-timeout": true, "-tags": true, "-p": true, "-fuzz": true, "-fuzztime": true}
	var pattern, run string
	hasBench, hasRun, verbose := false, false, false
	var pkgs []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			pkgs = append(pkgs, a)
			continue
		}
		name, val, hasVal := strings.Cut(a, "=")
		if valued[name] && !hasVal && i+1 < len(args) {
			i++
			val = args[i]
		}
		switch name {
		case "-bench":
			pattern, hasBench = val, true
		case "-run":
			run, hasRun = val, true
		case "-v":
			verbose = true
		}
	}
	if len(pkgs) == 0 {
		pkgs = []string{"."}
	}
	if !hasBench && hasRun && verbose {
		return goTestRun(root, s, run, pkgs)
	}
	if !hasBench {
		return command{}, false, nil
	}
	re, err := regexp.Compile(strings.Split(pattern, "/")[0])
	if err != nil {
		return command{}, false, fmt.Errorf("%q: -bench: %v", s, err)
	}
	cmd := command{text: s}
	for _, p := range pkgs {
		benches, err := benchmarks(root, p)
		if err != nil {
			return command{}, false, fmt.Errorf("%q: %v", s, err)
		}
		for _, b := range benches {
			if re.MatchString(b) {
				cmd.benches = append(cmd.benches, b)
			}
		}
	}
	if len(cmd.benches) == 0 {
		return command{}, false, fmt.Errorf("%q: -bench %q selects no benchmark in %s", s, pattern, strings.Join(pkgs, " "))
	}
	return cmd, true, nil
}

// goTestRun checks a go test -run pattern -v command: its pattern selects
// a test in its packages.
func goTestRun(root, s, pattern string, pkgs []string) (command, bool, error) {
	re, err := regexp.Compile(strings.Split(pattern, "/")[0])
	if err != nil {
		return command{}, false, fmt.Errorf("%q: -run: %v", s, err)
	}
	for _, p := range pkgs {
		tests, err := funcs(root, p, testFuncRE)
		if err != nil {
			return command{}, false, fmt.Errorf("%q: %v", s, err)
		}
		for _, t := range tests {
			if re.MatchString(t) {
				return command{text: s}, true, nil
			}
		}
	}
	return command{}, false, fmt.Errorf("%q: -run %q selects no test in %s", s, pattern, strings.Join(pkgs, " "))
}

// benchmarks returns the benchmark functions of the package pattern p (a
// directory relative to root, "./..." style patterns included).
func benchmarks(root, p string) ([]string, error) { return funcs(root, p, benchFuncRE) }

// funcs returns the functions that re's first group names in the test
// files of the package pattern p.
func funcs(root, p string, re *regexp.Regexp) ([]string, error) {
	dir, recursive := strings.CutSuffix(p, "/...")
	if dir == "..." {
		dir, recursive = ".", true
	}
	if !strings.HasPrefix(dir, ".") {
		return nil, fmt.Errorf("package %q: want a path relative to the module root (./x)", p)
	}
	abs := filepath.Join(root, filepath.FromSlash(dir))
	if st, err := os.Stat(abs); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("package %q: no such directory", p)
	}
	var out []string
	err := filepath.WalkDir(abs, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != abs && !recursive {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			out = append(out, m[1])
		}
		return nil
	})
	return out, err
}

// shellWords splits s at spaces, keeping single- and double-quoted parts
// together (without the quotes).
func shellWords(s string) []string {
	var words []string
	var w strings.Builder
	in, quote := false, rune(0)
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			w.WriteRune(r)
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == ' ' || r == '\t':
			if in {
				words = append(words, w.String())
				w.Reset()
				in = false
			}
		default:
			w.WriteRune(r)
			in = true
		}
	}
	if in {
		words = append(words, w.String())
	}
	return words
}

// repoRoot is the directory of the module's go.mod, above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}
