#!/bin/sh
# Bad input: each case exits 2 with one line on stderr that starts with the
# tool's name and names the input, and leaves no output file behind.
. "$(dirname "$0")/../lib.sh"

# badin NAME OUTFILE NEEDLE CMD...: bad, and the message contains NEEDLE
badin() {
	n=$1 out=$2 needle=$3
	shift 3
	bad "$n" "$out" "$@"
	[ -n "${VERBOSE:-}" ] && sed "s/^/# /" "$T/bad.err"
	if ! grep -qF -- "$needle" "$T/bad.err"; then
		fail "$n: names the input" "no '$needle' in: $(cat "$T/bad.err")"
	fi
}

O=$T/out.amask
maskgen -p causal_document -n 8K -s 1 -o "$T/good.amask"
size=$(wc -c <"$T/good.amask")

# damaged mask files, crafted from a good one
head -c $((size / 2)) "$T/good.amask" >"$T/trunc.amask"
badin "truncated mask file" "" trunc.amask maskgen -c "$T/trunc.amask"
head -c 10 "$T/good.amask" >"$T/short.amask"
badin "mask file shorter than its header" "" short.amask maskgen -i "$T/short.amask"
cp "$T/good.amask" "$T/flip.amask"
b=$(dd if="$T/flip.amask" bs=1 skip=$((size - 40)) count=1 2>/dev/null | od -An -tu1 | tr -d ' ')
printf "$(printf '\\%03o' $(( (b + 1) % 256 )))" | dd of="$T/flip.amask" bs=1 seek=$((size - 40)) conv=notrunc 2>/dev/null
badin "one flipped byte in the body" "" flip.amask maskgen -c "$T/flip.amask"
cp "$T/good.amask" "$T/flip2.amask"
printf 'Z' | dd of="$T/flip2.amask" bs=1 seek=70 conv=notrunc 2>/dev/null
badin "one flipped byte in the pattern name" "" flip2.amask maskgen -c "$T/flip2.amask"
cp "$T/good.amask" "$T/magic.amask"
printf 'XMASK' | dd of="$T/magic.amask" bs=1 seek=0 conv=notrunc 2>/dev/null
badin "wrong magic" "" magic.amask maskgen -c "$T/magic.amask"
cp "$T/good.amask" "$T/version.amask"
printf '\011' | dd of="$T/version.amask" bs=1 seek=8 conv=notrunc 2>/dev/null
badin "wrong version" "" version.amask maskgen -i "$T/version.amask"
cp "$T/good.amask" "$T/long.amask"; printf 'x' >>"$T/long.amask"
badin "trailing garbage" "" long.amask maskgen -c "$T/long.amask"
: >"$T/empty.amask"
badin "empty mask file" "" empty.amask maskgen -c "$T/empty.amask"
badin "missing mask file" "" nosuch.amask maskgen -i "$T/nosuch.amask"
badin "render of a damaged file leaves no picture" "$T/pic.png" trunc.amask maskgen -r "$T/trunc.amask" -o "$T/pic.png"

# custom slice lists
printf '0 10 0 10 full\n5 15 5 15 causal\n' >"$T/overlap.txt"
badin "custom: overlapping slices" "$O" overlap.txt maskgen -p custom -n 100 -f "$T/overlap.txt" -o "$O"
printf '0 10 0 10 full\n20 10 0 5 full\n' >"$T/rev.txt"
badin "custom: q1 < q0" "$O" rev.txt:2 maskgen -p custom -n 100 -f "$T/rev.txt" -o "$O"
printf '0 10 0 10 sideways\n' >"$T/kind.txt"
badin "custom: unknown kind" "$O" kind.txt:1 maskgen -p custom -n 100 -f "$T/kind.txt" -o "$O"
printf '0 10 0 200 full\n' >"$T/oob.txt"
badin "custom: slice outside the sequence" "$O" oob.txt:1 maskgen -p custom -n 100 -f "$T/oob.txt" -o "$O"
badin "custom: missing slice list" "$O" custom maskgen -p custom -n 100 -o "$O"
printf '0 10 0 10 full\000 10 20 10 20 full\n' >"$T/nul.txt"
badin "custom: a NUL byte" "$O" nul.txt:1 maskgen -p custom -n 100 -f "$T/nul.txt" -o "$O"
badin "custom: stdin is named stdin" "$O" stdin:1 maskgen -p custom -n 100 -f - -o "$O" <"$T/kind.txt"

