/* kbench: time attention kernels over mask files, one result row per
 * mask x kernel x pass. */
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dev.h"
#include "kb.h"
#include "kernel.h"
#include "mask.h"
#include "stack.h"
#include "tsv.h"
#include "util.h"

static void usage(void)
{
	fprintf(stderr,
	    "usage: kbench [-v] [--check] [-k KERNEL,...] [-p fwd,bwd] [-H HQ:HKV] [-D HEADDIM]\n"
	    "              [-t bf16|fp16] [-b BATCH] [-w WARMUP] [-n ITERS] [--device N]\n"
	    "              [-s SEED] [--qscale F] [--deterministic] MASKFILE...\n"
	    "       kbench -l\n"
	    "  -k, --kernel LIST   kernels, or all of this build and device (default: the\n"
	    "                      fastest on the GPU, hopper on sm_90, else flash; cpu)\n"
	    "  -p, --pass LIST     fwd, bwd or both (default fwd,bwd)\n"
	    "  -H, --heads HQ:HKV  query and key/value heads (default 64:8)\n"
	    "  -D, --head-dim N    head dimension (default 128)\n"
	    "  -t, --dtype T       bf16 or fp16 (default bf16)\n"
	    "  -b, --batch N       batch size (default 1)\n"
	    "  -w, --warmup N      untimed iterations (default 5)\n"
	    "  -n, --iters N       timed iterations (default 20)\n"
	    "  -s, --seed N        seed of the random inputs (default 1)\n"
	    "      --qscale F      Q's values times F, logits F times wider (default 1)\n"
	    "      --check         compare with the fp64 reference; a mismatch is `wrong'\n"
	    "      --deterministic bwd with the same bits on every run (kernel label NAME+det)\n"
	    "      --device N      the CUDA device (default 0)\n"
	    "  -v, --verbose       a line per row on stderr, with the errors of --check\n"
	    "  -l, --list          list the kernels and what each supports\n"
	    "  -h, --help          this help\n"
	    "      --version       the version, commit and build features\n");
}

static void list(void)
{
	static const struct { unsigned cap; const char *name; } caps[] = {
		{ KC_GPU, "gpu" }, { KC_FWD, "fwd" }, { KC_BWD, "bwd" }, { KC_BF16, "bf16" },
		{ KC_FP16, "fp16" }, { KC_GQA, "gqa" }, { KC_SLICES, "slices" },
		{ KC_BLOCKS, "blocks" }, { KC_DET, "det" },
	};

	for (int i = 0; kern_table[i] != NULL; i++) {
		const struct kern_ops *k = kern_table[i];
		char buf[128] = "";
		for (size_t c = 0; c < sizeof caps / sizeof caps[0]; c++)
			if (k->caps & caps[c].cap) {
				strcat(buf, buf[0] ? "," : "");
				strcat(buf, caps[c].name);
			}
		if (k->disabled != NULL)
			snprintf(buf, sizeof buf, "disabled: %s", k->disabled);
		printf("%-8s %-44s %s\n", k->name, buf, k->about);
	}
}

static void heads(const char *s, int *hq, int *hkv)
{
	char *c = strchr(s, ':'), *a;

	if (c == NULL)
		errx(EXIT_BADINPUT, "heads: '%s' is not HQ:HKV", s);
	a = xstrdup(s);
	a[c - s] = '\0';
	*hq = (int)parse_int(a, "heads", 1, 4096, 0);
	*hkv = (int)parse_int(c + 1, "heads", 1, 4096, 0);
	free(a);
	if (*hq % *hkv != 0)
		errx(EXIT_BADINPUT, "heads %s: %d query heads are not a multiple of %d kv heads",
		    s, *hq, *hkv);
}

/* The default kernel (all 0), or those of `-k all', for the device asked
 * for: kern_default and kern_all decide. */
static int choose(int all, int device, int *ngpu, const struct kern_ops **out, int max)
{
	int major = 0, minor = 0, gpu;

#ifdef HAVE_CUDA
	if (*ngpu < 0)
		*ngpu = kb_gpu_count();
#else
	*ngpu = 0;
#endif
	gpu = *ngpu > 0 && dev_cc(device < *ngpu ? device : 0, &major, &minor) == 0;
	if (!all) {
		out[0] = kern_default(major, minor, gpu);
		return 1;
	}
	return kern_all(major, minor, gpu, out, max);
}

static const char *basename_of(const char *p)
{
	const char *b = strrchr(p, '/');
	return b ? b + 1 : p;
}

/* One row: run the job (or not), print the row, and a line on stderr when
 * asked, on a terminal, or for a wrong or failed row.  1 if it is one. */
