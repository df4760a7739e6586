# Functions the summarize programs share; given first, with -f, to the
# programs that call them.  A caller defines die(msg) and the columns it
# needs in need[1..nneed].

# Maps the header line's columns to c[name]; where names the input in the
# error a missing column gets.
function mapcols(where,    i) {
	split("", c)
	for (i = 1; i <= NF; i++)
		c[$i] = i
	for (i = 1; i <= nneed; i++)
		if (!(need[i] in c))
			die(where ": line " FNR ": header lacks column " need[i])
	ncols = NF
}

# Shell sort of a[1..m] (numbers): a table's few seqlens or world sizes.
function nsort(a, m,    gap, i, j, x) {
	for (gap = int(m / 2); gap > 0; gap = int(gap / 2))
		for (i = gap + 1; i <= m; i++) {
			x = a[i]
			for (j = i; j > gap && a[j - gap] > x; j -= gap)
				a[j] = a[j - gap]
			a[j] = x
		}
}
