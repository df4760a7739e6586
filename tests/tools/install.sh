#!/bin/sh
# make install PREFIX=...: every tool, page, template, awk program and
# histogram lands, and the installed tree still works after it is moved.
. "$(dirname "$0")/../lib.sh"
cd "$TOP" || exit 2
make -s install PREFIX="$T/p" >"$T/install.out" 2>&1
check install-runs test $? -eq 0 || tail -n 5 "$T/install.out"
for f in bin/seqsample bin/maskgen bin/kbench bin/cpbench bin/summarize bin/kbench-torch \
    share/man/man1/kbench.1 share/man/man1/kbench-torch.1 share/man/man5/amask.5 share/man/man7/longattn.7 \
    share/longattn/sbatch/study.sbatch share/longattn/awk/aggregate.awk \
    share/longattn/dists/prolong512k.tsv; do
	check "install-has-$f" test -s "$T/p/$f"
done
mv "$T/p" "$T/moved"
# built-in histograms are found beside the moved binaries, not in the source tree
LONGATTN_DATA=/nonexistent "$T/moved/bin/seqsample" -d prolong64k -n 64K -s 3 >"$T/len.tsv"
check install-moved-seqsample test "$(awk 'NR > 1 { s += $1 } END { print s }' "$T/len.tsv")" = 65536
bin/summarize tests/fixtures/kbench-h200.tsv >"$T/want.txt"
"$T/moved/bin/summarize" tests/fixtures/kbench-h200.tsv >"$T/sum.txt"
check install-moved-summarize test $? -eq 0
check install-moved-summarize-same-table cmp -s "$T/want.txt" "$T/sum.txt"
check install-table-not-empty test "$(wc -l <"$T/want.txt")" -gt 3
check install-summarize-version test "$("$T/moved/bin/summarize" --version)" = "$(bin/summarize --version)"
finish
