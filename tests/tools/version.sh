#!/bin/sh
# What a row and a tool say about the build: `TOOL --version' is one line
# with the Makefile's version, the commit and the features make config
# reports, the same for every tool; result rows end in a stack column,
# "-" on the CPU; without a GPU the default kernel and `-k all' are cpu.
. "$(dirname "$0")/../lib.sh"
cd "$TOP" || exit 2

version=$(sed -n 's/^VERSION *:= *//p' Makefile)
features=$(make -s config 2>/dev/null | tr ' ' '\n' | sed -n 's/=yes$//p' | tr '\n' ' ' | sed 's/ $//')
[ -n "$features" ] || features=none
check "the Makefile defines a version" test -n "$version"
for tool in seqsample maskgen kbench cpbench summarize; do
	"$tool" --version >"$T/v" 2>"$T/e"
	rc=$?
	check "$tool --version exits 0, one line, nothing on stderr" \
	    sh -c "[ $rc -eq 0 ] && [ \$(wc -l <'$T/v') -eq 1 ] && ! test -s '$T/e'"
	line=$(cat "$T/v")
	check "$tool --version: '$line'" sh -c "echo '$line' | grep -Eqx '$tool longattn [0-9][0-9a-z.+-]* \\(commit ([0-9a-f]{12}(-dirty)?|unknown); features [a-z ]+\\)'"
	check "$tool --version names version $version" sh -c "echo '$line' | grep -q ' longattn $version ('"
	check "$tool --version lists the build's features ($features)" sh -c "echo '$line' | grep -q '; features $features)\$'"
	echo "${line#"$tool "}" >>"$T/rest"
	"$tool" -h 2>&1 | grep -q -- '--version'
	check "$tool -h lists --version" test $? -eq 0
done
check "every tool reports the same build" test "$(sort -u "$T/rest" | wc -l)" -eq 1
if git rev-parse HEAD >/dev/null 2>&1; then
	# HASH-dirty where tracked files differ from HEAD
	d=; git diff --quiet HEAD -- || d=-dirty
	check "the commit is HEAD's" grep -q "(commit $(git rev-parse --short=12 HEAD)$d;" "$T/rest"
fi

# The stack column: the last of the header, right after seed; "-" for rows
# of the CPU kernel and of cpbench over MPI.
maskgen -p causal -n 256 -o "$T/c.amask"
kbench -k cpu -H 2:1 -D 32 -w 0 -n 1 "$T/c.amask" >"$T/k.tsv"
check "kbench header: ... seed stack" sh -c "head -n 1 '$T/k.tsv' | grep -q '	seed	stack	'"
check "kbench cpu rows: stack -" sh -c "awk -F'\t' 'NR == 1 { for (i = 1; i <= NF; i++) if (\$i == \"stack\") c = i; next } \$c != \"-\" { bad = 1 } END { exit bad || NR != 3 }' '$T/k.tsv'"
check "kbench rows have as many fields as the header" sh -c "awk -F'\t' 'NR == 1 { n = NF } NF != n { bad = 1 } END { exit bad }' '$T/k.tsv'"

# No GPU here: the default kernel is cpu, and `-k all' is cpu alone.
if [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -eq 0 ]; then
	kbench -H 2:1 -D 32 -w 0 -n 1 -p fwd "$T/c.amask" >"$T/d.tsv" 2>/dev/null
	check "kbench without -k and without a GPU: cpu" test "$(awk -F'\t' 'NR == 2 { print $2 }' "$T/d.tsv")" = cpu
	kbench -k all -H 2:1 -D 32 -w 0 -n 1 -p fwd "$T/c.amask" >"$T/a.tsv" 2>/dev/null
	check "kbench -k all without a GPU: cpu alone" test "$(awk -F'\t' 'NR > 1 { printf "%s ", $2 }' "$T/a.tsv")" = "cpu "
	kbench -k all,cpu -H 2:1 -D 32 -w 0 -n 1 -p fwd "$T/c.amask" >"$T/a2.tsv" 2>/dev/null
	check "kbench -k all,cpu: each kernel once" test "$(awk 'NR > 1' "$T/a2.tsv" | wc -l)" -eq 1
else
	skip "default kernel without a GPU" "this host has a GPU"
fi

if command -v mpirun >/dev/null 2>&1 && grep -q 'mpi' "$T/rest"; then
	timeout 120 mpirun --oversubscribe --allow-run-as-root -n 2 cpbench --backend mpi -s ulysses \
	    -p fwd -H 2:2 -D 32 -w 0 -n 1 "$T/c.amask" >"$T/cp.tsv" 2>"$T/cp.err"
	check "cpbench header: ... seed stack" sh -c "head -n 1 '$T/cp.tsv' | grep -q '	seed	stack	'"
	check "cpbench over MPI: stack -" test "$(awk -F'\t' 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "stack") c = i } NR == 2 { print $c }' "$T/cp.tsv")" = -
else
	skip "cpbench stack column" "no mpirun or no MPI in this build"
fi
finish
