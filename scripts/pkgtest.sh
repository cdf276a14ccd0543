#!/usr/bin/env bash
# pkgtest runs the tests of packages one package at a time, as
# `go test -count=1 -p 1` does, but builds each package's test binary
# while the tests of the package before it run. go test -p 1 builds a
# package's test binary only once the previous package's tests have
# ended, with one core idle meanwhile (a race-enabled link alone takes
# 2-3 s for the larger packages; the Makefile's unit target states what
# building ahead saves).
#
# The builds run ahead, one at a time, in the order the packages run: on
# a quiet machine they are done while the root package's tests run (about
# 80 s). While a package's tests run the builds run at nice 19, so that
# the tests (timed ones among them) keep the CPU they would have had
# under go test; while the runner waits for a build, it runs at the
# tests' priority, since at nice 19 beside a busy process it would get
# next to none. Raising a priority again takes root: run as another user,
# the builds stay at the tests' priority throughout.
#
# usage: scripts/pkgtest.sh [go test build flags] -- [test binary flags] -- [packages]
#   e.g. scripts/pkgtest.sh -race -- -test.skip '^TestManyTenants' -- ./...
# Packages are go list patterns, read in the current directory (default
# "."); test binary flags are given in their -test.* form, after the
# -test.count=1, -test.timeout=10m0s and -test.paniconexit0 that go test
# would pass. $GO names the go command (default go).
#
# What it prints follows go test with a package list: "ok  <package>
# <seconds>s" for a package whose tests passed, its whole output then
# "FAIL <package>" for one whose tests failed, the compiler's output then
# "FAIL <package> [build failed]" for one that did not build, and
# "?   <package> [no test files]". Every package runs, whatever failed
# before it, and the exit status is 1 when any failed, 2 for bad usage.
set -uo pipefail

GO=${GO:-go}
build=()
run=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do build+=("$1"); shift; done
if [ $# -eq 0 ]; then
	echo "pkgtest: usage: pkgtest.sh [build flags] -- [test binary flags] -- [packages]" >&2
	exit 2
fi
shift
while [ $# -gt 0 ] && [ "$1" != -- ]; do run+=("$1"); shift; done
[ $# -gt 0 ] && shift
[ $# -gt 0 ] || set -- .

# One line a package: import path, whether it has tests, directory (last,
# so that a directory with spaces reads whole).
list=$("$GO" list -f '{{.ImportPath}} {{if or .TestGoFiles .XTestGoFiles}}1{{else}}0{{end}} {{.Dir}}' "$@") || exit 1
mapfile -t pkgs <<< "$list"

dir=$(mktemp -d)
builder=""
cleanup() {
	if [ -n "$builder" ]; then
		kill "$builder" 2>/dev/null
		wait "$builder" 2>/dev/null
	fi
	rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# build_all builds every package's test binary in the listed order, one at
# a time (go test -c compiles a package's dependencies on both cores), and
# prints "<index> ok|fail|none" as each is done, which the runner below
# reads in turn.
build_all() {
	local i line pkg tests
	for i in "${!pkgs[@]}"; do
		line=${pkgs[$i]}
		pkg=${line%% *}
		line=${line#* }
		tests=${line%% *}
		if [ "$tests" != 1 ]; then
			echo "$i none"
		elif "$GO" test "${build[@]}" -c -o "$dir/$i.test" "$pkg" > "$dir/$i.build" 2>&1; then
			echo "$i ok"
		else
			echo "$i fail"
		fi
	done
}

exec 3< <(build_all)
builder=$!

# builds_at sets the niceness of the builds (scripts/renice-tree.sh: as
# root only).
builds_at() {
	bash "$(dirname "$0")/renice-tree.sh" "$1" "$builder"
}

status=0
seen=0
while true; do
	if ! read -r -t 0 -u 3; then
		builds_at 0 # waiting for a build
	fi
	read -r -u 3 i result || break
	seen=$((seen + 1))
	line=${pkgs[$i]}
	pkg=${line%% *}
	pdir=${line#* }
	pdir=${pdir#* }
	case $result in
	none)
		printf '?   \t%s\t[no test files]\n' "$pkg"
		;;
	fail)
		cat "$dir/$i.build"
		printf 'FAIL\t%s [build failed]\n' "$pkg"
		status=1
		;;
	ok)
		builds_at 19
		start=$EPOCHREALTIME
		(cd "$pdir" && "$dir/$i.test" -test.count=1 -test.timeout=10m0s -test.paniconexit0 "${run[@]}") > "$dir/$i.out" 2>&1 3<&-
		rc=$?
		secs=$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.3f", b - a }')
		if [ "$rc" -eq 0 ]; then
			printf 'ok  \t%s\t%ss\n' "$pkg" "$secs"
		else
			cat "$dir/$i.out"
			printf 'FAIL\t%s\t%ss\n' "$pkg" "$secs"
			status=1
		fi
		rm -f "$dir/$i.test" "$dir/$i.out"
		;;
	esac
done
if [ "$seen" -ne "${#pkgs[@]}" ]; then
	echo "pkgtest: the builds ended after $seen of ${#pkgs[@]} packages" >&2
	status=1
fi
exit "$status"
