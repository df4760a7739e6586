# table.awk: the aggregate of aggregate.awk as one table per (mask, pass):
# rows seqlen, columns labels, cells TFLOP/s (one decimal, or two
# significant digits below 0.1), OOM, X (unsupported), ! (wrong), ERR, and
# - where nothing was measured.  fmt=table (aligned text) or fmt=md.

BEGIN { FS = "\t"; nt = 0 }

NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }

function cell(st, v) {
	if (st == "ok")
		return v + 0 >= 0.1 || v + 0 == 0 ? sprintf("%.1f", v) : sprintf("%.2g", v)
	if (st == "oom") return "OOM"
	if (st == "unsupported") return "X"
	if (st == "wrong") return "!"
	return "ERR"
}

function flush(    i, j, w, line, sep, x) {
	if (nr == 0)
		return
	if (nt++)
		print ""
	if (fmt == "md") {
		print "### " title
		print ""
		line = "| seqlen |"; sep = "|---:|"
		for (j = 1; j <= nl; j++) {
			line = line " " lab[j] " |"; sep = sep "---:|"
		}
		print line
		print sep
		for (i = 1; i <= nr; i++) {
			line = "| " row[i] " |"
			for (j = 1; j <= nl; j++)
				line = line " " ((i, j) in v ? v[i, j] : "-") " |"
			print line
		}
	} else {
		print title
		w[0] = length("seqlen")
		for (i = 1; i <= nr; i++)
			if (length(row[i]) > w[0]) w[0] = length(row[i])
		for (j = 1; j <= nl; j++) {
			w[j] = length(lab[j])
			for (i = 1; i <= nr; i++)
				if ((i, j) in v && length(v[i, j]) > w[j]) w[j] = length(v[i, j])
		}
		line = sprintf("%" w[0] "s", "seqlen")
		for (j = 1; j <= nl; j++)
			line = line sprintf("  %" w[j] "s", lab[j])
		print line
		for (i = 1; i <= nr; i++) {
			line = sprintf("%" w[0] "s", row[i])
			for (j = 1; j <= nl; j++) {
				x = (i, j) in v ? v[i, j] : "-"
				line = line sprintf("  %" w[j] "s", x)
			}
			print line
		}
	}
	for (x in v) delete v[x]
	for (x in li) delete li[x]
	nr = nl = 0
}

{
	t = $c["mask"] SUBSEP $c["pass"]
	if (t != cur) {
		flush()
		cur = t
		title = $c["mask"] " " $c["pass"] ": heads " $c["heads_q"] ":" $c["heads_kv"] ", head_dim " $c["head_dim"] ", " $c["dtype"] ", batch " $c["batch"] ", " $c["device"]
		if ("stack" in c && $c["stack"] != "")
			title = title ", " $c["stack"]
		if ($c["mixed"] == 1)
			title = title " (and other shapes or devices)"
		lastsl = ""
	}
	if ($c["seqlen"] != lastsl) {
		row[++nr] = $c["seqlen"]
		lastsl = $c["seqlen"]
	}
	if (!($c["label"] in li)) {
		li[$c["label"]] = ++nl
		lab[nl] = $c["label"]
	}
	v[nr, li[$c["label"]]] = cell($c["status"], $c["tflops"])
}

END { flush() }
