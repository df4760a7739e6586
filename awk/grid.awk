# grid.awk: the aggregate of aggregate.awk as the paper's figures, one
# gnuplot script (tmp/grid.gp) drawing, per pass, a grid of panels, one per
# mask:
#   fig-PASS     kernel rows: bars of TFLOP/s per sequence length, a colour
#                per kernel;
#   fig-cp-PASS  cpbench rows (labels strategy/world): lines of per-GPU
#                TFLOP/s over the world size, one per strategy (and Ulysses x
#                ring degrees, and tokens per GPU when several).
# A cell that ran out of memory or failed is marked E, an unsupported one X,
# a wrong one !, as the paper marks them; nothing is drawn where nothing was
# measured.  One y axis for a figure, so panels compare at a glance, unless
# its rows differ in shape or device.
# Variables: tmp (scratch directory), dir (where the pictures go), term
# (pngcairo or png).  Pictures are drawn to dir/.NAME.tmp; stdout lists
# "TMP<TAB>FINAL" pairs for the caller to rename, as plot.awk does.

BEGIN {
	FS = "\t"; gp = tmp "/grid.gp"; nfig = 0; ncol[0] = ncol[1] = 0
	npal = split("#4e79a7 #f28e2b #59a14f #e15759 #b07aa1 #76b7b2 #edc948 #9c755f #ff9da7 #bab0ac", pal, " ")
	# filled circle, square, triangles, diamond, pentagon: lines that
	# coincide still show each point
	npts = split("7 5 9 11 13 15", pts, " ")
}

NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }

