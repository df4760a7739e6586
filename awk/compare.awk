# compare.awk: two result files, OLD then NEW (summarize --compare), rows
# matched on every key column (tool kernel mask seqlen_q seqlen_k batch
# heads_q heads_kv head_dim dtype pass world ulysses ring; repeated rows of
# a key give their median, as aggregate.awk does).  Prints a table of
# NEW/OLD TFLOP/s and peak memory, then the unmatched rows and a summary.
# Exit status: 1 when a matched row got slower by more than thr percent or
# went from ok to wrong, oom or error; 2 on bad input (a file without a
# header, a header without the columns, a short row, a file without rows,
# no row of NEW matching one of OLD); 0 otherwise.  Variable: thr (default
# 5).  Portable awk.

BEGIN {
	FS = "\t"; bad = 0; fno = 0
	if (thr == "") thr = 5
	nkey = split("tool kernel mask seqlen_q seqlen_k batch heads_q heads_kv head_dim dtype pass world ulysses ring", key, " ")
	nneed = split("tool kernel mask seqlen_q seqlen_k batch heads_q heads_kv head_dim dtype pass world status tflops mem_gib", need, " ")
	# the order of a group's status, as aggregate.awk: wrong wins, then ok
	rank["wrong"] = 5; rank["ok"] = 4; rank["error"] = 3; rank["oom"] = 2; rank["unsupported"] = 1
}

function die(msg) {
	printf "summarize: %s\n", msg > "/dev/stderr"
	bad = 1
	exit 2
}

FNR == 1 { fno++; fname[fno] = FILENAME; ncols = 0 }

# Each header maps the columns anew: an old file may lack stack or the
# CP degrees.
$1 == "tool" {
	mapcols(FILENAME)
	next
}

NF == 0 { next }

{
	if (ncols == 0)
		die(FILENAME ": line " FNR ": result rows without a header line")
	if (NF != ncols)
		die(FILENAME ": line " FNR ": " NF " fields, want " ncols)
	k = ""
	for (i = 1; i <= nkey; i++)
		k = k (i > 1 ? SUBSEP : "") ((key[i] in c) ? $c[key[i]] : "")
	# nodes: absent in older files and empty in kbench's rows, both one
	nd = ("nodes" in c) && $c["nodes"] > 1 ? $c["nodes"] : 1
	k = k SUBSEP nd
	f = fno
	if (!((f, k) in n)) {
		n[f, k] = 0
		order[f, ++nk[f]] = k
		shape[k] = $c["heads_q"] ":" $c["heads_kv"] " hd" $c["head_dim"] " " $c["dtype"] " b" $c["batch"]
		desc[k] = $c["tool"] "\t" $c["kernel"] "\t" $c["mask"] "\t" $c["seqlen_q"] ($c["seqlen_k"] != $c["seqlen_q"] ? "x" $c["seqlen_k"] : "") "\t" $c["pass"]
		w = $c["world"]
		if (w != "" && w != 1)
			w = w (("ulysses" in c) && $c["ulysses"] != "" ? " " $c["ulysses"] "x" $c["ring"] : "") \
			    (nd > 1 ? " " nd "n" : "")
		world[k] = w == "" ? "-" : w
	}
	st = $c["status"]
	if (!((f, k) in status) || rank[st] > rank[status[f, k]])
		status[f, k] = st
	if (st == "ok") {
		x = $c["tflops"] + 0
		# kbench's FLOP count where the column's digits are too few (CPU
		# rows), as aggregate.awk does
		if (x < 10 && $c["tool"] == "kbench" && ("area" in c) && ("ms_median" in c) && $c["ms_median"] > 0)
			x = ($c["pass"] == "bwd" ? 10 : 4) * $c["area"] * $c["heads_q"] * $c["head_dim"] * $c["batch"] / ($c["ms_median"] * 1e9)
		v[f, k, ++n[f, k]] = x
		ms[f, k, n[f, k]] = ("ms_median" in c) ? $c["ms_median"] + 0 : 0
		if ($c["mem_gib"] + 0 > mem[f, k]) mem[f, k] = $c["mem_gib"] + 0
	}
	nrows[f]++
	if (("stack" in c) && !((f, $c["stack"]) in stk)) {
		stk[f, $c["stack"]] = 1; stkl[f, ++nstk[f]] = $c["stack"]
	}
	if (("commit" in c) && !((f, $c["commit"]) in com)) {
		com[f, $c["commit"]] = 1; ncom[f]++; onecom[f] = $c["commit"]
	}
}

# Median of a[f, k, 1..m].
function median(a, f, k, m,    i, j, x, t) {
	for (i = 1; i <= m; i++) t[i] = a[f, k, i]
	for (i = 2; i <= m; i++) {
		x = t[i]
		for (j = i; j > 1 && t[j - 1] > x; j--) t[j] = t[j - 1]
		t[j] = x
	}
	return m % 2 ? t[(m + 1) / 2] : (t[m / 2] + t[m / 2 + 1]) / 2
}

