/* seqsample: document lengths drawn from a length histogram, packed to an
 * exact total; or a histogram made from real lengths (--hist). */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hist.h"
#include "util.h"

static void usage(void)
{
	fprintf(stderr,
	    "usage: seqsample [-l] [-d NAME|FILE] -n TOTAL [-s SEED] [-p PACKS] [-o FILE]\n"
	    "       seqsample -H [-w WIDTH] [-o FILE] [LENGTHS]\n"
	    "  -d, --dist NAME|FILE   histogram: pile, prolong64k, prolong512k or a file\n"
	    "                         (default by total: pile, prolong64k, prolong512k)\n"
	    "  -n, --total TOTAL      tokens per pack (K/M suffixes)\n"
	    "  -s, --seed SEED        random seed (default 0)\n"
	    "  -l, --long             40%% of the tokens from the histogram, 60%% in [8K,30K]\n"
	    "  -p, --packs N          N independent packs, printed with a pack column\n"
	    "  -H, --hist             read lengths (one per line), print a histogram\n"
	    "  -w, --width WIDTH      with -H: bins of fixed width (default: powers of two)\n"
	    "  -o, --output FILE      write to FILE (atomically) instead of stdout\n"
	    "  -h, --help             this help\n"
	    "      --version          the version, commit and build features\n");
}

static void make_hist(const char *path, int64_t width, const char *outpath, struct outfile *o)
{
	struct lens l = { 0 };
	struct hist h;
	char emsg[512];
	FILE *fp = stdin;
	const char *name = strcmp(path, "-") == 0 ? "stdin" : path;

	if (strcmp(path, "-") != 0 && (fp = fopen(path, "r")) == NULL)
		err(EXIT_BADINPUT, "%s", path);
	if (hist_read_lengths(fp, name, &l, emsg, sizeof emsg) == -1)
		errx(EXIT_BADINPUT, "%s", emsg);
	if (fp != stdin)
		fclose(fp);
	if (hist_make(&h, &l, width, emsg, sizeof emsg) == -1)
		errx(EXIT_BADINPUT, "%s: %s", name, emsg);
	out_open(o, outpath);
	hist_write(o->fp, &h);
	hist_free(&h);
	free(l.v);
}

int main(int argc, char *argv[])
{
	static const struct option longopts[] = {
		{ "dist", required_argument, NULL, 'd' },
		{ "total", required_argument, NULL, 'n' },
		{ "seed", required_argument, NULL, 's' },
		{ "long", no_argument, NULL, 'l' },
		{ "packs", required_argument, NULL, 'p' },
		{ "hist", no_argument, NULL, 'H' },
		{ "width", required_argument, NULL, 'w' },
		{ "output", required_argument, NULL, 'o' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, OPT_VERSION },
		{ NULL, 0, NULL, 0 }
	};
	const char *dist = NULL, *outpath = "-";
	int64_t total = -1, packs = 1, width = 0, p;
	uint64_t seed = 0;
	int c, islong = 0, hmode = 0, packcol = 0;
	struct outfile o = { 0 };
	struct hist h;
	struct rng r;
	char emsg[512];

	while ((c = getopt_long(argc, argv, "d:n:s:lp:Hw:o:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'd': dist = optarg; break;
		case 'n': total = parse_int(optarg, "-n TOTAL", 1, HIST_MAXLEN - 1, 1); break;
		case 's': seed = (uint64_t)parse_int(optarg, "-s SEED", 0, INT64_MAX, 0); break;
		case 'l': islong = 1; break;
		case 'p': packs = parse_int(optarg, "-p PACKS", 1, 1 << 24, 1); packcol = 1; break;
		case 'H': hmode = 1; break;
		case 'w': width = parse_int(optarg, "-w WIDTH", 1, HIST_MAXLEN - 1, 1); break;
		case 'o': outpath = optarg; break;
		case 'h': usage(); return 0;
		case OPT_VERSION: print_version("seqsample");
		default: usage(); return EXIT_BADINPUT;
		}
	}
	argc -= optind;
	argv += optind;
	if (hmode) {
		if (argc > 1 || dist != NULL || total != -1 || islong || packcol)
			errx(EXIT_BADINPUT, "-H takes one lengths file and only -w and -o");
		make_hist(argc == 1 ? argv[0] : "-", width, outpath, &o);
		out_close(&o);
		close_stdout();
		return 0;
	}
	if (argc > 0)
		errx(EXIT_BADINPUT, "%s: unexpected argument", argv[0]);
	if (width)
		errx(EXIT_BADINPUT, "-w WIDTH needs -H");
	if (total == -1)
		errx(EXIT_BADINPUT, "-n TOTAL is required");
	if (dist == NULL)
		dist = hist_default(total);
	if (hist_load(&h, dist, emsg, sizeof emsg) == -1)
		errx(EXIT_BADINPUT, "%s", emsg);
	rng_seed(&r, seed);
	out_open(&o, outpath);
	fprintf(o.fp, packcol ? "pack\tlen\n" : "len\n");
	for (p = 0; p < packs; p++) {
		struct lens l = { 0 };
		size_t i;

		if (islong)
			hist_pack_long(&h, &r, total, &l);
		else
			hist_pack(&h, &r, total, &l);
		for (i = 0; i < l.n; i++) {
			if (packcol)
				fprintf(o.fp, "%lld\t", (long long)p);
			fprintf(o.fp, "%lld\n", (long long)l.v[i]);
		}
		free(l.v);
	}
	hist_free(&h);
	out_close(&o);
	close_stdout();
	return 0;
}
