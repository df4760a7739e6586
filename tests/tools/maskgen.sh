#!/bin/sh
# maskgen: the list, every pattern through the tool (build, -c, -i), the
# seqsample pipeline, seeds, parameters in the header, plans, pictures.
. "$(dirname "$0")/../lib.sh"

info() { maskgen -i "$1" | awk -F '\t' -v k="$2" '$1 == k { print $2 }'; }

maskgen -l >"$T/list"
check "-l: 18 patterns, name TAB description" test "$(awk -F '\t' 'NF == 2 && $1 ~ /^[a-z_]+$/' "$T/list" | wc -l)" -eq 18
for p in full causal full_document causal_document share_question causal_blockwise prefix_lm_causal \
    prefix_lm_document sliding_window sliding_window_causal global_sliding_window block_causal_document \
    block_sparse_uniform block_sparse_variable qk_sparse hash_sparse random_eviction custom; do
	grep -q "^$p	" "$T/list" || fail "-l lists $p" "missing"
done
pass "-l lists every pattern of masks.md"

printf '0 1024 0 1024 causal\n1024 4096 0 1024 full\n1024 4096 1024 4096 bicausal\n' >"$T/slices"
while read -r p; do
	extra=
	[ "$p" = custom ] && extra="-f $T/slices"
	[ "$p" = block_sparse_variable ] && extra="--min-block 128 --avg-block 256"
	if ! maskgen -p "$p" -n 4K -s 7 $extra -o "$T/$p.amask" 2>"$T/err"; then
		fail "$p: builds at 4K" "$(cat "$T/err")"
		continue
	fi
	check "$p: -c accepts it" maskgen -c "$T/$p.amask"
	maskgen -i "$T/$p.amask" >"$T/info"
	check "$p: -i names the pattern, 4096 x 4096" test "$(awk -F '\t' '$1 == "pattern" || $1 == "seqlen_q" || $1 == "seqlen_k" { printf "%s ", $2 }' "$T/info")" = "$p 4096 4096 "
	check "$p: -i has heads slices area density" test "$(awk -F '\t' '$1 ~ /^(heads|slices|area|density)$/ && $2 != ""' "$T/info" | wc -l)" -eq 4
	check "$p: area within [1, S^2 x heads]" awk -F '\t' '$1 == "area" { a = $2 } $1 == "heads" { h = $2 } END { exit !(a >= 1 && a <= 4096 * 4096 * h) }' "$T/info"
done <<EOP
$(cut -f1 "$T/list")
EOP

# the pipeline of the man page, and seeds
seqsample -d pile -n 64K -s 1 | maskgen -p causal_document -n 64K -L - -o "$T/cd.amask"
check "seqsample | maskgen -L -" maskgen -c "$T/cd.amask"
check "-L: as many slices as documents" test "$(info "$T/cd.amask" slices)" -eq "$(seqsample -d pile -n 64K -s 1 | awk 'NR > 1' | wc -l)"
seqsample -d pile -n 64K -s 1 >"$T/lens.tsv"
maskgen -p causal_document -n 64K -L "$T/lens.tsv" -o "$T/cd2.amask"
check "-L FILE and -L - give the same mask" cmp -s "$T/cd.amask" "$T/cd2.amask"
maskgen -p causal_document -n 64K -d pile -s 1 -o "$T/cd3.amask"
check "sampling itself with -d pile -s 1 gives the same documents" test "$(info "$T/cd3.amask" area)" = "$(info "$T/cd.amask" area)"
check "the header records dist and seed" sh -c "maskgen -i '$T/cd3.amask' | grep -q '^params	docs=[0-9]* dist=pile seed=1$'"
maskgen -p causal_document -n 64K -s 2 -o "$T/a"; maskgen -p causal_document -n 64K -s 2 -o "$T/b"
maskgen -p causal_document -n 64K -s 3 -o "$T/c"
check "same seed, same file" cmp -s "$T/a" "$T/b"
check "another seed, another file" sh -c "! cmp -s '$T/a' '$T/c'"
maskgen -p causal_document -n 1M --long -s 1 -o "$T/long.amask"
check "--long: recorded as <dist>-long" sh -c "maskgen -i '$T/long.amask' | grep -q 'dist=prolong512k-long'"