# What a file's rows ran on: its commit, or how many; the union of its
# stacks' parts (driver=... cuda=...), or how many stacks when a part has
# two versions.
function what(f,    x, j, m, p, i, kk, ver, u, conflict) {
	u = ""; conflict = 0
	for (j = 1; j <= nstk[f]; j++) {
		m = split(stkl[f, j], p, " ")
		for (i = 1; i <= m; i++) {
			if (p[i] == "-") continue
			kk = p[i]; sub(/=.*/, "", kk)
			if (!(kk in ver)) { ver[kk] = p[i]; u = u (u == "" ? "" : " ") p[i] }
			else if (ver[kk] != p[i]) conflict = 1
		}
	}
	x = ncom[f] == 1 ? "commit " onecom[f] : (ncom[f] + 0) " commits"
	if (conflict) return x ", " nstk[f] " stacks"
	return x (u != "" ? ", " u : "")
}

function cell(st, x) {
	if (st == "ok") return sprintf(x >= 0.1 || x == 0 ? "%.1f" : "%.2g", x)
	if (st == "oom") return "OOM"
	if (st == "unsupported") return "X"
	if (st == "wrong") return "!"
	return "ERR"
}

# An unmatched row: its key, spaced.
function row(k,    s) {
	s = desc[k] "\t" shape[k] "\t" world[k]
	gsub(/\t/, "  ", s)
	print "  " s
}

function ratio(a, b) { return a > 0 && b > 0 ? sprintf("%.3f", b / a) : "-" }

function out(line,    m, p, i, w) {
	m = split(line, p, "\t")
	L[++nl] = line
	for (i = 1; i <= m; i++)
		if (length(p[i]) > wd[i]) wd[i] = length(p[i])
}

END {
	if (bad)
		exit 2
	if (fno != 2)
		die("--compare: want two files, OLD and NEW")
	for (f = 1; f <= 2; f++)
		if (nrows[f] == 0)
			die(fname[f] ": no result rows")
	out("tool\tkernel\tmask\tseqlen\tpass\tshape\tworld\told TFLOP/s\tnew TFLOP/s\tspeed new/old\told GiB\tnew GiB\tmem new/old\t")
	matched = slower = changed = faster = 0
	for (i = 1; i <= nk[1]; i++) {
		k = order[1, i]
		if (!((2, k) in n)) {
			gone[++ngone] = k
			continue
		}
		matched++
		so = status[1, k]; sn = status[2, k]
		to = so == "ok" ? median(v, 1, k, n[1, k]) : 0
		tn = sn == "ok" ? median(v, 2, k, n[2, k]) : 0
		r = "-"; verdict = ""
		if (so == "ok" && sn == "ok") {
			mo = median(ms, 1, k, n[1, k]); mn = median(ms, 2, k, n[2, k])
			# the ratio of the times where the TFLOP/s column rounded to 0
			x = to > 0 && tn > 0 ? tn / to : mo > 0 && mn > 0 ? mo / mn : -1
			if (x >= 0) {
				r = sprintf("%.3f", x)
				if (x < 1 - thr / 100) { verdict = "SLOWER"; slower++ }
				else if (x > 1 + thr / 100) { verdict = "faster"; faster++ }
			}
		} else if (so != sn) {
			if (so == "ok" && (sn == "wrong" || sn == "oom" || sn == "error")) {
				verdict = "WAS OK"; changed++
			} else
				verdict = "status"
		}
		out(desc[k] "\t" shape[k] "\t" world[k] "\t" cell(so, to) "\t" cell(sn, tn) "\t" r "\t" \
		    (so == "ok" ? sprintf("%.3f", mem[1, k]) : "-") "\t" (sn == "ok" ? sprintf("%.3f", mem[2, k]) : "-") "\t" \
		    (so == "ok" && sn == "ok" ? ratio(mem[1, k], mem[2, k]) : "-") "\t" verdict)
	}
	for (i = 1; i <= nk[2]; i++)
		if (!((1, order[2, i]) in n))
			new[++nnew] = order[2, i]
	if (matched == 0)
		die("--compare: no row of " fname[2] " matches a row of " fname[1] " (tool, kernel, mask, seqlens, shape, pass, world, degrees)")
	printf "OLD %s (%s)\nNEW %s (%s)\n\n", fname[1], what(1), fname[2], what(2)
	for (i = 1; i <= nl; i++) {
		m = split(L[i], p, "\t")
		line = ""
		for (j = 1; j <= m; j++)
			line = line (j > 1 ? "  " : "") sprintf(j <= 7 ? "%-" wd[j] "s" : "%" wd[j] "s", p[j])
		sub(/ +$/, "", line)
		print line
	}
	if (ngone) {
		printf "\nonly in OLD (%d):\n", ngone
		for (i = 1; i <= ngone; i++) row(gone[i])
	}
	if (nnew) {
		printf "\nonly in NEW (%d):\n", nnew
		for (i = 1; i <= nnew; i++) row(new[i])
	}
	printf "\n%d rows matched: %d slower by more than %s%%, %d from ok to wrong, oom or error, %d faster; %d only in OLD, %d only in NEW\n", \
	    matched, slower, thr, changed, faster, ngone, nnew
	exit (slower + changed > 0) ? 1 : 0
}
