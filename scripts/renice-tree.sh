#!/usr/bin/env bash
# renice-tree sets the niceness of a process and of every process under
# it: renice-tree.sh <niceness> <pid>. A process forked from then on
# inherits its parent's niceness, so a go command's later compiles and
# links follow it. Run by another user than root it does nothing, and
# says nothing: only root may lower a niceness, and a tree niced once
# could not be brought back.
set -u
if [ "$#" -ne 2 ]; then
	echo "renice-tree: usage: renice-tree.sh <niceness> <pid>" >&2
	exit 2
fi
[ "$(id -u)" -eq 0 ] || exit 0

# tree prints the processes under $1, depth first.
tree() {
	local p
	for p in $(pgrep -P "$1"); do
		echo "$p"
		tree "$p"
	done
}

renice -n "$1" -p "$2" $(tree "$2") > /dev/null 2>&1
exit 0
