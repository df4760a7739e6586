# aggregate.awk: result rows (TSV, several streams, repeated headers) to one
# row per (mask, pass, seqlen, label), the median of repeated rows, in the
# order the tables print: tables by first appearance, seqlen ascending,
# labels by first appearance.  The label is the kernel, or for cpbench rows
# strategy/world.  Portable awk (mawk, gawk, busybox).
#
# Output columns: mask pass seqlen label status n tflops ms_median mem_gib
# heads_q heads_kv head_dim dtype batch device mixed
# status: wrong if any row is wrong; else ok if any is ok (medians of the
# ok rows); else error, oom, unsupported in that order.  mixed = 1 when the
# rows of a table differ in shape or device (the title shows the first).

BEGIN {
	FS = OFS = "\t"
	ncols = 0; ntab = 0; bad = 0
	nneed = split("tool kernel mask seqlen_q area batch heads_q heads_kv head_dim dtype pass world status ms_median tflops mem_gib device", need, " ")
}

function die(msg) {
	printf "summarize: %s\n", msg > "/dev/stderr"
	bad = 1
	exit 2
}

$1 == "tool" {
	if (ncols == 0) {
		for (i = 1; i <= NF; i++)
			c[$i] = i
		for (i = 1; i <= nneed; i++)
			if (!(need[i] in c))
				die(FILENAME ": line " FNR ": header lacks column " need[i])
		ncols = NF
	} else if (NF != ncols)
		die(FILENAME ": line " FNR ": a header of " NF " columns, the first had " ncols)
	next
}

NF == 0 { next }

{
	if (ncols == 0)
		die(FILENAME ": line " FNR ": result rows without a header line")
	if (NF != ncols)
		die(FILENAME ": line " FNR ": " NF " fields, want " ncols)
	label = $c["kernel"]
	if ($c["tool"] == "cpbench")
		label = label "/" $c["world"]
	t = $c["mask"] SUBSEP $c["pass"]
	shape = $c["heads_q"] SUBSEP $c["heads_kv"] SUBSEP $c["head_dim"] SUBSEP $c["dtype"] SUBSEP $c["batch"] SUBSEP $c["device"]
	if (!(t in tab)) {
		tab[t] = ++ntab
		tmask[ntab] = $c["mask"]; tpass[ntab] = $c["pass"]; tshape[ntab] = shape
		tmixed[ntab] = 0; nsl[ntab] = 0; nlab[ntab] = 0
	}
	ti = tab[t]
	if (shape != tshape[ti])
		tmixed[ti] = 1
	sl = $c["seqlen_q"] + 0
	if (!((ti, sl) in hassl)) {
		hassl[ti, sl] = 1
		sls[ti, ++nsl[ti]] = sl
	}
	if (!((ti, label) in haslab)) {
		haslab[ti, label] = 1
		labs[ti, ++nlab[ti]] = label
	}
	g = ti SUBSEP sl SUBSEP label
	n[g]++
	st = $c["status"]
	if (st == "ok") {
		k = ++nok[g]
		v = $c["tflops"] + 0
		ms = $c["ms_median"] + 0
		# kbench's own FLOP count, recomputed for precision: the column
		# has two decimals, which a CPU run rounds to 0.00
		if ($c["tool"] == "kbench" && ms > 0) {
			v = 4 * $c["area"] * $c["heads_q"] * $c["head_dim"] * $c["batch"] / (ms * 1e9)
			if ($c["pass"] == "bwd")
				v *= 2.5
		}
		tf[g, k] = v
		tm[g, k] = ms
		if (!(g in mem) || $c["mem_gib"] + 0 > mem[g])
			mem[g] = $c["mem_gib"] + 0
	} else
		cnt[g, st]++
}

# Shell sort of a[1..m] (numbers): O(m^1.3), no recursion, any awk.
function nsort(a, m,    gap, i, j, x) {
	for (gap = int(m / 2); gap > 0; gap = int(gap / 2))
		for (i = gap + 1; i <= m; i++) {
			x = a[i]
			for (j = i; j > gap && a[j - gap] > x; j -= gap)
				a[j] = a[j - gap]
			a[j] = x
		}
}

function median(arr, g, m,    i, a) {
	for (i = 1; i <= m; i++)
		a[i] = arr[g, i]
	nsort(a, m)
	return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
}

END {
	if (bad)
		exit 2
	print "mask", "pass", "seqlen", "label", "status", "n", "tflops", "ms_median", "mem_gib", "heads_q", "heads_kv", "head_dim", "dtype", "batch", "device", "mixed"
	for (ti = 1; ti <= ntab; ti++) {
		for (i = 1; i <= nsl[ti]; i++)
			s[i] = sls[ti, i]
		nsort(s, nsl[ti])
		split(tshape[ti], sh, SUBSEP)
		for (i = 1; i <= nsl[ti]; i++)
			for (j = 1; j <= nlab[ti]; j++) {
				g = ti SUBSEP s[i] SUBSEP labs[ti, j]
				if (!(g in n))
					continue
				st = (g, "wrong") in cnt ? "wrong" : nok[g] > 0 ? "ok" : (g, "error") in cnt ? "error" : (g, "oom") in cnt ? "oom" : "unsupported"
				if (st == "ok")
					vals = sprintf("%.6g\t%.4f\t%.3f", median(tf, g, nok[g]), median(tm, g, nok[g]), mem[g])
				else
					vals = "\t\t"
				print tmask[ti], tpass[ti], s[i], labs[ti, j], st, n[g], vals, sh[1], sh[2], sh[3], sh[4], sh[5], sh[6], tmixed[ti]
			}
	}
}
