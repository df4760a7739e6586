# aggregate.awk: result rows (TSV, several streams, repeated headers) to one
# row per (mask, pass, seqlen, label), the median of repeated rows, in the
# order the tables print: tables by first appearance, seqlen ascending,
# labels by first appearance.  The label is the kernel, or for cpbench rows
# strategy/world, with (UxR) added when both degrees exceed 1, so usp 4x1
# and usp 2x2 stay apart, and (Nn) when the ranks span N > 1 nodes, real
# or --node-size's: (2x2,2n), and * when cpbench --predict made the row (status
# predicted, which counts as ok, or host predict: apart from measured
# rows).  Portable awk (mawk, gawk, busybox).
#
# Output columns: mask pass seqlen label status n tflops ms_median mem_gib
# heads_q heads_kv head_dim dtype batch device mixed stack
# ms_median only with -v want_ms=1 (it costs a second median per group).
# status: wrong if any row is wrong; else ok if any is ok (medians of the
# ok rows); else error, oom, unsupported in that order.  mixed = 1 when the
# groups of a table differ in shape or device (the title shows the first).
# stack: the union of the table's stack fields (driver=... cuda=...) when no
# part has two versions, else empty; empty too for rows without the column.

BEGIN {
	FS = OFS = "\t"
	ncols = 0; ntab = 0; bad = 0
	nneed = split("tool kernel mask seqlen_q area batch heads_q heads_kv head_dim dtype pass world status ms_median tflops mem_gib device", need, " ")
}

# the input, for messages
function src() {
	return FILENAME == "" || FILENAME == "-" ? "stdin" : FILENAME
}

function die(msg) {
	printf "summarize: %s\n", msg > "/dev/stderr"
	bad = 1
	exit 2
}

# Rows are short lines of printable ASCII and tabs: anything else (CR, NUL,
# binary, a huge field) is a damaged file, never a name to print.
$0 ~ /[^\t -~]/ || length($0) > 4096 {
	if (length($0) > 4096)
		die(src() ": line " FNR ": a line of " length($0) " bytes")
	die(src() ": line " FNR ": a byte that is not a tab or printable ASCII (CRLF? binary?)")
}

# Each header maps the columns anew, so streams of older and newer versions
# (with and without stack, say) concatenate.
$1 == "tool" {
	mapcols(src())
	# scalars: an array lookup per field and row is most of the time
	Ctool = c["tool"]; Ckern = c["kernel"]; Cmask = c["mask"]; Csl = c["seqlen_q"]
	Carea = c["area"]; Cbatch = c["batch"]; Chq = c["heads_q"]; Chkv = c["heads_kv"]
	Chd = c["head_dim"]; Cdt = c["dtype"]; Cpass = c["pass"]; Cworld = c["world"]
	Cst = c["status"]; Cms = c["ms_median"]; Ctf = c["tflops"]; Cmem = c["mem_gib"]
	Cdev = c["device"]
	# optional: older streams and fixtures may lack them
	Cul = ("ulysses" in c) ? c["ulysses"] : 0
	Crg = ("ring" in c) ? c["ring"] : 0
	Cnd = ("nodes" in c) ? c["nodes"] : 0
	Cstk = ("stack" in c) ? c["stack"] : 0
	Chost = ("host" in c) ? c["host"] : 0
	next
}

