#!/bin/sh
# GPU tests and benchmarks of one kernel through kbench: $KERN (default
# flash; hopper too), the passes in $PASSES (default fwd,bwd).
#   kern.sh [check]    kbench --check -k $KERN over every maskgen pattern at
#                      S = 1000 (1024 where the pattern needs blocks), fwd and
#                      bwd, GQA 8:2 and MHA 4:4, bf16 and fp16, hd 64 and 128,
#                      odd lengths (3001), batch 2, and k-tiles split among
#                      CTAs (causal, share_question at 4K; hopper: and
#                      left whole under its switch), causal bwd
#                      at 8K (hopper: a CTA per k-tile and q-head), causal
#                      documents and buckets at 4K (hopper: q-major
#                      walks; and dQ converted by the CTAs under fuse and
#                      fusez; 64-key k-tiles forced on every pattern;
#                      fwd's half tiles forced on every pattern, and off):
#                      logits eight times wider (--qscale 8) on every
#                      fwd path: every row ok, a bwd row's second run
#                      checked too where its bits differ;
#                      a kernel that lists det (kbench -l) also runs its
#                      deterministic bwd twice a row: the same bits.
#   kern.sh quick       a shorter check (every pattern bf16 8:2 hd128, odd
#                      lengths, split k-tiles at 4K) and $KERN alone on
#                      full/causal at 16K/32K and five sparse patterns at 32K
#   kern.sh bench      kbench -k $KERN$WITH on full and causal at 8K-32K and
#                      $KERN on every other pattern at 32K (64:8, hd 128, bf16)
#   kern.sh sass       instruction counts per kernel from cuobjdump (HMMA,
#                      LDSM, LDGSTS, local-memory spills, reductions; all
#                      of them, the uniform datapath's, R2UR)
#   kern.sh matrix     the paper's matrix: every pattern x S in 1..48K,
#                      fwd and bwd, $KERN$WITH ($MXW warm-up, $MXN timed)
#   kern.sh ab         an A/B of the kernel's switches: AB="NAME=ENV ..."
#                      (ENV: VAR=value pairs joined by commas, or nothing
#                      for the build's default; @REV: commit REV's build,
#                      or a source tree's, made first), one kbench process per
#                      round, mask and variant, $ROUNDS (2) rounds
#                      interleaved, $KERN$WITH, on $ABMASKS (mask files;
#                      default: causal and full documents of 1K tokens on
#                      tile edges, pile and --long causal documents at 32K,
#                      full 8K, full 64K (past L2: 1 warm-up, 3 timed),
#                      causal 32K, hash_sparse and the window (-w 1638) at
#                      16K; all: every pattern at 32K), $ABARGS added to
#                      kbench's (e.g. "-D 64 -t fp16"); rows with round and
#                      variant first in $KERN-ab.tsv
# Rows go to $OUT (default build/) as $KERN-check.tsv, $KERN-bench.tsv,
# $KERN-matrix.tsv; kbench's -v lines to the matching .err file.
# tests/gpu/flash.sh is this script with KERN=flash.
set -u
cd "$(dirname "$0")/../.." || exit 2
. tests/gpu/ab.sh
OUT=${OUT:-build}
KERN=${KERN:-flash}
PASSES=${PASSES:-fwd,bwd}
WITH=${WITH-,naive}              # the kernels bench and matrix run beside $KERN
KBENCH=${KBENCH:-bin/kbench}
TMO=${TMO:-240}                   # seconds for one kbench run: a hang is a failure
MASKGEN=${MASKGEN:-bin/maskgen}
M=build/kern-masks
mode=${1:-check}
mkdir -p "$M" "$OUT"
[ -x "$KBENCH" ] && [ -x "$MASKGEN" ] || { echo "not ok $KERN: build kbench and maskgen first"; exit 1; }

# gen NAME S [maskgen options]: the pattern NAME at S tokens into $M/NAME.S.amask
gen() {
	p=$1 n=$2; shift 2
	[ -s "$M/$p.$n.amask" ] && return 0
	"$MASKGEN" -p "$p" -n "$n" -s 3 "$@" -o "$M/$p.$n.amask" || { echo "not ok $KERN maskgen $p $n"; rc=1; }
}

