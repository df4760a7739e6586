#!/bin/sh
# summarize -p: the paper's grids beside the per-(mask, pass) charts.
# Checked from the SVG gnuplot writes: a panel per mask (its title, in the
# panels' font size), laid out in a grid (distinct columns and rows, axis
# labels on the left column and the bottom row), the key, the E / X / !
# marks, the CP figure's series; the PNG's magic; nothing left half-drawn.
. "$(dirname "$0")/../lib.sh"
F=$TOP/tests/fixtures
K=$F/kbench-h200.tsv C=$F/cpbench-h200.tsv

if ! command -v gnuplot >/dev/null 2>&1; then
	skip "summarize -p grids" "no gnuplot"
	finish
fi
panels() { grep -c 'font-size="14.00"' "$1"; }
# the texts of an SVG, one per line
texts() { sed -n 's:.*<text>\(.*\)</text>.*:\1:p' "$1"; }

summarize -p "$T/p" "$K" "$C" >/dev/null 2>"$T/err"
check "summarize -p exits 0" [ $? -eq 0 ]
for f in fig-fwd fig-bwd fig-cp-fwd; do
	check "$f.png and $f.svg written, and said so" sh -c "test -s '$T/p/$f.png' && test -s '$T/p/$f.svg' && grep -q 'wrote $T/p/$f.svg' '$T/err'"
done
check "no fig-cp-bwd without cpbench bwd rows" test ! -e "$T/p/fig-cp-bwd.svg"
check "fig-fwd.png is a PNG" sh -c "head -c 8 '$T/p/fig-fwd.png' | od -An -c | grep -q 'P   N   G'"
check "no temporary pictures left" sh -c "! ls -a '$T/p' | grep -q tmp"
texts "$T/p/fig-fwd.svg" >"$T/fwd"
texts "$T/p/fig-bwd.svg" >"$T/bwd"
texts "$T/p/fig-cp-fwd.svg" >"$T/cp"
check "fig-fwd: two panels (causal, sliding_window)" [ "$(panels "$T/p/fig-fwd.svg")" -eq 2 ]
check "fig-fwd: the panels' titles are the masks" sh -c "grep -qx causal '$T/fwd' && grep -qx sliding_window '$T/fwd'"
check "fig-bwd: one panel" [ "$(panels "$T/p/fig-bwd.svg")" -eq 1 ]
check "fig-fwd: the key names every kernel" sh -c "for k in naive flash cudnn cpu; do grep -qx \$k '$T/fwd' || exit 1; done"
check "fig-fwd: the OOM cell is E, the unsupported one X" sh -c "grep -qx E '$T/fwd' && grep -qx X '$T/fwd'"
check "fig-bwd: the wrong cell is !, the error one E" sh -c "grep -qx '!' '$T/bwd' && grep -qx E '$T/bwd'"
check "fig-fwd: axis labels with units" sh -c "grep -qx 'TFLOP/s' '$T/fwd' && grep -qx 'sequence length (tokens)' '$T/fwd'"
check "fig-fwd: the shape and device in the title" grep -q 'heads 64:8, head_dim 128, bf16, batch 1, NVIDIA H200' "$T/fwd"
check "fig-fwd: the stack in the title" grep -q 'driver=580.159.03 cuda=13.0' "$T/fwd"
check "fig-cp-fwd: one panel (full)" sh -c "[ \$(grep -c 'font-size=\"14.00\"' '$T/p/fig-cp-fwd.svg') -eq 1 ] && grep -qx full '$T/cp'"
check "fig-cp-fwd: per-GPU TFLOP/s over GPUs" sh -c "grep -qx 'TFLOP/s per GPU' '$T/cp' && grep -qx 'GPUs (world size)' '$T/cp'"
check "fig-cp-fwd: a series per strategy and tokens per GPU" sh -c "grep -qx 'ring_p2p 8K/GPU' '$T/cp' && grep -qx 'ring_p2p 16K/GPU' '$T/cp' && grep -qx 'ulysses 8K/GPU' '$T/cp'"
check "fig-cp-fwd: the OOM point is E" grep -qx E "$T/cp"

# Seven masks: a 3x3 grid, two cells empty.  Panel titles in 3 columns and
# 3 rows; the y label on the left column, the x label on each column's
# lowest panel.
awk -F'\t' -v OFS='\t' 'NR == 1 { print; next } $2 == "flash" && $12 == "fwd" {
	for (i = 1; i <= 7; i++) { $3 = "mask" i; print } }' "$K" >"$T/seven.tsv"
summarize -p "$T/q" "$T/seven.tsv" >/dev/null 2>&1
S=$T/q/fig-fwd.svg
check "seven masks: seven panels" [ "$(panels "$S")" -eq 7 ]
check "seven masks: each mask's panel once" sh -c "for i in 1 2 3 4 5 6 7; do [ \$(sed -n 's:.*<text>\\(.*\\)</text>.*:\\1:p' '$S' | grep -cx mask\$i) -eq 1 ] || exit 1; done"
grep -A1 'font-size="14.00"' "$S" | sed -n 's/.*translate(\([0-9.]*\),\([0-9.]*\)).*/\1 \2/p' >"$T/xy"
check "seven masks: panels in 3 columns" [ "$(cut -d' ' -f1 "$T/xy" | sort -u | wc -l)" -eq 3 ]
check "seven masks: panels in 3 rows" [ "$(cut -d' ' -f2 "$T/xy" | sort -u | wc -l)" -eq 3 ]
check "seven masks: y label on the 3 rows' left panels" [ "$(texts "$S" | grep -cx 'TFLOP/s')" -eq 3 ]
check "seven masks: x label under the 3 columns" [ "$(texts "$S" | grep -cx 'sequence length (tokens)')" -eq 3 ]
check "seven masks: no bwd grid without bwd rows" test ! -e "$T/q/fig-bwd.svg"
finish
