#!/bin/sh
# seqsample: exact totals, no zeros, the plain contract, seeds, packs,
# --long, --hist, built-in lookup, and a chi-square of the sampled bins.
. "$(dirname "$0")/../lib.sh"

sums() { awk 'NR > 1 { s += $NF; if ($NF < 1) z++ } END { print s + 0, z + 0 }' "$1"; }

for d in pile prolong64k prolong512k; do
	for n in 1 7 1000 12K 64K 1M; do
		seqsample -d $d -n $n -s 3 >"$T/l" 2>"$T/e" || { fail "seqsample $d $n" "exit $?: $(cat "$T/e")"; continue; }
		case $n in *K) want=$((${n%K} * 1024));; *M) want=$((${n%M} * 1048576));; *) want=$n;; esac
		check "$d -n $n: header is exactly len" test "$(head -1 "$T/l")" = len
		check "$d -n $n: sums to $want, no zero length" test "$(sums "$T/l")" = "$want 0"
	done
done

seqsample -n 64K -s 5 >"$T/a"; seqsample -n 64K -s 5 >"$T/b"; seqsample -n 64K -s 6 >"$T/c"
check "same seed, same output" cmp -s "$T/a" "$T/b"
check "another seed, another output" sh -c "! cmp -s '$T/a' '$T/c'"
check "default histogram by total: 64K is prolong64k" cmp -s "$T/a" "$(seqsample -d prolong64k -n 64K -s 5 >"$T/d"; echo "$T/d")"
seqsample -n 12K -s 1 >"$T/a"; seqsample -d pile -n 12K -s 1 >"$T/b"
check "default histogram by total: 12K is pile" cmp -s "$T/a" "$T/b"
seqsample -n 65537 -s 1 >"$T/a"; seqsample -d prolong512k -n 65537 -s 1 >"$T/b"
check "default histogram by total: 64K+1 is prolong512k" cmp -s "$T/a" "$T/b"
seqsample -s 9 -n 100K >"$T/a"; seqsample --seed=9 --total=100K >"$T/b"
check "long options" cmp -s "$T/a" "$T/b"

seqsample -d pile -n 32K -p 5 -s 2 >"$T/p"
check "--packs: header pack, len" test "$(head -1 "$T/p")" = "$(printf 'pack\tlen')"
check "--packs: five packs of exactly 32768, no zeros" test "$(awk 'NR > 1 { s[$1] += $2; if ($2 < 1) z++ }
    END { for (p in s) if (s[p] == 32768) n++; print n, z + 0 }' "$T/p")" = "5 0"
check "--packs: the packs differ" test "$(awk 'NR > 1 { c[$1]++ } END { for (p in c) print c[p] }' "$T/p" | sort -u | wc -l)" -gt 1

seqsample -l -n 1M -s 4 >"$T/l"
check "--long: exact total, no zeros" test "$(sums "$T/l")" = "1048576 0"
check "--long: ~60% of tokens in documents of 8K..30K" awk 'NR > 1 { t += $1; if ($1 >= 8192 && $1 <= 30720) l += $1 }
    END { exit !(l / t > 0.55 && l / t < 0.75) }' "$T/l"
check "--long: shuffled (a long document is not always last)" awk 'NR > 1 { n++; if ($1 >= 8192) last = n } END { exit !(last < n - 1 || n < 3) }' "$T/l"

# chi-square of the sampled lengths against the bins, at a fixed seed
seqsample -d pile -n 16M -s 11 >"$T/l"
awk -v H="$TOP/masks/dists/pile.tsv" '
BEGIN { while ((getline line < H) > 0) { split(line, f, "\t"); if (f[1] == "lo") continue
	lo[n] = f[1]; hi[n] = f[2]; w[n] = f[3]; W += f[3]; n++ } }
