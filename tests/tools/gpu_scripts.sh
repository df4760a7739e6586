#!/bin/sh
# The GPU scripts (tests/gpu/*.sh) parse, and the A/B helpers they share
# split variants as DEVELOPERS.md says: device time is too dear to find a
# syntax error or a mangled variant there.
. "$(dirname "$0")/../lib.sh"
cd "$TOP" || exit 2
for f in tests/gpu/*.sh; do
	check "gpu-script-parses-$(basename "$f" .sh)" sh -n "$f"
done
. tests/gpu/ab.sh
check ab-env-default test -z "$(ab_env base=)"
check ab-env-pairs test "$(ab_env "x=A=1,B=2")" = "A=1 B=2"
check ab-env-comma-value test "$(ab_env "q=LONGATTN_HOPPER_BWD=qm,seg128,X=2")" = \
    "LONGATTN_HOPPER_BWD=qm,seg128 X=2"
check ab-rev-commit test "$(ab_rev "old=@77d3dfc")" = 77d3dfc
check ab-rev-none test -z "$(ab_rev "x=LONGATTN_HOPPER_BWD=qm")"
check ab-rev-empty test -z "$(ab_rev "x=@")"
check ab-env-rev test -z "$(ab_env "old=@77d3dfc")"
check ab-tree-commit test "$(ab_tree 77d3dfc)" = build/rev-77d3dfc
mkdir -p "$T/tree"
check ab-tree-dir test "$(ab_tree "$T/tree")" = "$T/tree"
printf 'kernel\tms\nhopper\t1.5\ncudnn\t1.2\n' >"$T/rows.tsv"
ab_add 1 "qm=LONGATTN_HOPPER_BWD=qm" "$T/rows.tsv" "$T/ab.tsv"
ab_add 2 "base=" "$T/rows.tsv" "$T/ab.tsv"
check ab-add-header test "$(head -1 "$T/ab.tsv")" = "$(printf 'round\tvariant\tkernel\tms')"
check ab-add-rows test "$(awk -F'\t' 'NR > 1 { printf "%s:%s:%s ", $1, $2, $3 }' "$T/ab.tsv")" = \
    "1:qm:hopper 1:qm:cudnn 2:base:hopper 2:base:cudnn "
finish
