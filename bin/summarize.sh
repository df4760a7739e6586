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
       summarize --compare OLD.tsv NEW.tsv [--threshold PCT]
       summarize --version
  -f FORMAT        table (aligned text, default), md (markdown) or tsv (the aggregate)
  -p PLOTDIR       also draw, as PNG and SVG: a chart per (mask, pass), and the
                   paper's grids fig-fwd, fig-bwd (kernels) and fig-cp-fwd,
                   fig-cp-bwd (CP strategies), a panel per mask
  --compare        NEW/OLD TFLOP/s and memory of the rows both files have;
                   exit 1 if one got slower than PCT% or went from ok to
                   wrong, oom or error
  --threshold PCT  with --compare (default 5)
  -h, --help       this help
  --version        the version, commit and build features
USAGE
}

die() { echo "$prog: $*" >&2; exit 2; }

# Long options first: getopts knows none.
case ${1-} in
--version)
	echo "summarize longattn @VERSION@ (commit @COMMIT@; features @FEATURES@)"
	exit 0 ;;
--help) usage; exit 0 ;;
--compare)
	shift
	thr=5 old= new=
	while [ $# -gt 0 ]; do
		case $1 in
		--threshold)
			[ $# -ge 2 ] || die "--threshold: needs an argument (summarize -h)"
			thr=$2; shift ;;
		-?*) die "$1: unknown option of --compare (summarize -h)" ;;
		*) if [ -z "$old" ]; then old=$1; elif [ -z "$new" ]; then new=$1
		   else die "--compare: '$1': want two files, OLD and NEW"; fi ;;
		esac
		shift
	done
	[ -n "$new" ] || die "--compare: want two files, OLD and NEW"
	case $thr in
	''|.|*[!0-9.]*|*.*.*) die "--threshold: '$thr' is not a percentage" ;;
	esac
	for f in "$old" "$new"; do
		[ -r "$f" ] && [ ! -d "$f" ] || die "$f: cannot read"
	done
	[ -r "$AWKDIR/compare.awk" ] || die "$AWKDIR: awk programs not found"
	exec $AWK -v thr="$thr" -f "$AWKDIR/lib.awk" -f "$AWKDIR/compare.awk" "$old" "$new" ;;
esac

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
$AWK -v want_ms=$want_ms -f "$AWKDIR/lib.awk" -f "$AWKDIR/aggregate.awk" "$@" >"$tmp/agg" || exit 2
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
	# a chart per (mask, pass), then the paper's grids of panels
	for p in plot grid; do
		$AWK -v tmp="$tmp" -v dir="$plotdir" -v term="$term" \
		    -f "$AWKDIR/lib.awk" -f "$AWKDIR/$p.awk" "$tmp/agg" >>"$tmp/moves" || exit 2
	done
	if ! { gnuplot "$tmp/plots.gp" && gnuplot "$tmp/grid.gp"; } 2>"$tmp/gnuplot.err"; then
		while IFS='	' read -r from to; do rm -f "$from"; done <"$tmp/moves"
		die "gnuplot failed: $(head -n 1 "$tmp/gnuplot.err")"
	fi
	while IFS='	' read -r from to; do
		mv -f "$from" "$to" || die "$to: cannot write"
		echo "$prog: wrote $to" >&2
	done <"$tmp/moves"
fi
exit 0
