#!/bin/sh
# The cudnn kernel against PyTorch's cuDNN SDPA, in one run on one GPU:
# kbench -k cudnn (each binary in $KBENCH, rows tagged by its file name) over
# full and causal at S = 8K..32K and a few other masks at 16K (heads 64:8,
# hd 128, bf16), then bench/cudnn_xcheck.py on the full and causal shapes,
# then a side-by-side table.  Writes $OUT/cudnn-*.tsv and prints the table.
#   KBENCH="bin/kbench"  MASKS=dir of .amask (made with bin/maskgen if unset)
set -u
cd "$(dirname "$0")/.." || exit 2
OUT=${OUT:-out}
KBENCH=${KBENCH:-bin/kbench}
SIZES=${SIZES:-8192 16384 24576 32768}
mkdir -p "$OUT"
if [ -z "${MASKS:-}" ]; then
	MASKS=build/cudnn-bench-masks
	mkdir -p $MASKS
	for s in $SIZES; do
		for p in full causal; do bin/maskgen -p $p -n "$s" -o $MASKS/$p.$s.amask || exit 2; done
	done
fi
for kb in $KBENCH; do
	tag=$(basename "$kb")
	echo "== $kb: $(ldd "$kb" | awk '/libcudnn\.so/ { print $3 }')" >&2
	"$kb" -k cudnn -n "${ITERS:-20}" -H 64:8 -D 128 -t bf16 $(ls $MASKS/*.amask | sort -t. -k2 -n) \
	    >"$OUT/cudnn-rows.$tag.tsv" || echo "kbench $kb failed" >&2
done
PYTHONUNBUFFERED=1 python3 bench/cudnn_xcheck.py -n "${ITERS:-20}" $SIZES >"$OUT/cudnn-xcheck.tsv"
# mask S pass: our tflops per build, torch's, and ours / torch's
awk -F'\t' '
	FNR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; f++; name[f] = FILENAME; next }
	$c["status"] != "ok" { next }
	{ k = $c["mask"] "\t" $c["seqlen_q"] "\t" $c["pass"]; t[f, k] = $c["tflops"]; if (!(k in seen)) { seen[k] = 1; key[++n] = k } }
	END {
		printf "mask\tS\tpass"; for (i = 1; i <= f; i++) { s = name[i]; sub(/.*\//, "", s); printf "\t%s", s }
		for (i = 1; i < f; i++) { s = name[i]; sub(/.*\//, "", s); printf "\t%s/torch", s }
		printf "\n"
		for (j = 1; j <= n; j++) {
			printf "%s", key[j]
			for (i = 1; i <= f; i++) printf "\t%s", ((i, key[j]) in t) ? t[i, key[j]] : "-"
			for (i = 1; i < f; i++)
				printf "\t%s", ((i, key[j]) in t) && ((f, key[j]) in t) && t[f, key[j]] > 0 ? sprintf("%.3f", t[i, key[j]] / t[f, key[j]]) : "-"
			printf "\n"
		}
	}' "$OUT"/cudnn-rows.*.tsv "$OUT/cudnn-xcheck.tsv" | tee "$OUT/cudnn-compare.tsv"