function q(s) { gsub(/"/, "'", s); return "\"" s "\"" }

function kilo(n) {
	if (n >= 1048576 && n % 1048576 == 0) return (n / 1048576) "M"
	if (n >= 1024 && n % 1024 == 0) return (n / 1024) "K"
	return n
}

# Adds the key=value parts of s to figure f's stack; a part with two
# versions spoils it.
function addstack(f, s,    n, p, i, k) {
	n = split(s, p, " ")
	for (i = 1; i <= n; i++) {
		k = p[i]; sub(/=.*/, "", k)
		if (!((f, k) in fver)) {
			fver[f, k] = p[i]
			fstk[f] = fstk[f] (fstk[f] == "" ? "" : " ") p[i]
		} else if (fver[f, k] != p[i])
			fbadstk[f] = 1
	}
}

{
	label = $c["label"]; pass = $c["pass"]; mask = $c["mask"]
	if ((slash = index(label, "/")) > 0) {
		# cpbench: strategy/world, then (UxR), (Nn) or (UxR,Nn): degrees, nodes
		cp = 1
		base = substr(label, 1, slash - 1)
		rest = substr(label, slash + 1)
		x = rest + 0
		if ((p = index(rest, "(")) > 0)
			base = base " " substr(rest, p)
		tpg = x > 0 ? int($c["seqlen"] / x) : $c["seqlen"]
	} else {
		cp = 0; base = label; x = $c["seqlen"] + 0; tpg = ""
	}
	f = (cp ? "cp-" : "") pass
	if (!(f in fid)) {
		fid[f] = ++nfig; fname[nfig] = f; fcp[nfig] = cp; fpass[nfig] = pass
		fshape[nfig] = "heads " $c["heads_q"] ":" $c["heads_kv"] ", head_dim " $c["head_dim"] ", " $c["dtype"] ", batch " $c["batch"]
		fdev[nfig] = $c["device"]; fmix[nfig] = 0; npan[nfig] = nser[nfig] = nx[nfig] = ntpg[nfig] = 0
		fmax[nfig] = 0
	}
	fi = fid[f]
	if ("heads " $c["heads_q"] ":" $c["heads_kv"] ", head_dim " $c["head_dim"] ", " $c["dtype"] ", batch " $c["batch"] != fshape[fi] || $c["device"] != fdev[fi] || $c["mixed"] == 1)
		fmix[fi] = 1
	if ("stack" in c && $c["stack"] != "" && !((fi, $c["stack"]) in seenstk)) {
		seenstk[fi, $c["stack"]] = 1
		addstack(fi, $c["stack"])
	}
	if (!((fi, mask) in pid)) {
		pid[fi, mask] = ++npan[fi]; pmask[fi, npan[fi]] = mask; pnx[fi, npan[fi]] = 0
	}
	pi = pid[fi, mask]
	s = base SUBSEP tpg
	if (!((fi, s) in sid)) {
		sid[fi, s] = ++nser[fi]; sbase[fi, nser[fi]] = base; stpg[fi, nser[fi]] = tpg
		# colours and points by first appearance, kernels and strategies
		# each from the start of the palette
		if (!(base in col)) {
			col[base] = pal[ncol[cp] % npal + 1]
			pt[base] = pts[ncol[cp] % npts + 1]
			ncol[cp]++
		}
	}
	si = sid[fi, s]
	if (tpg != "" && !((fi, tpg) in tpgi)) {
		tpgi[fi, tpg] = ++ntpg[fi]; onetpg[fi] = tpg
	}
	# x values: a panel's own sequence lengths (kernels), the figure's
	# world sizes (CP, so lines read across panels alike)
	if (!((fi, pi, x) in seenpx)) {
		seenpx[fi, pi, x] = 1; px[fi, pi, ++pnx[fi, pi]] = x
	}
	if (!((fi, x) in seenx)) {
		seenx[fi, x] = 1; fx[fi, ++nx[fi]] = x
	}
	has[fi, pi, si] = 1
	st[fi, pi, si, x] = $c["status"]
	if ($c["status"] == "ok") {
		val[fi, pi, si, x] = $c["tflops"] + 0
		if ($c["tflops"] + 0 > fmax[fi]) fmax[fi] = $c["tflops"] + 0
		if ($c["tflops"] + 0 > pmax[fi, pi]) pmax[fi, pi] = $c["tflops"] + 0
	}
}

# A round upper bound of the y axis above m.
function ytop(m,    step) {
	if (m <= 0) return 1
	m *= 1.08
	step = 10 ^ int(log(m) / log(10))
	if (m / step < 2) step /= 5
	else if (m / step < 5) step /= 2
	return (int(m / step) + 1) * step
}

function mark(s) {
	if (s == "oom" || s == "error") return "E"
	if (s == "unsupported") return "X"
	if (s == "wrong") return "!"
	return ""
}

function slabel(fi, j) {
	return sbase[fi, j] (ntpg[fi] > 1 ? " " kilo(stpg[fi, j]) "/GPU" : "")
}

# A CP series' line: the strategy's colour; its point, or with several
# token counts per GPU the count's point and dash.
function lstyle(fi, j,    t) {
	if (ntpg[fi] <= 1)
		return " with linespoints lw 2 pt " pt[sbase[fi, j]] " ps 1.4 lc rgb " q(col[sbase[fi, j]])
	t = tpgi[fi, stpg[fi, j]]
	return " with linespoints lw 2 dt " t " pt " pts[(t - 1) % npts + 1] " ps 1.4 lc rgb " q(col[sbase[fi, j]])
}

# One figure to both terminals.
function figure(fi,    n, C, R, W, H, top, bot, cw, ch, k, pi, j, i, nsp, sp, xs, m, x, dat, line, bw, off, pl, v, title, name, y0, t, ym, xt, tl, kw, kc, kr) {
	n = npan[fi]
	C = n <= 3 ? n : n <= 4 ? 2 : n <= 9 ? 3 : n <= 16 ? 4 : 5
	R = int((n + C - 1) / C)
	W = C * 430; if (W < 1100) W = 1100
	# the band above the grid: the title's lines, then the key's rows
	# (gnuplot gives an entry about 11 px a character and 80 px more, in
	# the canvas less 200 px)
	kw = 0
	for (j = 1; j <= nser[fi]; j++)
		if (length(slabel(fi, j)) > kw) kw = length(slabel(fi, j))
	kc = int((W - 200) / (kw * 11 + 80)); if (kc < 1) kc = 1
	kr = int((nser[fi] + kc - 1) / kc)
	tl = (fstk[fi] != "" && !(fi in fbadstk)) ? 3 : 2
	top = 16 + tl * 26 + kr * 24 + 24; bot = 36
	H = R * 330 + top + bot
	cw = 1 / C; ch = (1 - (top + bot) / H) / R
	ym = ytop(fmax[fi])
	name = "fig-" fname[fi]
	if (fcp[fi])
		title = "Context parallelism, " (fpass[fi] == "bwd" ? "backward" : "forward") " pass: per-GPU TFLOP/s over the number of GPUs"
	else
		title = "Attention kernels, " (fpass[fi] == "bwd" ? "backward" : "forward") " pass: TFLOP/s over the sequence length"
	t = fshape[fi] (fcp[fi] && ntpg[fi] == 1 ? ", " kilo(onetpg[fi]) " tokens per GPU" : "") ", " fdev[fi]
	if (fmix[fi]) t = t " (and other shapes or devices)"
	if (fstk[fi] != "" && !(fi in fbadstk)) t = t "\\n" fstk[fi]
	for (k = 1; k <= 2; k++) {
		if (k == 1)
			printf "set terminal %s size %d,%d noenhanced font \",12\"\n", term, W, H > gp
		else
			printf "set terminal svg size %d,%d noenhanced font \",12\"\n", W, H > gp
		printf "set output %s\n", q(dir "/." name (k == 1 ? ".png" : ".svg") ".tmp") > gp
		print "reset" > gp
		printf "set multiplot title %s font \",16\"\n", q(title "\\n" t) > gp
		print "set grid ytics lc rgb \"#d0d0d0\"" > gp
		print "set lmargin 11; set rmargin 2; set tmargin 2.2; set bmargin 3.2" > gp
		print "set ytics font \",10\"" > gp
		print "set xtics font \",10\" nomirror" > gp
		print "set ytics nomirror" > gp
		for (pi = 1; pi <= n; pi++) {
			print "unset label; unset key" > gp
			printf "set origin %.5f,%.5f\n", ((pi - 1) % C) * cw, (bot / H) + (R - 1 - int((pi - 1) / C)) * ch > gp
			printf "set size %.5f,%.5f\n", cw, ch > gp
			printf "set title %s font \",14\"\n", q(pmask[fi, pi]) > gp
			printf "set ylabel %s\n", ((pi - 1) % C == 0 ? q(fcp[fi] ? "TFLOP/s per GPU" : "TFLOP/s") : "\"\"") > gp
			printf "set xlabel %s\n", (pi + C > n ? q(fcp[fi] ? "GPUs (world size)" : "sequence length (tokens)") : "\"\"") > gp
			# the series of this panel, in the figure's order
			nsp = 0
			for (j = 1; j <= nser[fi]; j++)
				if ((fi, pi, j) in has) sp[++nsp] = j
			# its x values: the panel's (kernels) or the figure's (CP)
			m = 0
			if (fcp[fi]) for (i = 1; i <= nx[fi]; i++) xs[++m] = fx[fi, i]
			else for (i = 1; i <= pnx[fi, pi]; i++) xs[++m] = px[fi, pi, i]
			nsort(xs, m)
			xt = ""
			for (i = 1; i <= m; i++)
				xt = xt (i > 1 ? ", " : "") q(kilo(xs[i])) " " (i - 1)
			printf "set xtics (%s)\n", xt > gp
			printf "set xrange [-0.6:%s]\n", m - 0.4 > gp
			dat = tmp "/grid" fi "_" pi ".dat"
			if (k == 1) {
				for (i = 1; i <= m; i++) {
					line = i - 1
					for (j = 1; j <= nsp; j++)
						line = line "\t" (((fi, pi, sp[j], xs[i]) in val) ? val[fi, pi, sp[j], xs[i]] : "NaN")
					print line > dat
				}
				close(dat)
			}
			bw = fcp[fi] ? 0.07 : 0.84 / (nsp > 0 ? nsp : 1)
			# one y axis for the figure; a panel's own when shapes or
			# devices differ (a CPU row beside GPU ones would be 0)
			if (fmix[fi])
				ym = ytop(pmax[fi, pi])
			printf "set yrange [0:%s]\n", ym > gp
			y0 = ym * 0.05
			for (i = 1; i <= m; i++)
				for (j = 1; j <= nsp; j++) {
					if ((v = mark(st[fi, pi, sp[j], xs[i]])) == "") continue
					off = (j - (nsp + 1) / 2) * bw
					# a CP mark in its line's colour: no bar slot says whose
					printf "set label %s at %.4f,%s center front font \",15\" tc rgb %s\n", q(v), (i - 1) + off, y0, q(fcp[fi] ? col[sbase[fi, sp[j]]] : "#b00000") > gp
				}
			pl = ""
			for (j = 1; j <= nsp; j++) {
				off = fcp[fi] ? 0 : (j - (nsp + 1) / 2) * bw
				pl = pl (pl == "" ? "" : ", ") q(dat) " using ($1+" off "):" (j + 1) " notitle"
				if (fcp[fi])
					pl = pl lstyle(fi, sp[j])
				else
					pl = pl " with boxes fs solid 0.9 border lc rgb \"#303030\" lc rgb " q(col[sbase[fi, sp[j]]])
			}
			if (!fcp[fi])
				printf "set boxwidth %s absolute\n", bw > gp
			if (pl == "")
				pl = "NaN notitle"
			print "plot " pl > gp
		}
		# the shared key above the grid, drawn over the whole canvas so
		# it is not squeezed into one panel's width; what the marks mean
		print "unset label; unset title; unset xlabel; unset ylabel; unset border; unset tics; unset grid" > gp
		print "set origin 0,0; set size 1,1; set xrange [0:1]; set yrange [0:1]" > gp
		printf "set key at screen 0.5,%.5f center top horizontal maxrows %d reverse Left font \",13\" samplen 2.5 width 2\n", 1 - (14 + tl * 26) / H, kr > gp
		printf "set label %s at screen 0.01,%.5f left font \",11\" tc rgb \"#404040\"\n", q("E: out of memory or error    X: unsupported    !: wrong result    (blank: not measured)"), 14 / H > gp
		pl = ""
		for (j = 1; j <= nser[fi]; j++)
			pl = pl (pl == "" ? "" : ", ") "NaN title " q(slabel(fi, j)) (fcp[fi] ? lstyle(fi, j) : " with boxes fs solid 0.9 border lc rgb \"#303030\" lc rgb " q(col[sbase[fi, j]]))
		print "plot " pl > gp
		print "unset multiplot" > gp
		print "set output" > gp
	}
	print dir "/." name ".png.tmp\t" dir "/" name ".png"
	print dir "/." name ".svg.tmp\t" dir "/" name ".svg"
}

END {
	for (fi = 1; fi <= nfig; fi++)
		figure(fi)
	close(gp)
}
