#!/bin/sh
# Man pages: every page lints clean (mandoc -T lint -W warning), and every
# option a tool's usage prints appears in its page.
. "$(dirname "$0")/../lib.sh"

if ! command -v mandoc >/dev/null 2>&1; then
	skip "man pages" "mandoc is not installed"
	finish
fi
for page in "$TOP"/man/man1/*.1 "$TOP"/man/man5/*.5 "$TOP"/man/man7/*.7; do
	[ -f "$page" ] || continue
	check "$(basename "$page"): mandoc -T lint -W warning is clean" sh -c "mandoc -T lint -W warning '$page' >'$T/lint' 2>&1 && ! test -s '$T/lint'"
done
for tool in seqsample maskgen kbench cpbench summarize kbench-torch; do
	[ -x "$TOP/bin/$tool" ] || continue
	page=$TOP/man/man1/$tool.1
	if [ ! -f "$page" ]; then
		fail "$tool: has a man page" "no man/man1/$tool.1"
		continue
	fi
	"$TOP/bin/$tool" -h >"$T/help" 2>&1
	mandoc -T ascii "$page" | col -bx >"$T/page"
	opts=$(grep -oE '(^|[][ ,|(])--?[A-Za-z][A-Za-z0-9-]*' "$T/help" | sed 's/^[^-]*//' | sort -u)
	missing=
	for o in $opts; do
		grep -qE -- "(^|[^A-Za-z0-9-])$o([^A-Za-z0-9-]|$)" "$T/page" || missing="$missing $o"
	done
	check "$tool: all $(echo $opts | wc -w) options of its usage are in $tool(1)${missing:+ (missing:$missing)}" test -z "$missing"
done
finish