# every pattern at about S tokens, with windows and blocks scaled to S
allmasks() {
	n=$1
	for p in full causal full_document causal_document share_question causal_blockwise \
	    prefix_lm_causal prefix_lm_document qk_sparse hash_sparse random_eviction; do
		gen $p $n
	done
	gen sliding_window $n -w $((n / 10))
	gen sliding_window_causal $n -w $((n / 10))
	gen global_sliding_window $n -w $((n / 10)) -g $((n / 25))
	gen block_sparse_uniform $n -B 64 -H 2 --ratio 0.3
	gen block_sparse_variable $n -H 2 --min-block 32 --avg-block $((n / 10)) --ratio 0.4
	b=$(( (n + 7) / 8 ))
	gen block_causal_document $((b * 8)) -B $b
	h=$((n / 2)) f=$((n / 5))
	printf '0 %d 0 %d full\n%d %d %d %d causal\n%d %d %d %d bicausal\n%d %d %d %d invcausal\n' \
	    $h $((3 * f / 2)) $h $n $f $((h + f)) $((f / 2)) $((2 * f)) $h $((n - f)) \
	    $((h + h / 5)) $n $((n - f)) $n >"$M/custom.$n.txt"
	gen custom $n -f "$M/custom.$n.txt"
}

# rows FILE TAG: ok/not ok per row of a kbench TSV (status must be ok)
rows() {
	awk -F'\t' -v tag="$2" -v kern="$KERN" '
	    NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
	    { t = kern " " $c["mask"] " " $c["seqlen_q"] " " $c["pass"] " " $c["dtype"] " " \
	          $c["heads_q"] ":" $c["heads_kv"] " hd" $c["head_dim"] " b" $c["batch"] tag
	      if ($c["status"] == "ok") print "ok " t; else { print "not ok " t ": " $c["status"]; bad = 1 } }
	    END { exit bad }' "$1"
}

# kb TAG KBENCH-ARGS...: one kbench --check run, appended to $KERN-check.*
kb() {
	tag=$1; shift
	timeout $TMO "$KBENCH" --check -v -k $KERN -p $PASSES -w 1 -n 2 "$@" >"$OUT/kb.tsv" 2>>"$OUT/$KERN-check.err"
	[ -s "$OUT/kb.tsv" ] || { echo "not ok $KERN $tag: kbench wrote nothing"; rc=1; return; }
	if [ -s "$OUT/$KERN-check.tsv" ]; then tail -n +2 "$OUT/kb.tsv" >>"$OUT/$KERN-check.tsv"
	else cp "$OUT/kb.tsv" "$OUT/$KERN-check.tsv"; fi
	rows "$OUT/kb.tsv" "" || rc=1
	rm -f "$OUT/kb.tsv"
}

# check and quick: a fresh $KERN-check.*, every pattern at 1000, odd
# lengths at 3001, and two at 4096 for the split k-tiles
checkmasks() {
	: >"$OUT/$KERN-check.err"
	rm -f "$OUT/$KERN-check.tsv"
	allmasks 1000
	for p in causal causal_document sliding_window block_sparse_variable; do
		gen $p 3001 -w 300 -H 2 --min-block 32 --avg-block 300 --ratio 0.4
	done
	gen causal 4096
	gen share_question 4096
	gen full 8192
}

# force FWD BWD: the rows that follow run hopper's switches FWD and BWD
# (comma lists, either empty) on top of what the caller's environment
# forces, so that a whole check can run under a variant
# (LONGATTN_HOPPER_BWD=x sh kern.sh check); force "" "" goes back to it
FWD0=${LONGATTN_HOPPER_FWD:-} BWD0=${LONGATTN_HOPPER_BWD:-}
force() {
	fw=$FWD0${FWD0:+${1:+,}}$1 bw=$BWD0${BWD0:+${2:+,}}$2
	if [ -n "$fw" ]; then export LONGATTN_HOPPER_FWD="$fw"; else unset LONGATTN_HOPPER_FWD; fi
	if [ -n "$bw" ]; then export LONGATTN_HOPPER_BWD="$bw"; else unset LONGATTN_HOPPER_BWD; fi
}

