# plot.awk: the aggregate of aggregate.awk as one gnuplot script drawing,
# per (mask, pass), grouped bars of TFLOP/s by seqlen, a colour per label
# (the same colour for a label in every plot), OOM, X, ! and ERR written at
# zero height.  Variables: tmp (a scratch directory for data and the
# script), dir (where the pictures go), term (pngcairo or png).  Each
# picture is drawn to dir/.NAME.tmp; stdout lists "TMP<TAB>FINAL" pairs
# for the caller to rename, so no partial picture is ever left in dir.

BEGIN { FS = "\t"; nt = 0; ng = 0; gp = tmp "/plots.gp" }

NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }

function q(s) { gsub(/"/, "'", s); return "\"" s "\"" }

function kilo(n) { return n % 1024 == 0 ? (n / 1024) "K" : n }

function flush(    i, j, name, dat, x, max, pl, txt, col) {
	if (nr == 0)
		return
	nt++
	name = mask "_" pass
	gsub(/[^A-Za-z0-9_.-]/, "_", name)
	dat = tmp "/" nt ".dat"
	max = 0
	for (i = 1; i <= nr; i++) {
		x = kilo(row[i])
		for (j = 1; j <= nl; j++) {
			col = (i, j) in st && st[i, j] == "ok" ? val[i, j] : 0
			if (col > max) max = col
			x = x "\t" col
		}
		print x > dat
	}
	close(dat)
	print "unset label" > gp
	for (i = 1; i <= nr; i++)
		for (j = 1; j <= nl; j++) {
			txt = ""
			if (!((i, j) in st)) continue
			if (st[i, j] == "oom") txt = "OOM"
			else if (st[i, j] == "unsupported") txt = "X"
			else if (st[i, j] == "wrong") txt = "!"
			else if (st[i, j] == "error") txt = "ERR"
			if (txt != "")
				printf "set label %s at %.4f,0 rotate by 90 left offset 0,0.3 font \",9\" tc rgb \"#b00000\"\n", q(txt), (i - 1) + (j - 1 - (nl - 1) / 2) / (nl + 1) > gp
		}
	printf "set title %s\n", q(title) > gp
	printf "set yrange [0:%s]\n", (max > 0 ? "*" : "1") > gp
	pl = ""
	for (j = 1; j <= nl; j++)
		pl = pl (j > 1 ? ", \"\"" : q(dat)) " using " (j + 1) (j == 1 ? ":xtic(1)" : "") " title " q(lab[j]) " lc " gcol[lab[j]]
	printf "set terminal %s size 1000,560 noenhanced font \",11\"\n", term > gp
	printf "set output %s\n", q(dir "/." name ".png.tmp") > gp
	print "plot " pl > gp
	print "set output" > gp
	print "set terminal svg size 1000,560 noenhanced font \",11\"" > gp
	printf "set output %s\n", q(dir "/." name ".svg.tmp") > gp
	print "plot " pl > gp
	print "set output" > gp
	print dir "/." name ".png.tmp\t" dir "/" name ".png"
	print dir "/." name ".svg.tmp\t" dir "/" name ".svg"
	for (x in st) delete st[x]
	for (x in li) delete li[x]
	nr = nl = 0
}

{
	t = $c["mask"] SUBSEP $c["pass"]
	if (t != cur) {
		flush()
		cur = t
		mask = $c["mask"]; pass = $c["pass"]
		title = mask " " pass ": heads " $c["heads_q"] ":" $c["heads_kv"] ", head_dim " $c["head_dim"] ", " $c["dtype"] ", batch " $c["batch"] ", " $c["device"]
		if ("stack" in c && $c["stack"] != "")
			title = title "\\n" $c["stack"]
		lastsl = ""
		if (nt == 0 && ng == 0) {
			print "set style data histogram" > gp
			print "set style histogram cluster gap 1" > gp
			print "set style fill solid 0.85 border -1" > gp
			print "set boxwidth 0.9" > gp
			print "set ylabel \"TFLOP/s\"" > gp
			print "set xlabel \"sequence length\"" > gp
			print "set key top left" > gp
			print "set grid ytics" > gp
		}
	}
	if ($c["seqlen"] != lastsl) {
		row[++nr] = $c["seqlen"]
		lastsl = $c["seqlen"]
	}
	l = $c["label"]
	if (!(l in gcol))
		gcol[l] = ++ng
	if (!(l in li)) {
		li[l] = ++nl
		lab[nl] = l
	}
	st[nr, li[l]] = $c["status"]
	val[nr, li[l]] = $c["tflops"]
}

END { flush(); close(gp) }