# parameters: flags, defaults, K suffixes, all in the header
maskgen -p sliding_window -n 8K -w 1K -o "$T/sw.amask"
check "-w 1K: w=1024 in params" test "$(info "$T/sw.amask" params)" = "w=1024"
check "sliding_window area: sum over q of |[q-w, q+w]| clipped" test "$(info "$T/sw.amask" area)" = "$(awk 'BEGIN { for (q = 0; q < 8192; q++) { lo = q - 1024; hi = q + 1024; if (lo < 0) lo = 0; if (hi > 8191) hi = 8191; a += hi - lo + 1 } print a }')"
maskgen -p global_sliding_window -n 8K -s 4 -o "$T/g.amask"
check "global_sliding_window: random w, g = 2w, seed recorded" sh -c "maskgen -i '$T/g.amask' | awk -F '\t' '\$1 == \"params\" { split(\$2, f, /[ =]/); exit !(f[1] == \"w\" && f[3] == \"g\" && f[4] == 2 * f[2] && f[6] == 4) }'"
maskgen -p global_sliding_window -n 8K -w 512 -g 16 -o "$T/g2.amask"
check "global_sliding_window -w 512 -g 16 (FlashMask's benchmark)" test "$(info "$T/g2.amask" params)" = "w=512 g=16"
maskgen -p prefix_lm_causal -n 4K -P 1000 -o "$T/pl.amask"
check "prefix_lm_causal -P 1000: area = 1000*4096 + causal rest" test "$(info "$T/pl.amask" area)" -eq $((1000 * 4096 + (3096 * 3097) / 2))
maskgen -p block_sparse_uniform -n 8K -B 128 --ratio 0.25 -H 4 -s 1 -o "$T/bs.amask"
check "block_sparse_uniform: 4 heads, 64x64 blocks, 16 kept per row" test "$(maskgen -i "$T/bs.amask" | awk -F '\t' '$1 ~ /^(heads|qblocks|kblocks|blocks|body)$/ { printf "%s ", $2 }')" = "4 blocks 64 64 4096 "
check "block_sparse_uniform: density = ratio" test "$(info "$T/bs.amask" density)" = 0.25

printf 'len\n3000\n1096\n' >"$T/bl.tsv"
maskgen -p block_causal_document -n 4096 -B 1024 -L "$T/bl.tsv" -o "$T/bl.amask"
check "block_causal_document -L: lengths need not be whole blocks" test "$(info "$T/bl.amask" slices)" -eq 5

# plans
maskgen -i "$T/cd.amask" --plan 128x128 >"$T/plan"
check "--plan: rows, entries, full and partial tiles" test "$(awk -F '\t' '$1 ~ /^(plan_rows|plan_entries|tiles_full|tiles_partial)$/ && $2 > 0' "$T/plan" | wc -l)" -eq 4
check "--plan 128x128: 512 rows for 64K" test "$(awk -F '\t' '$1 == "plan_rows" { print $2 }' "$T/plan")" -eq 512
maskgen -p causal -n 1K -o "$T/c1k.amask"
check "--plan 128x128: causal 1K's tile bound, 524800 over 36 tiles" test \
    "$(maskgen -i "$T/c1k.amask" --plan 128x128 | awk -F '\t' '$1 == "tile_bound" { print $2 }')" = 0.8898
# causal 1K on 64 x 128: k-tile j's column is q-tiles 2j..15, the first
# of which sees only the tile's first 64 keys
maskgen -i "$T/c1k.amask" --plan 64x128 >"$T/plan"
check "--plan 64x128: causal 1K's half tiles, one a column" test "$(awk -F '\t' '$1 == "half_tiles" { print $2 }' "$T/plan")" -eq 8
check "--plan 64x128: causal 1K's half bound is the 64 x 64 tiles' bound" test \
    "$(awk -F '\t' '$1 == "half_bound" { print $2 }' "$T/plan")" = \
    "$(maskgen -i "$T/c1k.amask" --plan 64x64 | awk -F '\t' '$1 == "tile_bound" { print $2 }')"