rc=0
case $mode in
check)
	checkmasks
	kb "bf16 8:2 hd128" -t bf16 -H 8:2 -D 128 $M/*.1000.amask
	kb "fp16 4:4 hd64" -t fp16 -H 4:4 -D 64 $M/*.1000.amask
	kb "bf16 8:2 hd64" -t bf16 -H 8:2 -D 64 $M/causal.1000.amask $M/full_document.1000.amask \
	    $M/block_sparse_uniform.1000.amask
	kb "fp16 8:2 hd128" -t fp16 -H 8:2 -D 128 $M/causal.1000.amask $M/share_question.1000.amask \
	    $M/block_sparse_variable.1000.amask
	kb "odd bf16 4:4 hd64" -t bf16 -H 4:4 -D 64 $M/*.3001.amask
	kb "odd fp16 4:1 hd128" -t fp16 -H 4:1 -D 128 $M/causal.3001.amask $M/sliding_window.3001.amask
	kb "batch 2" -t bf16 -H 8:2 -D 128 -b 2 $M/causal.1000.amask $M/prefix_lm_document.1000.amask
	# walks longer than 64 q-tiles are split among CTAs at this size
	kb "split fp16 4:2 hd64" -t fp16 -H 4:2 -D 64 $M/causal.4096.amask $M/share_question.4096.amask
	# causal rows of 128 q-tiles: hopper's bwd runs a CTA per (k-tile, q-head)
	gen causal 8192
	kb "per-head fp16 4:2 hd64" -p bwd -t fp16 -H 4:2 -D 64 $M/causal.8192.amask
	# its walks go up rows all alike (full) and down rows that differ
	# (causal): each forced the other way
	force "" ph1,desc
	kb "per-head desc bf16 8:2 hd128" -p bwd -t bf16 -H 8:2 -D 128 $M/full.1000.amask
	force "" ph1,asc
	kb "per-head asc bf16 8:2 hd128" -p bwd -t bf16 -H 8:2 -D 128 $M/causal.1000.amask
	# ascending walks in stretches (of 256 q-tiles by default, here 4),
	# the last one short, on an odd length and with batch 2
	gen full 3001
	force "" ph1,hseg4
	kb "per-head stretches bf16 8:2 hd128" -p bwd -t bf16 -H 8:2 -D 128 $M/full.1000.amask $M/full.3001.amask
	kb "per-head stretches batch 2 fp16 4:2 hd64" -p bwd -t fp16 -H 4:2 -D 64 -b 2 $M/full.1000.amask
	force "" ""
	# a document of 12K tokens beside one of 1K: rows of 192 q-tiles that
	# end before the last, a CTA per (k-tile, q-head) too (hopper's PHW)
	printf 'len\n12288\n1024\n' >"$M/doc12k.len"
	gen full_document 13312 -L "$M/doc12k.len"
	kb "per-head docs fp16 4:2 hd64" -p bwd -t fp16 -H 4:2 -D 64 $M/full_document.13312.amask
	# scattered rows of a two-head mask (64 runs a k-tile): hopper's bwd
	# walks them in stretches of 128 q-tiles, listed stretch by stretch
	gen block_sparse_uniform 8192 -B 64 -H 2 --ratio 0.3
	kb "stretches bf16 8:2 hd128" -p bwd -t bf16 -H 8:2 -D 128 $M/block_sparse_uniform.8192.amask
	# causal documents and hash buckets: hopper's bwd walks each k-tile's
	# row from its last q-tile down, every q-head at a q-tile before the
	# next (hb_qm), by default on these two; forced on the small masks,
	# the odd lengths and the split walks
	printf 'len\n512\n512\n512\n512\n512\n512\n512\n512\n' >"$M/doc512.len"
	gen causal_document 4096 -L "$M/doc512.len"
	gen hash_sparse 4096 --buckets 4
	kb "q-major bf16 8:2 hd128" -p bwd -t bf16 -H 8:2 -D 128 $M/causal_document.4096.amask \
	    $M/hash_sparse.4096.amask
	# documents of about 47 q-tiles, eight q-heads a kv-head: walks of
	# up to 384 tiles, in stretches of 64 (qm_seg's, forced: by default
	# only where there are more k-tiles than this has)
	gen hash_sparse 6000 --buckets 2
	force "" seg
	kb "q-major stretches bf16 8:1 hd128" -p bwd -t bf16 -H 8:1 -D 128 $M/hash_sparse.6000.amask
	force "" qm
	kb "q-major fp16 4:2 hd64" -p bwd -t fp16 -H 4:2 -D 64 $M/*.1000.amask $M/*.3001.amask \
	    $M/share_question.4096.amask
	force "" ""
	# partial tiles masked from the cuts, where by default the keys'
	# query intervals mask them, both tile widths
	force "" cuts
	kb "cuts bf16 8:2 hd128" -p bwd -t bf16 -H 8:2 -D 128 $M/*.1000.amask $M/*.3001.amask
	force "" cuts,b64
	kb "cuts b64 fp16 4:2 hd128" -p bwd -t fp16 -H 4:2 -D 128 $M/*.1000.amask
	force "" ""
	# the split walks left whole (an A/B switch of hopper's bwd)
	force "" whole
	kb "whole fp16 4:2 hd64" -p bwd -t fp16 -H 4:2 -D 64 $M/causal.4096.amask $M/share_question.4096.amask
	force "" ""
	# dQ converted by the CTA whose adds complete a tile (hopper's fuse:
	# the workspace dropped from L2; fusez: left zero for the next pass,
	# which kbench's second run of a row checks), on q-major, split and
	# padded walks and a batch of 2
	force "" fuse
	kb "fuse bf16 8:2 hd128" -p bwd -t bf16 -H 8:2 -D 128 $M/*.1000.amask $M/*.3001.amask \
	    $M/causal_document.4096.amask $M/hash_sparse.4096.amask $M/share_question.4096.amask
	force "" fusez,pad
	kb "fusez fp16 4:2 hd64" -p bwd -t fp16 -H 4:2 -D 64 $M/*.1000.amask $M/*.3001.amask \
	    $M/causal.4096.amask $M/causal_document.4096.amask
	force "" fusez,qm
	kb "fusez q-major batch 2" -p bwd -t bf16 -H 8:2 -D 128 -b 2 $M/causal_document.1000.amask \
	    $M/hash_sparse.1000.amask $M/causal_document.3001.amask
	force "" ""
	# a 64-key half of a k-tile that sees nothing of a q-tile skips it
	# (forced here on every mask; by default where a quarter of the
	# tiles have such a half), per-head CTAs and split walks included
	force "" half,ph1,phall
	kb "half bf16 8:2 hd128" -p bwd -t bf16 -H 8:2 -D 128 $M/*.1000.amask $M/*.3001.amask
	kb "half fp16 4:2 hd64" -p bwd -t fp16 -H 4:2 -D 64 $M/*.1000.amask $M/causal.4096.amask \
	    $M/block_sparse_uniform.8192.amask
	force "" ""
	# 64-key k-tiles, the two consumers taking q-tiles in turns (hd 128;
	# by default where they visit under 75 % of the 64x128 plan's area:
	# 64-token block masks), forced on every mask, odd lengths, split
	# walks, padded plans, q-major walks, per-head stretches, batch 2
	force "" b64
	kb "b64 bf16 8:2 hd128" -p bwd -t bf16 -H 8:2 -D 128 $M/*.1000.amask $M/*.3001.amask \
	    $M/block_sparse_uniform.8192.amask
	kb "b64 fp16 4:1 hd128" -p bwd -t fp16 -H 4:1 -D 128 $M/*.1000.amask $M/causal.4096.amask \
	    $M/share_question.4096.amask
	force "" b64,pad,qm
	kb "b64 padded q-major batch 2" -p bwd -t bf16 -H 8:2 -D 128 -b 2 $M/causal_document.1000.amask \
	    $M/hash_sparse.1000.amask $M/causal_document.3001.amask
	force "" b64,ph1,hseg4
	kb "b64 per-head stretches" -p bwd -t bf16 -H 8:2 -D 128 $M/full.1000.amask $M/full.3001.amask \
	    $M/causal.1000.amask
	# the pass in parts of the kv-heads, each part's prep and dQ
	# conversion beside another part's tiles (hopper's split): every
	# pattern, odd lengths, hd 64 with a batch of 2, 64-key k-tiles
	force "" split2
	kb "split2 bf16 8:2 hd128" -p bwd -t bf16 -H 8:2 -D 128 $M/*.1000.amask $M/*.3001.amask \
	    $M/causal.4096.amask
	force "" split4,os8
	kb "split4 fp16 8:4 hd64 batch 2" -p bwd -t fp16 -H 8:4 -D 64 -b 2 $M/causal_document.1000.amask \
	    $M/hash_sparse.1000.amask $M/causal_document.3001.amask $M/share_question.4096.amask
	force "" split8,b64,os32
	kb "split8 b64 bf16 8:8 hd128" -p bwd -t bf16 -H 8:8 -D 128 $M/causal_document.1000.amask \
	    $M/block_sparse_uniform.8192.amask $M/full.1000.amask
	force "" split2
	kb "split2 bf16 8:2 hd128 batch 2" -p bwd -t bf16 -H 8:2 -D 128 -b 2 $M/causal_document.1000.amask \
	    $M/causal_document.3001.amask $M/full.1000.amask $M/hash_sparse.1000.amask
	force "" ""
	# fwd's loop (CTAs that stay, taking fwd's blocks one after another)
	# on 6 CTAs, so that each takes many: one CTA a block (grid, from a
	# counter) and CTA pairs (cluster, a wave at a time), 128- and 176-key
	# tiles, batch 2, and the tail split in three
	force loopfew,grid,k128 ""
	kb "loop grid bf16 8:2 hd128" -p fwd -t bf16 -H 8:2 -D 128 $M/*.1000.amask $M/*.3001.amask
	force loopfew,cluster,k176 ""
	kb "loop cluster k176 fp16 8:2 hd128 batch 2" -p fwd -t fp16 -H 8:2 -D 128 -b 2 $M/*.1000.amask \
	    $M/*.3001.amask
	force loopfew,grid,k176,split ""
	kb "loop grid k176 split fp16 4:1 hd128" -p fwd -t fp16 -H 4:1 -D 128 $M/*.1000.amask $M/*.3001.amask
	force loopfew,cluster,k128,split ""
	kb "loop cluster split bf16 8:2 hd128 batch 2" -p fwd -t bf16 -H 8:2 -D 128 -b 2 $M/*.1000.amask
	force loopfew,cluster,k176,q2 ""
	kb "loop two Q halves k176 bf16 8:2 hd128" -p fwd -t bf16 -H 8:2 -D 128 $M/*.1000.amask
	force loopfew ""
	kb "loop full 8K bf16 2:1 hd128" -p fwd -t bf16 -H 2:1 -D 128 $M/full.8192.amask
	force "" ""
	# documents on tile edges: hopper plans the mask with gaps (forced
	# here wherever a mask has them; by default where that visits no more
	# tiles), the bwd's long walks split at 4096
	force pad pad
	kb "padded bf16 8:2 hd128" -p fwd,bwd -t bf16 -H 8:2 -D 128 $M/*.1000.amask $M/*.3001.amask
	kb "padded fp16 4:2 hd64" -p fwd,bwd -t fp16 -H 4:2 -D 64 $M/*.1000.amask $M/causal_document.3001.amask \
	    $M/share_question.4096.amask
	# the same on the fwd's 128-row tiles (a CTA a q-tile, and CTA pairs)
	force grid,pad pad
	kb "padded grid bf16 8:2 hd128" -p fwd -t bf16 -H 8:2 -D 128 $M/full_document.1000.amask \
	    $M/causal_document.3001.amask $M/prefix_lm_document.1000.amask
	force gather,pad pad
	kb "padded gather bf16 8:2 hd128" -p fwd -t bf16 -H 8:2 -D 128 $M/full_document.1000.amask \
	    $M/causal_document.3001.amask $M/hash_sparse.1000.amask
	force pair64,pad pad
	kb "padded pair64 fp16 4:2 hd64" -p fwd -t fp16 -H 4:2 -D 64 $M/full_document.1000.amask \
	    $M/prefix_lm_document.1000.amask
	force cluster,pad pad
	kb "padded cluster bf16 8:2 hd128" -p fwd -t bf16 -H 8:2 -D 128 $M/full_document.1000.amask \
	    $M/causal_document.3001.amask $M/share_question.1000.amask
	# bitmask tiles (random_eviction's) on fwdp's 64-key tiles, gathered
	# in pairs and not
	force gather ""
	kb "bitmasks gather bf16 8:2 hd128" -p fwd -t bf16 -H 8:2 -D 128 $M/random_eviction.1000.amask
	force pair64 ""
	kb "bitmasks pair64 fp16 4:2 hd128" -p fwd -t fp16 -H 4:2 -D 128 $M/random_eviction.1000.amask
	# half tiles (fwdp's head pairs on 64 x 128 tiles: a tile whose keys
	# lie in one 64-key half runs that half alone), forced on every
	# pattern, masked from intervals and from cuts, padded, wide logits;
	# and kept off; the why line says some tile ran as a half
	force pair,half,why ""
	kb "half tiles bf16 8:2 hd128" -p fwd -t bf16 -H 8:2 -D 128 $M/*.1000.amask $M/*.3001.amask
	if [ "$KERN" = hopper ] && ! grep -q "fwd: [1-9][0-9]* of [0-9]* tiles are half tiles" "$OUT/$KERN-check.err"; then
		echo "not ok $KERN half: no tile ran as a half"; rc=1
	fi
	force pair,half,cuts,pad ""
	kb "half tiles cuts padded fp16 8:2 hd128 batch 2" -p fwd -t fp16 -H 8:2 -D 128 -b 2 $M/*.1000.amask
	force pair,half ""
	kb "half tiles qscale 8" --qscale 8 -p fwd -t bf16 -H 4:2 -D 128 $M/*.1000.amask $M/*.3001.amask
	force pair,nohalf ""
	kb "no half tiles bf16 8:2 hd128" -p fwd -t bf16 -H 8:2 -D 128 $M/*.1000.amask
	force "" ""
	# documents under a tile (48-127 tokens), each on a k-tile of its own
	# and one or two q-tiles: hopper's bwd writes dQ from its consumers,
	# no workspace (solo), on an odd length, hd 64, batch 2 and wide
	# logits; its why line says it took that path
	short_lens 2999 >"$M/short.len"
	gen full_document 2999 -L "$M/short.len"
	gen causal_document 2999 -L "$M/short.len"
	force "" why
	kb "solo bf16 8:2 hd128" -p bwd -t bf16 -H 8:2 -D 128 $M/*_document.2999.amask
	kb "solo fp16 4:2 hd64 batch 2" -p bwd -t fp16 -H 4:2 -D 64 -b 2 $M/*_document.2999.amask
	kb "solo qscale 8" --qscale 8 -p bwd -t bf16 -H 8:2 -D 128 $M/*_document.2999.amask
	if [ "$KERN" = hopper ] && ! grep -q "bwd: solo" "$OUT/$KERN-check.err"; then
		echo "not ok $KERN solo: the bwd did not take it on documents under a tile"; rc=1
	fi
	force "" ""
	# 176-key tiles (hopper's fwd and CTA pairs at hd 128) where they
	# visit little more than 128-key tiles (full, causal), ragged ends,
	# batch 2; and under its k176 switch wherever no tile has many cuts
	# (every pattern)
	force grid ""
	kb "k176 grid bf16 8:2 hd128" -p fwd -t bf16 -H 8:2 -D 128 $M/full.1000.amask $M/full.3001.amask \
	    $M/causal.1000.amask
	force cluster ""
	kb "k176 cluster fp16 8:2 hd128 batch 2" -p fwd -t fp16 -H 8:2 -D 128 -b 2 $M/full.1000.amask \
	    $M/full.3001.amask
	force k176,grid ""
	kb "k176 forced grid bf16 8:2 hd128" -p fwd -t bf16 -H 8:2 -D 128 $M/*.1000.amask $M/*.3001.amask
	force k176,cluster ""
	kb "k176 forced cluster fp16 4:1 hd128 batch 2" -p fwd -t fp16 -H 4:1 -D 128 -b 2 $M/*.1000.amask \
	    $M/causal.3001.amask $M/sliding_window.3001.amask
	# the fwd's split tail: a grid's last q-tiles as parts merged by
	# combine() (by default where the last wave is short: full 8K on one
	# head; forced in three on every pattern, a grid under one wave)
	force grid ""
	kb "split grid bf16 1:1 hd128" -p fwd -t bf16 -H 1:1 -D 128 $M/full.8192.amask
	force split,grid ""
	kb "split forced grid bf16 8:2 hd128" -p fwd -t bf16 -H 8:2 -D 128 $M/*.1000.amask $M/*.3001.amask
	kb "split forced grid fp16 4:4 hd64" -p fwd -t fp16 -H 4:4 -D 64 $M/*.1000.amask $M/causal.3001.amask
	force split,k176,cluster ""
	kb "split k176 forced cluster fp16 4:1 hd128 batch 2" -p fwd -t fp16 -H 4:1 -D 128 -b 2 $M/*.1000.amask \
	    $M/causal.3001.amask $M/sliding_window.3001.amask
	# logits eight times wider (--qscale 8): rows' maxima move from tile
	# to tile, so the fwd's lazy offset moves and O's rescale runs, on
	# every fwd path (hopper_fwd.cuh's softmax)
	force "" ""
	kb "qscale 8 bf16 8:2 hd128" --qscale 8 -t bf16 -H 8:2 -D 128 $M/*.1000.amask $M/causal.3001.amask \
	    $M/full.8192.amask
	kb "qscale 8 fp16 4:4 hd64" --qscale 8 -t fp16 -H 4:4 -D 64 $M/*.1000.amask
	# cuts: partial tiles masked from their cuts where by default the
	# rows' intervals mask them (every one-head interval mask)
	paths=
	[ "$KERN" = hopper ] && paths="grid cluster gather pair64 loopfew,cluster,k176 loopfew,grid,k176,split split,grid cuts"
	for v in $paths; do
		force $v ""
		kb "qscale 8 $v bf16 8:2 hd128" -p fwd --qscale 8 -t bf16 -H 8:2 -D 128 $M/*.1000.amask \
		    $M/causal.3001.amask
	done
	force "" ""
	if "$KBENCH" -l | awk -v k="$KERN" '$1 == k && $2 ~ /(^|,)det(,|$)/ { f = 1 } END { exit !f }'; then
		kb "det bf16 8:2 hd128" -p bwd --deterministic -t bf16 -H 8:2 -D 128 $M/causal.1000.amask \
		    $M/full.1000.amask $M/random_eviction.1000.amask $M/causal_document.1000.amask
		kb "det fp16 4:2 hd64" -p bwd --deterministic -t fp16 -H 4:2 -D 64 $M/causal.4096.amask \
		    $M/share_question.4096.amask $M/sliding_window.3001.amask
	fi
	;;
quick)
	checkmasks
	kb "bf16 8:2 hd128" -t bf16 -H 8:2 -D 128 $M/*.1000.amask
	kb "odd bf16 4:4 hd64" -t bf16 -H 4:4 -D 64 $M/*.3001.amask
	kb "fp16 8:2 hd128" -t fp16 -H 8:2 -D 128 $M/random_eviction.1000.amask \
	    $M/block_sparse_variable.1000.amask $M/share_question.1000.amask
	# walks longer than 64 q-tiles are split among CTAs at this size
	kb "split fp16 4:2 hd64" -t fp16 -H 4:2 -D 64 $M/causal.4096.amask $M/share_question.4096.amask
	for n in 16384 32768; do
		gen full $n
		gen causal $n
	done
	for p in share_question causal_document sliding_window_causal block_sparse_uniform \
	    random_eviction; do
		gen $p 32768
	done
	timeout $TMO "$KBENCH" -v -k $KERN -p $PASSES -w 2 -n 5 $M/full.16384.amask $M/causal.16384.amask \
	    $M/full.32768.amask $M/causal.32768.amask $M/share_question.32768.amask \
	    $M/causal_document.32768.amask $M/sliding_window_causal.32768.amask \
	    $M/block_sparse_uniform.32768.amask $M/random_eviction.32768.amask \
	    >"$OUT/$KERN-bench.tsv" 2>"$OUT/$KERN-bench.err" || rc=1
	cut -f3,4,12,16,18,21,22 "$OUT/$KERN-bench.tsv"
	;;
bench)
	for n in 8192 16384 32768; do
		gen full $n
		gen causal $n
	done
	timeout $TMO "$KBENCH" -v -k $KERN$WITH -p $PASSES -w 3 -n 10 $M/full.8192.amask $M/causal.8192.amask \
	    $M/full.16384.amask $M/causal.16384.amask $M/full.32768.amask $M/causal.32768.amask \
	    >"$OUT/$KERN-bench.tsv" 2>"$OUT/$KERN-bench.err" || rc=1
	n=32768
	for p in full_document causal_document share_question causal_blockwise prefix_lm_causal \
	    prefix_lm_document sliding_window sliding_window_causal global_sliding_window \
	    block_causal_document block_sparse_uniform block_sparse_variable qk_sparse hash_sparse \
	    random_eviction; do
		gen $p $n
	done
	ls $M/*.$n.amask | grep -v -e '/full\.' -e '/causal\.' | xargs timeout $TMO "$KBENCH" -v -k $KERN -p $PASSES -w 2 -n 5 \
	    >"$OUT/$KERN-bench2.tsv" 2>>"$OUT/$KERN-bench.err" || rc=1
	tail -n +2 "$OUT/$KERN-bench2.tsv" >>"$OUT/$KERN-bench.tsv"
	# O(S) memory: 1M tokens at 64:8 (a window keeps the time short)
	gen sliding_window 1M
	timeout $TMO "$KBENCH" -v -k $KERN -p $PASSES -w 0 -n 1 $M/sliding_window.1M.amask \
	    >"$OUT/$KERN-bench2.tsv" 2>>"$OUT/$KERN-bench.err" || rc=1
	tail -n +2 "$OUT/$KERN-bench2.tsv" >>"$OUT/$KERN-bench.tsv"
	rm -f "$OUT/$KERN-bench2.tsv"
	cut -f2,3,4,12,16,18,21,22 "$OUT/$KERN-bench.tsv"
	;;
sass)
	cuobjdump --dump-sass build/kernels/$KERN.cu.o >"$OUT/$KERN.sass" || exit 1
	awk '/Function :/ { f = $3; k[f] = 1 }
	    /HMMA|HGMMA/ { h[f]++ } /HGMMA/ { w[f]++ } /UTMALDG|UBLKCP/ { t[f]++ } /LDSM/ { l[f]++ } /LDGSTS/ { g[f]++ } /LDL|STL/ { s[f]++ }
	    /RED|ATOM/ { r[f]++ } /MUFU.EX2/ { e[f]++ }
	    /^ *\/\*[0-9a-f]+\*\// { o = $2 ~ /^@/ ? $3 : $2; n[f]++; if (o ~ /^U/) u[f]++; if (o ~ /^R2UR/) q[f]++ }
	    END { for (f in k) printf "%s MMA %d HGMMA %d TMA %d LDSM %d LDGSTS %d EX2 %d LDL+STL %d RED %d inst %d uniform %d R2UR %d\n",
	          f, h[f], w[f], t[f], l[f], g[f], e[f], s[f], r[f], n[f], u[f], q[f] }' "$OUT/$KERN.sass" | sort
	gzip -f "$OUT/$KERN.sass"
	;;
matrix)
	: >"$OUT/$KERN-matrix.err"
	first=1
	for n in 1024 2048 4096 8192 16384 24576 32768 40960 49152; do
		for p in full causal full_document causal_document share_question causal_blockwise \
		    prefix_lm_causal prefix_lm_document sliding_window sliding_window_causal \
		    global_sliding_window block_causal_document block_sparse_uniform \
		    block_sparse_variable qk_sparse hash_sparse random_eviction; do
			gen $p $n
		done
		timeout $TMO "$KBENCH" -k $KERN$WITH -p $PASSES -w ${MXW:-2} -n ${MXN:-5} $M/*.$n.amask >"$OUT/kb.tsv" 2>>"$OUT/$KERN-matrix.err" || rc=1
		if [ $first = 1 ]; then cp "$OUT/kb.tsv" "$OUT/$KERN-matrix.tsv"; first=0
		else tail -n +2 "$OUT/kb.tsv" >>"$OUT/$KERN-matrix.tsv"; fi
	done
	rm -f "$OUT/kb.tsv"
	;;
ab)
	if [ -z "${ABMASKS:-}" ]; then
		{ echo len; for i in $(seq 32); do echo 1024; done; } >"$M/docs1k.len"
		for p in causal_document full_document; do
			[ -s "$M/${p}_1k.32768.amask" ] ||
			    "$MASKGEN" -p $p -n 32768 -L "$M/docs1k.len" -o "$M/${p}_1k.32768.amask" || rc=1
		done
		gen causal_document 32768
		[ -s "$M/causal_document_long.32768.amask" ] ||
		    "$MASKGEN" -p causal_document -n 32768 -s 3 --long -o "$M/causal_document_long.32768.amask" || rc=1
		gen full 8192
		gen full 65536
		gen causal 32768
		gen hash_sparse 16384
		gen sliding_window_causal 16384 -w 1638
		ABMASKS="$M/causal_document_1k.32768.amask $M/full_document_1k.32768.amask
		    $M/causal_document.32768.amask $M/causal_document_long.32768.amask $M/full.8192.amask
		    $M/full.65536.amask
		    $M/causal.32768.amask $M/hash_sparse.16384.amask $M/sliding_window_causal.16384.amask"
	fi
	if [ "$ABMASKS" = all ]; then
		allmasks 32768
		ABMASKS=$("$MASKGEN" -l | cut -f1 | sed "s|.*|$M/&.32768.amask|")
	fi
	rm -f "$OUT/$KERN-ab.tsv"
	for v in ${AB:?AB: the variants, NAME=ENV ...}; do
		rv=$(ab_rev "$v")
		[ -z "$rv" ] || ab_build "$rv" || { echo "not ok $KERN ab: build $rv"; rc=1; }
	done
	for r in $(seq "${ROUNDS:-2}"); do
		for f in $ABMASKS; do
			# 64K and longer: a second an iteration
			it="-w 3 -n 10"
			case $f in *.65536.amask | *.131072.amask) it="-w 1 -n 3" ;; esac
			for v in $AB; do
				kb=$KBENCH rv=$(ab_rev "$v")
				[ -z "$rv" ] || kb=$(ab_tree "$rv")/bin/kbench
				# shellcheck disable=SC2046,SC2086
				env $(ab_env "$v") timeout $TMO "$kb" -k $KERN$WITH -p $PASSES \
				    $it ${ABARGS:-} "$f" >"$OUT/ab1.tsv" 2>>"$OUT/$KERN-ab.err" || rc=1
				ab_add "$r" "$v" "$OUT/ab1.tsv" "$OUT/$KERN-ab.tsv"
			done
		done
	done
	rm -f "$OUT/ab1.tsv"
	cut -f1,2,4,5,6,14,20,23 "$OUT/$KERN-ab.tsv"
	;;
*)
	echo "usage: kern.sh [check|quick|bench|sass|matrix|ab]" >&2
	exit 2
	;;
esac
exit $rc
