#!/bin/sh
# Times summarize on N synthetic result rows (default 1M): 14 masks x 2
# passes x 9 seqlens x 5 kernels, repeated, with a few oom and unsupported
# rows.  Usage: bench/summarize-bench.sh [ROWS]
set -e
cd "$(dirname "$0")/.."
n=${1:-1000000}
d=$(mktemp -d "${TMPDIR:-/tmp}/sumbench.XXXXXX")
trap 'rm -rf "$d"' EXIT
awk -v n="$n" 'BEGIN {
	OFS = "\t"
	print "tool","kernel","mask","seqlen_q","seqlen_k","area","batch","heads_q","heads_kv","head_dim","dtype","pass","world","ulysses","ring","status","iters","ms_median","ms_min","ms_max","tflops","mem_gib","device","host","commit","seed"
	split("full causal full_document causal_document share_question causal_blockwise prefix_lm_causal prefix_lm_document sliding_window sliding_window_causal global_sliding_window block_causal_document block_sparse_uniform block_sparse_variable", m, " ")
	split("cpu naive flash hopper cudnn", k, " ")
	split("1024 2048 4096 8192 16384 24576 32768 40960 49152", s, " ")
	srand(1)
	for (i = 0; i < n; i++) {
		mi = 1 + i % 14; ki = 1 + int(i / 14) % 5; si = 1 + int(i / 70) % 9; p = int(i / 630) % 2 ? "bwd" : "fwd"
		st = ki == 2 && si > 6 ? "oom" : ki == 1 && si > 3 ? "unsupported" : "ok"
		ms = 0.1 + rand() * 10
		if (st == "ok")
			print "kbench", k[ki], m[mi], s[si], s[si], s[si] * s[si] / 2, 1, 64, 8, 128, "bf16", p, 1, "", "", st, 20, ms, ms * 0.9, ms * 1.1, 100 + rand() * 300, 1.5, "NVIDIA H200", "node1", "abc", 1
		else
			print "kbench", k[ki], m[mi], s[si], s[si], s[si] * s[si] / 2, 1, 64, 8, 128, "bf16", p, 1, "", "", st, "", "", "", "", "", "", "NVIDIA H200", "node1", "abc", 1
	}
}' >"$d/rows.tsv"
echo "summarize-bench: $(($(wc -l <"$d/rows.tsv") - 1)) rows, $(du -h "$d/rows.tsv" | cut -f1)" >&2
start=$(date +%s.%N)
./bin/summarize "$d/rows.tsv" >"$d/out"
end=$(date +%s.%N)
echo "summarize-bench: $(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.2f", b - a }') s, $(grep -c . "$d/out") output lines" >&2