static int row(const struct kb_job *j, const char *path, const char *gpu, int verbose)
{
	const struct mask *m = j->mask;
	const struct attn_shape *s = &j->shape;
	const char *why = kb_unsupported(j);
	int gpuk = j->kern->caps & KC_GPU;
	struct kb_result r = { 0 };
	char label[64];
	struct row w = {
		.tool = "kbench", .kernel = j->kern->name,
		.mask = m->pattern[0] ? m->pattern : basename_of(path),
		.sq = m->sq, .sk = m->sk, .area = (double)m->area / m->heads,
		.batch = s->batch, .hq = s->hq, .hkv = s->hkv, .hd = s->hd,
		.dtype = s->dtype == DT_FP16 ? "fp16" : "bf16",
		.pass = j->pass == PASS_FWD ? "fwd" : "bwd",
		.world = 1, .device = gpuk && gpu[0] ? gpu : kb_cpu_name(),
		.host = host_name(), .commit = build_commit(), .seed = j->seed,
		.stack = stack_str(stack_kern(j->kern)),
	};

	if (s->flags & ATTN_DETERMINISTIC) {
		snprintf(label, sizeof label, "%s+det", j->kern->name);
		w.kernel = label;
	}
	for (int e = 0; e < KB_NERR; e++)
		r.err[e] = -1;
	r.same = -1;
	if (why != NULL) {
		r.status = KB_UNSUPPORTED;
		snprintf(r.why, sizeof r.why, "%s", why);
	} else if (gpuk) {
#ifdef HAVE_CUDA
		kb_run_gpu(j, &r);
#endif
	} else {
		kb_run_host(j, &r);
	}
	w.status = kb_status[r.status];
	if (r.status == KB_OK) {
		w.iters = j->iters;
		w.ms_median = r.ms_median;
		w.ms_min = r.ms_min;
		w.ms_max = r.ms_max;
		w.tflops = tsv_flops(w.area, s->hq, s->hd, s->batch, j->pass == PASS_BWD) /
		    (r.ms_median * 1e-3) / 1e12;
		w.mem_gib = r.mem_bytes / (1024.0 * 1024 * 1024);
	}
	tsv_row(stdout, &w);
	fflush(stdout);
	if (verbose || isatty(2) || r.status == KB_ERROR || r.status == KB_WRONG) {
		fprintf(stderr, "kbench: %s %s %lld %s: %s", w.kernel, w.mask, (long long)m->sq,
		    w.pass, w.status);
		if (r.status == KB_OK)
			fprintf(stderr, " %.3f ms %.2f TFLOP/s %.3f GiB", w.ms_median, w.tflops, w.mem_gib);
		else if (r.why[0])
			fprintf(stderr, " (%s)", r.why);
		for (int e = 0; verbose && e < KB_NERR; e++)
			if (r.err[e] >= 0 || r.err[e] != r.err[e])
				fprintf(stderr, " err_%s %.3g", kb_errname[e], r.err[e]);
		if (verbose && r.same >= 0)
			fprintf(stderr, " rerun %s", r.same ? "same bits" : "differs");
		fputc('\n', stderr);
	}
	return r.status == KB_WRONG || r.status == KB_ERROR;
}