{
	if (NF != ncols) {
		if (NF == 0)
			next
		if (ncols == 0)
			die(src() ": line " FNR ": result rows without a header line")
		die(src() ": line " FNR ": " NF " fields, want " ncols)
	}
	# One string lookup per row, of the fields as they are; the table,
	# label and shape are worked out once per group (newgroup): at 1M
	# rows every operation per row counts.
	g = $Cmask SUBSEP $Cpass SUBSEP $Csl SUBSEP $Ckern SUBSEP $Ctool SUBSEP $Cworld
	if (Cul && Crg)
		g = g SUBSEP $Cul SUBSEP $Crg
	if (Cnd && $Cnd > 1)
		g = g SUBSEP $Cnd "n"
	if ((st = $Cst) == "predicted" || (Chost && $Chost == "predict"))
		g = g SUBSEP "*"
	if ((gi = gid[g]) == "")
		gi = newgroup(g)
	# a group's other stacks, rare: one comparison per row otherwise
	if (Cstk && $Cstk != gstk[gi] && !((gi, $Cstk) in gseen)) {
		gseen[gi, $Cstk] = 1
		gstk[gi] = gstk[gi] " " $Cstk
	}
	if (st == "ok" || st == "predicted") {
		nok[gi]++
		v = $Ctf + 0
		# kbench's own FLOP count, recomputed for precision where the
		# column's two decimals are too few (a CPU run shows 0.00)
		if (v < 10 && $Ctool == "kbench" && (ms = $Cms + 0) > 0)
			v = ($Cpass == "bwd" ? 10 : 4) * $Carea * $Chq * $Chd * $Cbatch / (ms * 1e9)
		# flat integer-keyed arrays, bucketed by group in END: string
		# keys of (group, index), or a list per group, would cost most of
		# the run at 1M rows
		tf[++N] = v
		grp[N] = gi
		if (want_ms) {
			tm[N] = $Cms + 0
			if ($Cmem + 0 > mem[gi])
				mem[gi] = $Cmem + 0
		}
	} else {
		if (st != "wrong" && st != "error" && st != "oom" && st != "unsupported")
			die(src() ": line " FNR ": status '" st "' is not ok, predicted, wrong, error, oom or unsupported")
		cnt[gi, st]++
		nbad[gi]++
	}
}

# The first row of a group: its table, label and shape.
function newgroup(g,    gi, t, ti, label, sl, x) {
	if ($Csl !~ /^[0-9]+$/)
		die(src() ": line " FNR ": seqlen_q '" $Csl "' is not a number")
	gid[g] = gi = ++ngrp
	label = $Ckern
	if ($Ctool == "cpbench") {
		label = label "/" $Cworld
		x = Cul && Crg && $Cul > 1 && $Crg > 1 ? $Cul "x" $Crg : ""
		if (Cnd && $Cnd > 1)
			x = x (x == "" ? "" : ",") $Cnd "n"
		if (x != "")
			label = label "(" x ")"
	}
	if ($Cst == "predicted" || (Chost && $Chost == "predict"))
		label = label "*"
	t = $Cmask SUBSEP $Cpass
	if (!(t in tab)) {
		tab[t] = ++ntab
		tmask[ntab] = $Cmask; tpass[ntab] = $Cpass
		thq[ntab] = $Chq; thkv[ntab] = $Chkv; thd[ntab] = $Chd
		tdt[ntab] = $Cdt; tb[ntab] = $Cbatch; tdev[ntab] = $Cdev
		tmixed[ntab] = 0; nsl[ntab] = 0; nlab[ntab] = 0
	}
	ti = tab[t]
	# a group's shape is its first row's; a table whose groups differ
	# says so in its title
	if ($Chq != thq[ti] || $Chkv != thkv[ti] || $Chd != thd[ti] || $Cdt != tdt[ti] ||
	    $Cbatch != tb[ti] || $Cdev != tdev[ti])
		tmixed[ti] = 1
	sl = $Csl + 0
	gt[gi] = ti; gsl[gi] = sl; glab[gi] = label
	gstk[gi] = Cstk ? $Cstk : ""
	if (Cstk)
		gseen[gi, $Cstk] = 1
	nok[gi] = nbad[gi] = mem[gi] = 0
	if (!((ti, sl) in hassl)) {
		hassl[ti, sl] = 1
		sls[ti, ++nsl[ti]] = sl
	}
	if (!((ti, label) in haslab)) {
		haslab[ti, label] = 1
		labs[ti, ++nlab[ti]] = label
	}
	return gi
}