check "--plan 64x128: causal 1K's columns, 16 to 2 tiles" test \
    "$(awk -F '\t' '$1 ~ /^column/ { printf "%s ", $2 }' "$T/plan")" = "8 10 16 "
check "--plan 64x64: no half tiles but on 128-key tiles" test \
    "$(maskgen -i "$T/c1k.amask" --plan 64x64 | grep -c '^half_')" -eq 0
maskgen -p block_sparse_uniform -n 4K -B 64 --ratio 0.3 -s 1 -o "$T/b64.amask"
check "--plan 64x64: 64-token blocks fill their tiles" test \
    "$(maskgen -i "$T/b64.amask" --plan 64x64 | awk -F '\t' '$1 == "tile_bound" { print $2 }')" = 1.0000
maskgen -i "$T/b64.amask" --plan 64x128 >"$T/plan6"
check "--plan 64x128: 64-token blocks half-fill some tiles" \
    awk -F '\t' '$1 == "tile_bound" { f = $2 > 0.3 && $2 < 0.9 } END { exit !f }' "$T/plan6"
maskgen -i "$T/cd.amask" --plan 64x128 -t >"$T/plan"
check "-t: read_ms and plan_ms" test "$(grep -c '_ms	' "$T/plan")" -eq 2

# default output is stdout
maskgen -p causal -n 1K >"$T/stdout.amask"
check "no -o: the mask on stdout" maskgen -c "$T/stdout.amask"

# pictures
maskgen -r "$T/cd.amask" -o "$T/cd.pgm"
check "-r .pgm: P5 512 512 255" test "$(head -c 15 "$T/cd.pgm" | tr '\n' ' ')" = "P5 512 512 255 "
maskgen -r "$T/sw.amask" -o "$T/sw.png"
check "-r .png: the PNG signature" test "$(head -c 8 "$T/sw.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a
if command -v pngtopnm >/dev/null 2>&1; then
	maskgen -r "$T/sw.amask" -o "$T/sw.pgm"
	pngtopnm "$T/sw.png" >"$T/sw2.pgm" 2>/dev/null
	check "-r .png decodes (pngtopnm) to the same pixels as .pgm" cmp -s "$T/sw.pgm" "$T/sw2.pgm"
fi
maskgen -r "$T/causal.amask" -o "$T/c.svg" --size 64
check "-r .svg: an svg element, 64 x 64" grep -q '<svg .*width="64" height="64"' "$T/c.svg"
if command -v xmllint >/dev/null 2>&1; then
	check "-r .svg is well-formed XML" xmllint --noout "$T/c.svg"
fi
maskgen -r "$T/causal.amask" -o "$T/c.pgm" --size 4
check "causal at 4x4 cells: dark below the diagonal, grey on it, white above" test "$(tail -c 16 "$T/c.pgm" | od -An -tu1 | tr -s ' \n' ' ')" = " 127 255 255 255 0 127 255 255 0 0 127 255 0 0 0 127 "
maskgen -r "$T/bs.amask" --head 3 -o "$T/bs3.pgm"
maskgen -r "$T/bs.amask" --head 0 -o "$T/bs0.pgm"
check "--head: heads of a block mask differ" sh -c "! cmp -s '$T/bs3.pgm' '$T/bs0.pgm'"
# A FIFO (or a device) is written in place: a temp file renamed over it
# would replace it with a regular file.
mkfifo "$T/fifo"
cat "$T/fifo" >"$T/fromfifo" &
maskgen -p causal -n 64 -o "$T/fifo"
wait
maskgen -p causal -n 64 -o "$T/c64.amask"
check "-o FIFO: still a FIFO" test -p "$T/fifo"
check "-o FIFO: the mask came through it" cmp -s "$T/fromfifo" "$T/c64.amask"
maskgen -r "$T/c64.amask" -o "$T/c64.pgm"
check "-r -o: output files are 0666 & ~umask, not 0600" test "$(stat -c %a "$T/c64.pgm")" = "$(printf '%o' $((0666 & ~$(umask))))"
finish
