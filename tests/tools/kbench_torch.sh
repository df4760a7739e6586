#!/bin/sh
# kbench-torch without torch (no GPU either): its pure-Python half against
# maskgen on small masks of every pattern (tests/tools/kbench_torch_pairs.py),
# its row header against kbench's, the one-line error without torch, -l, and
# bad input (exit 2, one line, before torch is looked for).
. "$(dirname "$0")/../lib.sh"
if ! command -v python3 >/dev/null 2>&1; then
	skip "kbench-torch" "no python3 (make deps installs it)"
	finish
fi
# A torch that does not import, whatever this machine has: the tests must
# not depend on it, and "without torch" must be tested even where it is.
mkdir -p "$T/notorch/torch" "$T/m" "$T/t"
echo 'raise ImportError("No module named torch")' >"$T/notorch/torch/__init__.py"
export PYTHONPATH="$T/notorch" LONGATTN_DATA="$TOP/masks/dists" PYTHONDONTWRITEBYTECODE=1

# Every pattern at 240 tokens (not a multiple of Flex's 128), with the
# options that give each some structure at that size: short documents,
# narrow windows, small and uneven blocks, several mask heads.
printf 'len\n50\n7\n90\n3\n60\n30\n' >"$T/lens.tsv"
printf '0 100 0 100 causal\n100 240 0 150 full\n150 240 150 240 bicausal\n' >"$T/custom.txt"
for p in $(maskgen -l | awk '{ print $1 }'); do
	case $p in
	custom) set -- -f "$T/custom.txt" ;;
	block_causal_document) set -- -B 48 ;;
	block_sparse_variable) set -- --min-block 16 --avg-block 40 -H 2 ;;
	block_sparse_uniform) set -- -B 32 -H 3 --ratio 0.4 ;;
	*window*) set -- -w 20 ;;
	*document | share_question | causal_blockwise) set -- -L "$T/lens.tsv" ;;
	*) set -- ;;
	esac
	maskgen -p "$p" -n 240 -s 1 "$@" -o "$T/m/$p.amask" || fail "maskgen $p" "cannot make the mask"
done
python3 "$TOP/tests/tools/kbench_torch_pairs.py" "$TOP" "$T/t" "$T"/m/*.amask
rc=$?
check "the pure-Python checks ran to the end" [ $rc -eq 0 ]

M=$T/m/causal_document.amask
# Without torch: one line, exit 2, no rows.
bad "kbench-torch: no torch" "" kbench-torch "$M"
check "... says torch not found (pip install torch)" \
	grep -qx 'kbench-torch: torch not found (pip install torch)' "$T/bad.err"
kbench-torch -k flex "$M" >"$T/out" 2>/dev/null
check "no torch: nothing on stdout" [ ! -s "$T/out" ]

# -l works without torch: every kernel, and what each is given per mask.
kbench-torch -l "$M" "$T/m/full.amask" >"$T/list" 2>"$T/list.err"
check "-l without torch exits 0" [ $? -eq 0 ]
for k in sdpa-math sdpa-efficient sdpa-flash sdpa-cudnn flex fa3 fa2-varlen flashinfer; do
	check "-l lists $k, not found" grep -q "^$k  *not found" "$T/list"
done
check "-l: sdpa-flash cannot take a document mask" \
	grep -q "causal_document.amask	sdpa-flash	unsupported	" "$T/list"
check "-l: sdpa-flash takes full as no mask" grep -q "full.amask	sdpa-flash	ok	no mask" "$T/list"
check "-l: fa2-varlen gets cu_seqlens of 6 documents" \
	grep -q "causal_document.amask	fa2-varlen	ok	cu_seqlens of 6 documents, window_size (-1, 0)" "$T/list"
check "-l: flex gets a BlockMask" grep -q "causal_document.amask	flex	ok	BlockMask 2x2 of 128" "$T/list"

# The header: kbench's columns first, in its order (kbench-torch adds
# those kbench gains after seed), written from one list.
kbench -k cpu -H 2:1 -D 8 -w 0 -n 1 "$M" 2>/dev/null | head -n 1 | tr '\t' ' ' >"$T/kh"
python3 -c "import sys; sys.path.insert(0, '$TOP/bin'); import kbench_torch as k; print(' '.join(k.COLUMNS))" >"$T/th"
check "header starts with kbench's columns" sh -c "[ -s '$T/kh' ] && case \"\$(cat '$T/th')\" in \"\$(cat '$T/kh')\"*) true;; *) false;; esac"
check "header ends with stack sent_bytes imbalance nodes" grep -q ' seed stack sent_bytes imbalance nodes$' "$T/th"

# Bad input: exit 2, one line naming kbench-torch, before torch is needed.
bad "kbench-torch: missing mask file" "" kbench-torch "$T/nonexistent.amask"
bad "kbench-torch: heads 64:7" "" kbench-torch -H 64:7 "$M"
bad "kbench-torch: head dim 0" "" kbench-torch -D 0 "$M"
bad "kbench-torch: unknown kernel" "" kbench-torch -k nosuch "$M"
bad "kbench-torch: iterations 0" "" kbench-torch -n 0 "$M"
bad "kbench-torch: bad pass" "" kbench-torch -p sideways "$M"
bad "kbench-torch: bad dtype" "" kbench-torch -t fp8 "$M"
bad "kbench-torch: mask heads do not divide" "" kbench-torch -H 4:2 "$T/m/block_sparse_uniform.amask"
kbench-torch >/dev/null 2>"$T/usage"
check "no mask file: exit 2 and the usage" sh -c "[ $? -eq 2 ] && grep -q '^usage: kbench-torch' '$T/usage'"
kbench-torch -h 2>"$T/help"
check "--help exits 0 with the usage" sh -c "[ $? -eq 0 ] && grep -q -- '--check' '$T/help'"
finish
