#!/bin/sh
# summarize: result rows to tables (aligned text, markdown or TSV) and
# gnuplot pictures.  The work is in the awk programs of @AWKDIR@.
AWKDIR=${LONGATTN_AWKDIR:-@AWKDIR@}
# an installed tree that was moved: PREFIX/bin/summarize beside PREFIX/share
here=$(dirname "$0")/../share/longattn/awk
[ -r "$AWKDIR/aggregate.awk" ] || [ ! -r "$here/aggregate.awk" ] || AWKDIR=$here
AWK=${AWK:-awk}
prog=summarize
# bytes, not characters: rows are ASCII, and a damaged one must not pass
# as some locale's text
LC_ALL=C
export LC_ALL

usage() {
	cat >&2 <<'USAGE'
usage: summarize [-f table|md|tsv] [-p PLOTDIR] [FILE...]
  -f FORMAT   table (aligned text, default), md (markdown) or tsv (the aggregate)
  -p PLOTDIR  also draw one PNG and one SVG per (mask, pass) into PLOTDIR
  -h          this help
USAGE
}

die() { echo "$prog: $*" >&2; exit 2; }

fmt=table plotdir=
# silent getopts: the shell's own message would not name the tool
while getopts :f:p:h opt; do
	case $opt in
	f) fmt=$OPTARG ;;
	p) plotdir=$OPTARG ;;
	h) usage; exit 0 ;;
	:) die "-$OPTARG: needs an argument (summarize -h)" ;;
	*) die "-$OPTARG: unknown option (summarize -h)" ;;
	esac
done
shift $((OPTIND - 1))
case $fmt in table|md|tsv) ;; *) die "format: '$fmt' is not table, md or tsv" ;; esac
for f in "$@"; do
	[ "$f" = - ] || [ -r "$f" ] || die "$f: cannot read"
done
[ -r "$AWKDIR/aggregate.awk" ] || die "$AWKDIR: awk programs not found"
if [ -n "$plotdir" ]; then
	command -v gnuplot >/dev/null 2>&1 || die "-p: gnuplot not found"
	mkdir -p "$plotdir" 2>/dev/null && [ -w "$plotdir" ] || die "$plotdir: cannot write"
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/summarize.XXXXXX") || die "cannot make a temporary directory"
trap 'rm -rf "$tmp"' EXIT
trap 'exit 2' HUP INT TERM

want_ms=0
[ "$fmt" = tsv ] && want_ms=1
$AWK -v want_ms=$want_ms -f "$AWKDIR/aggregate.awk" "$@" >"$tmp/agg" || exit 2
in=${*:-stdin}
[ "$in" = - ] && in=stdin
[ "$(wc -l <"$tmp/agg")" -gt 1 ] || die "$in: no result rows"

# the whole table or nothing on stdout
out=$tmp/agg
if [ "$fmt" != tsv ]; then
	out=$tmp/table
	$AWK -v fmt="$fmt" -f "$AWKDIR/table.awk" "$tmp/agg" >"$out" || exit 2
fi
cat "$out" || die "stdout: write error"

if [ -n "$plotdir" ]; then
	term=png
	gnuplot -e 'set terminal pngcairo' >/dev/null 2>&1 && term=pngcairo
	$AWK -v tmp="$tmp" -v dir="$plotdir" -v term="$term" \
	    -f "$AWKDIR/plot.awk" "$tmp/agg" >"$tmp/moves" || exit 2
	if ! gnuplot "$tmp/plots.gp" 2>"$tmp/gnuplot.err"; then
		while IFS='	' read -r from to; do rm -f "$from"; done <"$tmp/moves"
		die "gnuplot failed: $(head -n 1 "$tmp/gnuplot.err")"
	fi
	while IFS='	' read -r from to; do
		mv -f "$from" "$to" || die "$to: cannot write"
		echo "$prog: wrote $to" >&2
	done <"$tmp/moves"
fi
exit 0
