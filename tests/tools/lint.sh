#!/bin/sh
# make lint (mandoc -T lint on every page, cppcheck on the C sources) is clean.
. "$(dirname "$0")/../lib.sh"
cd "$TOP" || exit 2
if ! command -v cppcheck >/dev/null || ! command -v mandoc >/dev/null; then
	skip lint "cppcheck or mandoc missing (make deps)"
else
	make -s lint >"$T/lint.out" 2>&1
	check lint test $? -eq 0 || cat "$T/lint.out"
fi
finish
