#!/bin/sh
# With every optional dependency missing (no CUDA, no pkg-config answers) the
# tools still build, make says what it disabled in one line each, and a tool
# asked for a disabled feature says so and exits 2.
. "$(dirname "$0")/../lib.sh"
cd "$TOP" || exit 2
git ls-files >/dev/null 2>&1 || { skip build-minimal "not a git checkout"; finish; }
mkdir "$T/src"
git ls-files -z | xargs -0 tar cf - | (cd "$T/src" && tar xf -)
cd "$T/src" || exit 2
make -j2 CUDA_HOME=/nonexistent PKG_CONFIG=false all >"$T/make.out" 2>&1
check build-minimal-builds test $? -eq 0 || tail -n 20 "$T/make.out"
for what in CUDA PMIx hwloc MPI; do
	n=$(grep -c "^make: no $what" "$T/make.out")
	check "build-minimal-says-no-$what" test "$n" -eq 1
done
check build-minimal-config sh -c "make -s CUDA_HOME=/nonexistent PKG_CONFIG=false config 2>/dev/null |
    grep -qx 'cuda= nccl= cudnn= pmix= hwloc= mpi='"
bin/maskgen -p causal -n 256 -o "$T/c.amask"
bad build-minimal-kbench-flash "" bin/kbench -k flash "$T/c.amask"
grep -q "flash" "$T/bad.err" && grep -qi "cuda" "$T/bad.err"
check build-minimal-kbench-flash-names-cuda test $? -eq 0
bad build-minimal-cpbench-nccl "" bin/cpbench --backend nccl "$T/c.amask"
bad build-minimal-cpbench-mpi "" bin/cpbench --backend mpi "$T/c.amask"
bin/kbench -k cpu -H 2:1 -D 32 -w 0 -n 1 "$T/c.amask" >"$T/rows.tsv"
check build-minimal-kbench-cpu test "$(awk -F'\t' 'NR == 2 { print $16 }' "$T/rows.tsv")" = ok
finish
