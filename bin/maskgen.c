/* maskgen: builds a mask pattern into a mask file; lists the patterns;
 * describes, checks or draws a mask file. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hist.h"
#include "mask.h"
#include "pattern.h"
#include "plan.h"
#include "render.h"
#include "util.h"

enum { O_RATIO = 256, O_BUCKETS, O_STARTROW, O_SPANS, O_MINBLOCK, O_AVGBLOCK, O_PLAN, O_HEAD, O_LONG, O_SIZE, O_TIME };

static void usage(void)
{
	fprintf(stderr,
	    "usage: maskgen -p NAME -n S [-s SEED] [-L LENGTHS|-] [-d DIST] [--long] [-w WINDOW]\n"
	    "               [-g GLOBAL] [-P PREFIX] [-B BLOCK] [-H HEADS] [--ratio R]\n"
	    "               [--min-block N] [--avg-block N] [--buckets N] [--start-row R]\n"
	    "               [--spans OFF:LEN,...] [-f SLICES] [-o FILE]\n"
	    "       maskgen -l\n"
	    "       maskgen -i FILE [--plan BQxBK] [-t]\n"
	    "       maskgen -c FILE\n"
	    "       maskgen -r FILE -o PICTURE.png|.svg|.pgm [--head H] [--size N]\n"
	    "  -p, --pattern NAME     the pattern (maskgen -l lists them)\n"
	    "  -n, --seqlen S         tokens (K/M suffixes)\n"
	    "  -s, --seed SEED        random seed (default 0)\n"
	    "  -L, --lengths FILE     document lengths (seqsample's TSV); - is stdin\n"
	    "  -d, --dist NAME|FILE   histogram to sample documents from (default by S)\n"
	    "      --long             sample documents as the reference's *_document_long\n"
	    "  -w, --window W         sliding window (default 1024)\n"
	    "  -g, --global G         global tokens (default 2W)\n"
	    "  -P, --prefix P         prefix length (default random)\n"
	    "  -B, --block B          block size (block_causal_document 1024, block_sparse_uniform 64)\n"
	    "  -H, --heads N          mask heads of block-sparse patterns (default 8)\n"
	    "      --ratio R          fraction of key blocks kept (default 0.5)\n"
	    "      --min-block N      block_sparse_variable: smallest block (default 128)\n"
	    "      --avg-block N      block_sparse_variable: mean block (default 512)\n"
	    "      --buckets N        hash_sparse buckets (default 16)\n"
	    "      --start-row R      random_eviction: first evicting row (default S/2)\n"
	    "      --spans LIST       qk_sparse spans OFF:LEN,... (default scaled from 8K)\n"
	    "  -f, --file SLICES      custom: slice list, 'q0 q1 k0 k1 kind' per line\n"
	    "  -o, --output FILE      mask file or picture (default stdout for a mask)\n"
	    "  -l, --list             list the patterns\n"
	    "  -i, --info FILE        describe a mask file\n"
	    "      --plan BQxBK       with -i: plan statistics for that tile shape\n"
	    "  -t, --time             with -i: read and plan times in ms\n"
	    "  -c, --check FILE       validate a mask file\n"
	    "  -r, --render FILE      draw a mask file\n"
	    "      --head H           with -r: the mask head drawn (default 0)\n"
	    "      --size N           with -r: cells on the longer side (default 512)\n"
	    "  -h, --help             this help\n"
	    "      --version          the version, commit and build features\n");
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void readmask(const char *path, struct mask *m)
{
	char emsg[512];

	if (mask_read(path, m, emsg, sizeof emsg) == -1)
		errx(EXIT_BADINPUT, "%s: %s", path, emsg);
}

static int cmpint(const void *a, const void *b)
{
	const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;

	return (x > y) - (x < y);
}

/* Tiles that see keys in one 64-key half of 128 (a partial tile's cuts,
 * or the ragged last k-tile): a kernel that runs such a tile as a half
 * (hopper's half tiles) does half its MMA work. */
static int64_t half_tiles(const struct plan *p)
{
	int64_t n = 0;

	for (int r = 0; r < p->nrows; r++)
		for (int e = p->row[r]; e < p->row[r + 1]; e++)
			n += plan_ent_half(p, r, e) != 0;
	return n;
}

/* The k-tiles' columns as a backward pass walks them (the transposed
 * plan's rows that visit a tile): how many, and the median and longest
 * in tiles, whose fill and drain a short column pays for fewer tiles. */
