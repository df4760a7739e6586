#!/bin/sh
# The CPU test suite: every unit test binary (build/tests/*), every tool test
# (tests/tools/*.sh) and every Slurm test (tests/slurm/*.sh).  Each prints
# "ok ..." / "not ok ..." lines; a test that exits non-zero without a
# "not ok" line counts as one failure.  Ends with "N passed, N failed".
cd "$(dirname "$0")/.." || exit 2
pass=0 fail=0 skipped=0
log=$(mktemp)
for t in build/tests/* tests/tools/*.sh tests/slurm/*.sh; do
	[ -f "$t" ] || continue
	case $t in *.sh) cmd="sh $t";; *) cmd=$t;; esac
	printf '== %s\n' "$t"
	$cmd >"$log" 2>&1
	rc=$?
	cat "$log"
	p=$(grep -c '^ok ' "$log")
	f=$(grep -c '^not ok ' "$log")
	s=$(grep -c '^ok .*# SKIP' "$log")
	if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then
		echo "not ok $t: exited $rc"
		f=1
	fi
	pass=$((pass + p - s)) fail=$((fail + f)) skipped=$((skipped + s))
done
rm -f "$log"
[ $skipped -gt 0 ] && echo "$skipped skipped"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