# The k-th smallest of a[lo..hi] (Hoare's selection, median-of-three
# pivot): O(m) on average; it reorders a[lo..hi].
function select(a, lo, hi, k,    i, j, p, x) {
	while (lo < hi) {
		i = lo; j = hi
		p = a[int((lo + hi) / 2)]
		if ((a[lo] < p) != (a[lo] < a[hi]))
			p = a[lo]
		else if ((a[hi] < p) != (a[hi] < a[lo]))
			p = a[hi]
		while (i <= j) {
			while (a[i] < p) i++
			while (a[j] > p) j--
			if (i <= j) {
				x = a[i]; a[i] = a[j]; a[j] = x
				i++; j--
			}
		}
		if (k <= j) hi = j
		else if (k >= i) lo = i
		else return a[k]
	}
	return a[k]
}

# Median of a[lo..lo+m-1].
function median(a, lo, m,    hi, k, x, i, v) {
	hi = lo + m - 1
	if (m % 2)
		return select(a, lo, hi, lo + (m - 1) / 2)
	k = lo + m / 2 - 1
	v = select(a, lo, hi, k)
	# after the selection a[k+1..hi] >= a[k]: the other middle is their minimum
	x = a[k + 1]
	for (i = k + 2; i <= hi; i++)
		if (a[i] < x) x = a[i]
	return (v + x) / 2
}

END {
	if (bad)
		exit 2
	for (gi = 1; gi <= ngrp; gi++)
		gi_of[gt[gi], gsl[gi], glab[gi]] = gi
	# bucket the ok values by group: group gi owns ftf[at[gi] .. at[gi]+nok[gi]-1]
	x = 1
	for (gi = 1; gi <= ngrp; gi++) {
		at[gi] = fill[gi] = x
		x += nok[gi]
	}
	for (x = 1; x <= N; x++) {
		i = fill[grp[x]]++
		ftf[i] = tf[x]
		if (want_ms)
			ftm[i] = tm[x]
	}
	# each table's stack: the union of its rows' parts ("-" has none); a
	# part with two versions empties it
	for (gi = 1; gi <= ngrp; gi++) {
		ti = gt[gi]
		if (ti in tbad)
			continue
		n = split(gstk[gi], parts, " ")
		for (i = 1; i <= n; i++) {
			if (parts[i] == "-" || parts[i] == "")
				continue
			k = parts[i]; sub(/=.*/, "", k)
			if (!((ti, k) in tver)) {
				tver[ti, k] = parts[i]
				tstk[ti] = tstk[ti] (tstk[ti] == "" ? "" : " ") parts[i]
			} else if (tver[ti, k] != parts[i])
				tbad[ti] = 1
		}
	}
	print "mask", "pass", "seqlen", "label", "status", "n", "tflops", "ms_median", "mem_gib", "heads_q", "heads_kv", "head_dim", "dtype", "batch", "device", "mixed", "stack"
	for (ti = 1; ti <= ntab; ti++) {
		for (i = 1; i <= nsl[ti]; i++)
			s[i] = sls[ti, i]
		nsort(s, nsl[ti])
		for (i = 1; i <= nsl[ti]; i++)
			for (j = 1; j <= nlab[ti]; j++) {
				g = ti SUBSEP s[i] SUBSEP labs[ti, j]
				if (!(g in gi_of))
					continue
				g = gi_of[g]
				st = (g, "wrong") in cnt ? "wrong" : nok[g] > 0 ? "ok" : (g, "error") in cnt ? "error" : (g, "oom") in cnt ? "oom" : "unsupported"
				if (st == "ok")
					vals = sprintf("%.6g\t%s\t%.3f", median(ftf, at[g], nok[g]),
					    want_ms ? sprintf("%.4f", median(ftm, at[g], nok[g])) : "", mem[g])
				else
					vals = "\t\t"
				print tmask[ti], tpass[ti], s[i], labs[ti, j], st, nok[g] + nbad[g], vals, thq[ti], thkv[ti], thd[ti], tdt[ti], tb[ti], tdev[ti], tmixed[ti], (ti in tbad) ? "" : tstk[ti]
			}
	}
}