static void columns(const char *path, const struct plan *p)
{
	struct plan t;
	char emsg[512];
	int32_t *len;
	int n = 0;

	if (plan_transpose(&t, p, emsg, sizeof emsg) == -1)
		errx(EXIT_BADINPUT, "%s: plan transpose: %s", path, emsg);
	len = xcalloc(t.nrows ? t.nrows : 1, sizeof *len);
	for (int r = 0; r < t.nrows; r++)
		if ((len[n] = (int32_t)plan_row_tiles(&t, r)) > 0)
			n++;
	qsort(len, n, sizeof *len, cmpint);
	printf("columns\t%d\ncolumn_tiles_median\t%d\ncolumn_tiles_max\t%d\n", n, n ? len[n / 2] : 0,
	    n ? len[n - 1] : 0);
	free(len);
	plan_free(&t);
}

static void info(const char *path, const char *plan, int timing)
{
	struct mask m;
	double t0 = now_ms(), t1, t2;
	uint64_t kept = 0;
	int bq = 0, bk = 0;
	char c;

	if (plan != NULL && (sscanf(plan, "%dx%d%c", &bq, &bk, &c) != 2 || bq < 1 || bk < 1 || bq > 65536 || bk > 65536))
		errx(EXIT_BADINPUT, "--plan '%s': want BQxBK, e.g. 128x128", plan);
	readmask(path, &m);
	t1 = now_ms();
	printf("pattern\t%s\nparams\t%s\n", m.pattern, m.params);
	printf("seqlen_q\t%lld\nseqlen_k\t%lld\nheads\t%d\n", (long long)m.sq, (long long)m.sk, m.heads);
	printf("body\t%s\nslices\t%zu\n", m.body == MASK_BODY_BLOCKS ? "blocks" : "slices", m.nslices);
	if (m.body == MASK_BODY_BLOCKS) {
		for (int h = 0; h < m.heads; h++)
			for (int64_t i = 0; i < m.nqb; i++)
				for (int64_t j = 0; j < m.nkb; j++)
					kept += (uint64_t)mask_getblock(&m, h, i, j);
		printf("qblocks\t%lld\nkblocks\t%lld\nblocks\t%llu\n", (long long)m.nqb, (long long)m.nkb,
		    (unsigned long long)kept);
	}
	printf("area\t%llu\n", (unsigned long long)m.area);
	printf("density\t%.6g\n", (double)m.area / ((double)m.sq * (double)m.sk * m.heads));
	if (plan != NULL) {
		struct plan p;
		char emsg[512];

		if (plan_build(&p, &m, bq, bk, emsg, sizeof emsg) == -1)
			errx(EXIT_BADINPUT, "%s: plan %s: %s", path, plan, emsg);
		t2 = now_ms();
		printf("plan\t%dx%d\nplan_rows\t%d\nplan_entries\t%d\nplan_cuts\t%d\n", bq, bk, p.nrows, p.nent, p.ncut);
		printf("tiles_full\t%lld\ntiles_partial\t%lld\n", (long long)p.ntiles_full, (long long)p.ntiles_partial);
		/* the most of the full mask's rate a kernel on these tiles can
		 * reach: its MMAs cover every visited tile whole */
		const double tiles = (double)(p.ntiles_full + p.ntiles_partial);
		printf("tile_bound\t%.4f\n", tiles > 0 ? (double)m.area / (tiles * bq * bk) : 0.0);
		if (bk == 128) {
			const int64_t h = half_tiles(&p);
			printf("half_tiles\t%lld\nhalf_bound\t%.4f\n", (long long)h,
			    tiles > 0 ? (double)m.area / ((tiles - h / 2.0) * bq * bk) : 0.0);
		}
		columns(path, &p);
		if (timing)
			printf("plan_ms\t%.3f\n", t2 - t1);
		plan_free(&p);
	}
	if (timing)
		printf("read_ms\t%.3f\n", t1 - t0);
	mask_free(&m);
}

static void render(const char *path, const char *out, int head, int size)
{
	struct mask m;
	struct picture pic;
	struct outfile o;
	char emsg[512];
	int fmt;

	if (out == NULL)
		errx(EXIT_BADINPUT, "-r needs -o PICTURE.png, .svg or .pgm");
	if ((fmt = render_format(out)) == -1)
		errx(EXIT_BADINPUT, "%s: unknown picture type (want .png, .svg or .pgm)", out);
	readmask(path, &m);
	if (render_mask(&m, head, size, &pic, emsg, sizeof emsg) == -1)
		errx(EXIT_BADINPUT, "%s: %s", path, emsg);
	out_open(&o, out);
	if (render_write(o.fp, &pic, fmt) == -1) {
		out_abort(&o);
		errx(EXIT_BADINPUT, "%s: write error", out);
	}
	out_close(&o);
	render_free(&pic);
	mask_free(&m);
}