# sizes and parameters
badin "seqlen 0" "$O" "-n" maskgen -p causal -n 0 -o "$O"
badin "seqlen beyond 2^32" "$O" 4G maskgen -p causal -n 4G -o "$O"
badin "seqlen not a number" "$O" 12x maskgen -p causal -n 12x -o "$O"
badin "unknown pattern" "$O" nosuch maskgen -p nosuch -n 1K -o "$O"
badin "missing -n" "$O" "-n" maskgen -p causal -o "$O"
badin "window larger than S" "$O" sliding_window maskgen -p sliding_window -n 1K -w 2K -o "$O"
badin "global tokens beyond S" "$O" global_sliding_window maskgen -p global_sliding_window -n 1K -w 10 -g 2K -o "$O"
badin "prefix beyond S" "$O" prefix_lm_causal maskgen -p prefix_lm_causal -n 1K -P 2K -o "$O"
badin "ratio out of range" "$O" "--ratio" maskgen -p block_sparse_uniform -n 1K --ratio 1.5 -o "$O"
badin "block_causal_document: S not a multiple of the block" "$O" block_causal_document maskgen -p block_causal_document -n 1000 -o "$O"
badin "qk_sparse: overlapping spans" "$O" qk_sparse maskgen -p qk_sparse -n 1K --spans 10:100,50:10 -o "$O"
badin "random_eviction: start row beyond S" "$O" random_eviction maskgen -p random_eviction -n 1K --start-row 2K -o "$O"
badin "unwritable output path" "" /nonexistent/dir/x.amask maskgen -p causal -n 1K -o /nonexistent/dir/x.amask
badin "unknown picture type" "$T/pic.gif" pic.gif maskgen -r "$T/good.amask" -o "$T/pic.gif"

# lengths for -L
printf 'len\n100\n-5\n' >"$T/neg.tsv"
badin "negative length" "$O" neg.tsv:3 maskgen -p causal_document -n 95 -L "$T/neg.tsv" -o "$O"
printf 'len\n100\nabc\n' >"$T/nan.tsv"
badin "non-numeric length" "$O" nan.tsv:3 maskgen -p causal_document -n 100 -L "$T/nan.tsv" -o "$O"
printf 'len\n100\n0\n' >"$T/zero.tsv"
badin "zero length" "$O" zero.tsv:3 maskgen -p causal_document -n 100 -L "$T/zero.tsv" -o "$O"
printf 'len\n100\n200\n' >"$T/sum.tsv"
badin "lengths not summing to S" "$O" sum.tsv maskgen -p causal_document -n 1K -L "$T/sum.tsv" -o "$O"
badin "empty stdin for -L -" "$O" "stdin:" maskgen -p causal_document -n 1K -L - -o "$O" </dev/null
badin "-L for a pattern without documents" "$O" causal maskgen -p causal -n 1K -L "$T/sum.tsv" -o "$O"
badin "-d for a pattern without documents" "$O" "-d" maskgen -p causal -n 1K -d pile -o "$O"
badin "-L and -d together" "$O" "-L" maskgen -p causal_document -n 300 -L "$T/sum.tsv" -d pile -o "$O"

# seqsample and its histograms
S=$T/out.tsv
printf 'lo\thi\tweight\n10\t5\t1\n' >"$T/h1.tsv"
badin "histogram: lo >= hi" "$S" h1.tsv:2 seqsample -d "$T/h1.tsv" -n 1K -o "$S"
printf '10 20 -1\n' >"$T/h2.tsv"
badin "histogram: negative weight" "$S" h2.tsv:1 seqsample -d "$T/h2.tsv" -n 1K -o "$S"
printf '10 20 0\n20 30 0\n' >"$T/h3.tsv"
badin "histogram: weights sum to zero" "$S" h3.tsv seqsample -d "$T/h3.tsv" -n 1K -o "$S"
printf '10 20 1\nten 20 1\n' >"$T/h4.tsv"
badin "histogram: non-numeric field" "$S" h4.tsv:2 seqsample -d "$T/h4.tsv" -n 1K -o "$S"
printf '10 20\n' >"$T/h5.tsv"
badin "histogram: missing field" "$S" h5.tsv:1 seqsample -d "$T/h5.tsv" -n 1K -o "$S"
printf '1 2 1e308\n2 3 1e308\n' >"$T/h6.tsv"
badin "histogram: weights sum to infinity" "$S" h6.tsv seqsample -d "$T/h6.tsv" -n 1K -o "$S"
badin "histogram: empty" "$S" /dev/null seqsample -d /dev/null -n 1K -o "$S"
badin "unknown built-in histogram" "$S" nosuchdist seqsample -d nosuchdist -n 1K -o "$S"
badin "seqsample: total 0" "$S" "-n" seqsample -n 0 -o "$S"
badin "seqsample: total beyond 2^32" "$S" "-n" seqsample -n 5000000000 -o "$S"
badin "seqsample: missing -n" "$S" "-n" seqsample -d pile -o "$S"
printf '5\n-3\n' >"$T/l.txt"
badin "seqsample --hist: negative length" "$S" l.txt:2 seqsample -H "$T/l.txt" -o "$S"
badin "seqsample --hist: empty stdin" "$S" "stdin:" seqsample -H -o "$S" </dev/null
badin "seqsample: unwritable output" "" /nonexistent/dir/l.tsv seqsample -n 1K -o /nonexistent/dir/l.tsv
finish