int main(int argc, char *argv[])
{
	static const struct option longopts[] = {
		{ "kernel", required_argument, NULL, 'k' },
		{ "pass", required_argument, NULL, 'p' },
		{ "heads", required_argument, NULL, 'H' },
		{ "head-dim", required_argument, NULL, 'D' },
		{ "dtype", required_argument, NULL, 't' },
		{ "batch", required_argument, NULL, 'b' },
		{ "warmup", required_argument, NULL, 'w' },
		{ "iters", required_argument, NULL, 'n' },
		{ "seed", required_argument, NULL, 's' },
		{ "qscale", required_argument, NULL, 'Q' },
		{ "check", no_argument, NULL, 'C' },
		{ "deterministic", no_argument, NULL, 'd' },
		{ "device", required_argument, NULL, 'G' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "list", no_argument, NULL, 'l' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, OPT_VERSION },
		{ NULL, 0, NULL, 0 },
	};
	const struct kern_ops *kern[16], *gpukern = NULL;
	char *klist = NULL, *plist = "fwd,bwd", *names[16], gpu[256] = "", emsg[512];
	int nkern = 0, passes[2], npass = 0, hq = 64, hkv = 8, hd = 128, dtype = DT_BF16;
	int batch = 1, warmup = 5, iters = 20, check = 0, device = 0, verbose = 0;
	int ch, ngpu = -1, bad = 0, nname = 0;
	unsigned flags = 0;
	uint64_t seed = 1;
	double qscale = 1;
	struct mask *masks;
	int nmask;

	while ((ch = getopt_long(argc, argv, "k:p:H:D:t:b:w:n:s:vlh", longopts, NULL)) != -1) {
		switch (ch) {
		case 'k': klist = optarg; break;
		case 'p': plist = optarg; break;
		case 'H': heads(optarg, &hq, &hkv); break;
		case 'D': hd = (int)parse_int(optarg, "head dim", 1, 1024, 0); break;
		case 't':
			if (strcmp(optarg, "bf16") == 0)
				dtype = DT_BF16;
			else if (strcmp(optarg, "fp16") == 0)
				dtype = DT_FP16;
			else
				errx(EXIT_BADINPUT, "dtype: '%s' is not bf16 or fp16", optarg);
			break;
		case 'b': batch = (int)parse_int(optarg, "batch", 1, 65535, 1); break;
		case 'w': warmup = (int)parse_int(optarg, "warm-up", 0, 100000, 1); break;
		case 'n': iters = (int)parse_int(optarg, "iterations", 1, 100000, 1); break;
		case 's': seed = (uint64_t)parse_int(optarg, "seed", 0, INT64_MAX, 0); break;
		case 'Q': qscale = parse_double(optarg, "--qscale", 1e-3, 1e3); break;
		case 'C': check = 1; break;
		case 'd': flags |= ATTN_DETERMINISTIC; break;
		case 'G': device = (int)parse_int(optarg, "device", 0, 1023, 0); break;
		case 'v': verbose = 1; break;
		case 'l': list(); close_stdout(); return 0;
		case 'h': usage(); return 0;
		case OPT_VERSION: print_version("kbench");
		default: usage(); return EXIT_BADINPUT;
		}
	}
	argc -= optind;
	argv += optind;
	if (argc < 1) {
		usage();
		return EXIT_BADINPUT;
	}

	/* Every input is checked before the first row, so a bad one leaves no
	 * partial table behind. */
	{
		char *p = xstrdup(plist), *pn[4];
		int n = split_list(p, pn, 4);
		for (int i = 0; i < n; i++) {
			int v = strcmp(pn[i], "fwd") == 0 ? PASS_FWD : strcmp(pn[i], "bwd") == 0 ? PASS_BWD : 0;
			if (v == 0)
				errx(EXIT_BADINPUT, "pass: '%s' is not fwd or bwd", pn[i]);
			if (npass < 2 && (npass == 0 || passes[0] != v))
				passes[npass++] = v;
		}
		if (npass == 0)
			errx(EXIT_BADINPUT, "pass: '%s' names no pass", plist);
	}
	if (klist == NULL)
		nkern = choose(0, device, &ngpu, kern, 16);
	else
		nname = split_list(xstrdup(klist), names, 16);
	for (int i = 0; i < nname; i++) {
		const struct kern_ops *k[16];
		int nk = 1;

		if (strcmp(names[i], "all") == 0)
			nk = choose(1, device, &ngpu, k, 16);
		else if ((k[0] = kern_find(names[i])) == NULL)
			errx(EXIT_BADINPUT, "kernel: unknown kernel '%s' (kbench -l lists them)", names[i]);
		for (int x = 0; x < nk; x++) {
			int have = 0;
			for (int y = 0; y < nkern; y++)
				have |= kern[y] == k[x];
			if (!have)
				kern[nkern++] = k[x];
		}
	}
	if (nkern == 0)
		errx(EXIT_BADINPUT, "kernel: '%s' names no kernel", klist);
	for (int i = 0; i < nkern; i++) {
		/* a kernel this build lacks is a build question, not a result */
		if (kern[i]->disabled != NULL)
			errx(EXIT_BADINPUT, "kernel %s: not in this build (%s)", kern[i]->name,
			    kern[i]->disabled);
		/* the first that needs a device is named when there is none */
		if (gpukern == NULL && kern[i]->disabled == NULL && (kern[i]->caps & KC_GPU))
			gpukern = kern[i];
	}
	masks = xcalloc(argc, sizeof *masks);
	nmask = argc;
	for (int i = 0; i < nmask; i++) {
		if (mask_read(argv[i], &masks[i], emsg, sizeof emsg) != 0)
			errx(EXIT_BADINPUT, "%s: %s", argv[i], emsg);
		if (hq % masks[i].heads != 0)
			errx(EXIT_BADINPUT, "%s: %d mask heads do not divide %d query heads",
			    argv[i], masks[i].heads, hq);
	}
	if (gpukern != NULL) {
#ifdef HAVE_CUDA
		if (ngpu < 0)
			ngpu = kb_gpu_count();
		if (ngpu == 0)
			errx(EXIT_BADINPUT, "kernel %s: no CUDA device", gpukern->name);
		if (device >= ngpu)
			errx(EXIT_BADINPUT, "device %d: only %d CUDA devices", device, ngpu);
		if (kb_gpu_open(device, gpu, sizeof gpu, emsg, sizeof emsg) != 0)
			errx(EXIT_BADINPUT, "%s", emsg);
#endif
	}

	tsv_header(stdout);
	for (int mi = 0; mi < nmask; mi++)
		for (int ki = 0; ki < nkern; ki++)
			for (int pi = 0; pi < npass; pi++) {
				struct kb_job j = {
					.kern = kern[ki], .mask = &masks[mi], .pass = passes[pi],
					.warmup = warmup, .iters = iters, .check = check, .seed = seed, .qscale = qscale,
					.shape = { .sq = masks[mi].sq, .sk = masks[mi].sk, .batch = batch,
					           .hq = hq, .hkv = hkv, .hd = hd, .dtype = dtype,
					           .scale = 1.0 / sqrt((double)hd), .flags = flags },
				};
				bad |= row(&j, argv[mi], gpu, verbose);
			}
	for (int i = 0; i < nmask; i++)
		mask_free(&masks[i]);
	free(masks);
	close_stdout();
	return bad ? EXIT_WRONG : 0;
}