static void lengths(const char *path, int64_t s, struct lens *l)
{
	char emsg[512];
	int64_t sum = 0;
	FILE *fp = stdin;

	if (strcmp(path, "-") != 0 && (fp = fopen(path, "r")) == NULL)
		err(EXIT_BADINPUT, "%s", path);
	if (hist_read_lengths(fp, fp == stdin ? "stdin" : path, l, emsg, sizeof emsg) == -1)
		errx(EXIT_BADINPUT, "%s", emsg);
	if (fp != stdin)
		fclose(fp);
	for (size_t i = 0; i < l->n && sum <= s; i++)
		sum += l->v[i];
	if (sum != s)
		errx(EXIT_BADINPUT, "%s: lengths sum to %s%lld, not the sequence length %lld", path,
		    sum > s ? "more than " : "", (long long)sum, (long long)s);
}

int main(int argc, char *argv[])
{
	static const struct option longopts[] = {
		{ "pattern", required_argument, NULL, 'p' },
		{ "seqlen", required_argument, NULL, 'n' },
		{ "seed", required_argument, NULL, 's' },
		{ "lengths", required_argument, NULL, 'L' },
		{ "dist", required_argument, NULL, 'd' },
		{ "long", no_argument, NULL, O_LONG },
		{ "window", required_argument, NULL, 'w' },
		{ "global", required_argument, NULL, 'g' },
		{ "prefix", required_argument, NULL, 'P' },
		{ "block", required_argument, NULL, 'B' },
		{ "heads", required_argument, NULL, 'H' },
		{ "ratio", required_argument, NULL, O_RATIO },
		{ "min-block", required_argument, NULL, O_MINBLOCK },
		{ "avg-block", required_argument, NULL, O_AVGBLOCK },
		{ "buckets", required_argument, NULL, O_BUCKETS },
		{ "start-row", required_argument, NULL, O_STARTROW },
		{ "spans", required_argument, NULL, O_SPANS },
		{ "file", required_argument, NULL, 'f' },
		{ "output", required_argument, NULL, 'o' },
		{ "list", no_argument, NULL, 'l' },
		{ "info", required_argument, NULL, 'i' },
		{ "plan", required_argument, NULL, O_PLAN },
		{ "time", no_argument, NULL, 't' },
		{ "check", required_argument, NULL, 'c' },
		{ "render", required_argument, NULL, 'r' },
		{ "head", required_argument, NULL, O_HEAD },
		{ "size", required_argument, NULL, O_SIZE },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, OPT_VERSION },
		{ NULL, 0, NULL, 0 }
	};
	const int64_t maxs = MASK_MAXSEQ - 1;
	struct pattern_args a = {
		.s = -1, .window = PAT_UNSET, .global = PAT_UNSET, .prefix = PAT_UNSET,
		.block = PAT_UNSET, .minblock = PAT_UNSET, .avgblock = PAT_UNSET,
		.buckets = PAT_UNSET, .startrow = PAT_UNSET, .ratio = -1,
	};
	const char *name = NULL, *lpath = NULL, *dist = NULL, *out = NULL;
	const char *infop = NULL, *checkp = NULL, *renderp = NULL, *plan = NULL;
	int c, list = 0, islong = 0, head = 0, size = 512, timing = 0;
	const struct pattern *pat;
	struct lens l = { 0 };
	struct hist h;
	struct rng r;
	struct mask m;
	char emsg[512], docsrc[80];

	while ((c = getopt_long(argc, argv, "p:n:s:L:d:w:g:P:B:H:f:o:li:tc:r:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'p': name = optarg; break;
		case 'n': a.s = parse_int(optarg, "-n SEQLEN", 1, maxs, 1); break;
		case 's': a.seed = (uint64_t)parse_int(optarg, "-s SEED", 0, INT64_MAX, 0); break;
		case 'L': lpath = optarg; break;
		case 'd': dist = optarg; break;
		case O_LONG: islong = 1; break;
		case 'w': a.window = parse_int(optarg, "-w WINDOW", 0, maxs, 1); break;
		case 'g': a.global = parse_int(optarg, "-g GLOBAL", 0, maxs, 1); break;
		case 'P': a.prefix = parse_int(optarg, "-P PREFIX", 1, maxs, 1); break;
		case 'B': a.block = parse_int(optarg, "-B BLOCK", 1, maxs, 1); break;
		case 'H': a.heads = (int)parse_int(optarg, "-H HEADS", 1, 1024, 0); break;
		case O_RATIO: a.ratio = parse_double(optarg, "--ratio", 1e-9, 1); break;
		case O_MINBLOCK: a.minblock = parse_int(optarg, "--min-block", 1, maxs, 1); break;
		case O_AVGBLOCK: a.avgblock = parse_int(optarg, "--avg-block", 1, maxs, 1); break;
		case O_BUCKETS: a.buckets = parse_int(optarg, "--buckets", 1, maxs, 1); break;
		case O_STARTROW: a.startrow = parse_int(optarg, "--start-row", 1, maxs, 1); break;
		case O_SPANS: a.spans = optarg; break;
		case 'f': a.file = optarg; break;
		case 'o': out = optarg; break;
		case 'l': list = 1; break;
		case 'i': infop = optarg; break;
		case O_PLAN: plan = optarg; break;
		case 't': timing = 1; break;
		case 'c': checkp = optarg; break;
		case 'r': renderp = optarg; break;
		case O_HEAD: head = (int)parse_int(optarg, "--head", 0, 1023, 0); break;
		case O_SIZE: size = (int)parse_int(optarg, "--size", 1, 8192, 0); break;
		case 'h': usage(); return 0;
		case OPT_VERSION: print_version("maskgen");
		default: usage(); return EXIT_BADINPUT;
		}
	}
	if (optind < argc)
		errx(EXIT_BADINPUT, "%s: unexpected argument", argv[optind]);
	if (list + (infop != NULL) + (checkp != NULL) + (renderp != NULL) + (name != NULL) != 1)
		errx(EXIT_BADINPUT, "want exactly one of -p, -l, -i, -c, -r (see maskgen -h)");
	if (list) {
		for (pat = pattern_table; pat->name != NULL; pat++)
			printf("%s\t%s\n", pat->name, pat->desc);
		close_stdout();
		return 0;
	}
	if (infop != NULL) {
		info(infop, plan, timing);
		close_stdout();
		return 0;
	}
	if (checkp != NULL) {
		readmask(checkp, &m);
		mask_free(&m);
		return 0;
	}
	if (renderp != NULL) {
		render(renderp, out, head, size);
		return 0;
	}

	if ((pat = pattern_find(name)) == NULL)
		errx(EXIT_BADINPUT, "%s: unknown pattern (maskgen -l lists them)", name);
	if (a.s == -1)
		errx(EXIT_BADINPUT, "-n SEQLEN is required");
	if (lpath != NULL && !(pat->needs & (PAT_DOCS | PAT_OWNDOCS)))
		errx(EXIT_BADINPUT, "-L: pattern %s takes no document lengths", name);
	if ((dist != NULL || islong) && !(pat->needs & PAT_DOCS))
		errx(EXIT_BADINPUT, "%s: pattern %s samples no documents from a histogram", dist ? "-d" : "--long", name);
	if ((dist != NULL || islong) && lpath != NULL)
		errx(EXIT_BADINPUT, "-L: the lengths are given, -d and --long have nothing to sample");
	if (a.file != NULL && strcmp(name, "custom") != 0)
		errx(EXIT_BADINPUT, "-f: only the custom pattern reads a slice list");
	if (out == NULL && isatty(STDOUT_FILENO))
		errx(EXIT_BADINPUT, "stdout is a terminal: not writing a binary mask there (use -o FILE)");
	rng_seed(&r, a.seed);
	a.rng = &r;
	if (lpath != NULL) {
		lengths(lpath, a.s, &l);
	} else if (pat->needs & PAT_DOCS) {
		if (dist == NULL)
			dist = hist_default(a.s);
		if (hist_load(&h, dist, emsg, sizeof emsg) == -1)
			errx(EXIT_BADINPUT, "%s", emsg);
		if (islong)
			hist_pack_long(&h, &r, a.s, &l);
		else
			hist_pack(&h, &r, a.s, &l);
		snprintf(docsrc, sizeof docsrc, "%s%s", h.name, islong ? "-long" : "");
		a.docsrc = docsrc;
		hist_free(&h);
	}
	a.lens = l.v;
	a.nlens = l.n;
	if (pat->build(&m, &a, emsg, sizeof emsg) == -1)
		errx(EXIT_BADINPUT, "%s", emsg);
	if (mask_write(out == NULL ? "-" : out, &m, emsg, sizeof emsg) == -1)
		errx(EXIT_BADINPUT, "%s: %s", out == NULL ? "stdout" : out, emsg);
	mask_free(&m);
	free(l.v);
	return 0;
}