NR > 2 { prev = $1 + 0; if (have) { for (i = 0; i < n; i++) if (x >= lo[i] && x < hi[i]) c[i]++; N++ } x = prev; have = 1 }
NR == 2 { x = $1 + 0; have = 1 }
END {
	# the last document is truncated and left out; bins with expected < 5 pooled
	for (i = 0; i < n; i++) { e = N * w[i] / W; pe += e; po += c[i]
		if (pe >= 5) { chi += (po - pe) ^ 2 / pe; dof++; pe = po = 0 } }
	if (pe > 0) { chi += (po - pe) ^ 2 / pe; dof++ }
	dof--
	# the 0.1% point of chi-square, Wilson-Hilferty
	z = 3.09; crit = dof * (1 - 2 / (9 * dof) + z * sqrt(2 / (9 * dof))) ^ 3
	printf "%d documents, chi2 %.1f, dof %d, crit %.1f\n", N, chi, dof, crit > "/dev/stderr"
	exit !(N > 1000 && chi < crit) }' "$T/l" 2>"$T/chi"
rc=$?
check "pile bins match the histogram: $(cat "$T/chi")" test $rc -eq 0

# --hist, and a user histogram made from it
printf 'len\n1\n2\n3\n4\n5\n100\n1000\n1000\n' >"$T/lens"
seqsample -H "$T/lens" >"$T/h"
check "--hist: power-of-two bins" test "$(awk 'NR > 1 { printf "%s-%s ", $1, $2 }' "$T/h")" = "1-2 2-4 4-8 8-16 16-32 32-64 64-128 128-256 256-512 512-1024 "
check "--hist: weights are fractions of the documents" test "$(awk 'NR > 1 { s += $3 } $1 == 512 { w = $3 } END { print s, w }' "$T/h")" = "1 0.25"
seqsample -H -w 100 <"$T/lens" >"$T/h2"
check "--hist -w: fixed-width bins" test "$(awk 'NR == 2 { print $1, $2, $3 }' "$T/h2")" = "0 100 0.625"
seqsample -d "$T/h" -n 50000 -s 1 >"$T/u"
check "a user histogram (from --hist) samples only its range" awk 'NR > 1 && NR < n { } NR > 1 { if ($1 < 1 || $1 >= 1024) bad++; s += $1 } END { exit !(s == 50000 && bad + 0 == 0) }' "$T/u"
# lengths up to 2^32 - 1: the last bin ends at 2^32, and -d reads it back
printf '1\n4294967295\n' >"$T/wide"
seqsample -H "$T/wide" >"$T/hw"
check "--hist: the last bin ends at 2^32" test "$(tail -n 1 "$T/hw" | cut -f1,2)" = "$(printf '2147483648\t4294967296')"
check "--hist: -d reads what -H wrote, up to 2^32" sh -c "seqsample -d '$T/hw' -n 1K >/dev/null"
seqsample -H -w 3000000000 "$T/wide" >"$T/hw3"
check "--hist -w: the last bin cut at 2^32" test "$(tail -n 1 "$T/hw3" | cut -f1,2)" = "$(printf '3000000000\t4294967296')"
bad "--hist -w 1 over 2^32 tokens: too many bins" "" seqsample -H -w 1 "$T/wide"
printf '10 20 1\n' >"$T/nohdr"
seqsample -d "$T/nohdr" -n 1000 >"$T/u"
check "header line optional; lengths in [10,20) but the last" awk 'NR > 1 { n++; v[n] = $1 } END { for (i = 1; i < n; i++) if (v[i] < 10 || v[i] >= 20) exit 1 }' "$T/u"

mkdir "$T/data"; cp "$TOP/masks/dists/pile.tsv" "$T/data/mine.tsv"
check "built-in names found in \$LONGATTN_DATA" sh -c "LONGATTN_DATA='$T/data' seqsample -d mine -n 1K >/dev/null"
seqsample -n 1K -o "$T/out.tsv"
check "-o writes the file" test "$(sums "$T/out.tsv")" = "1024 0"
finish
