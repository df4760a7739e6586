/* cpbench: context-parallel attention strategies timed across the ranks
 * that PMIx reports, over NCCL on GPUs or MPI on the CPU.  Every rank reads
 * the same mask and runs the same strategies collectively; rank 0 writes the
 * rows. */
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "cp/cp.h"
#include "dev.h"
#include "stack.h"
#include "cp/predict.h"
#include "topo.h"
#include "tsv.h"
#include "util.h"

#define MAXS 16

static void usage(void)
{
	fprintf(stderr,
	    "usage: cpbench [-s STRATEGY,...] [-H HQ:HKV] [-D HEADDIM] [-t bf16|fp16]\n"
	    "               [-p fwd,bwd] [--ulysses U] [--ring R] [--node-size G]\n"
	    "               [--backend nccl|mpi] [-k KERNEL] [-w WARMUP] [-n ITERS]\n"
	    "               [--seed SEED] [--check] [-v] MASKFILE\n"
	    "       cpbench --predict NODESxGPUS --calibrate KBENCH.TSV [--links FILE]\n"
	    "               [--link-intra GBPS,USEC] [--link-inter GBPS,USEC]\n"
	    "               [--cores CORES[,RANKS]] [options] MASKFILE...\n"
	    "       cpbench --probe-links [--backend nccl|mpi] [--node-size G]\n"
	    "       cpbench -l\n"
	    "  -s, --strategy LIST   strategies (default: all; -l lists them)\n"
	    "  -H, --heads HQ:HKV    query and key/value heads (default 64:8)\n"
	    "  -D, --head-dim D      head dimension (default 128)\n"
	    "  -t, --dtype T         bf16 or fp16 (default bf16)\n"
	    "  -p, --pass LIST       fwd, bwd or both (default fwd,bwd)\n"
	    "      --ulysses U       Ulysses (all-to-all) degree (default: the strategy's)\n"
	    "      --ring R          ring degree (default: the strategy's)\n"
	    "      --node-size G     treat each G consecutive ranks as one node\n"
	    "      --backend B       nccl (GPU) or mpi (CPU) (default: nccl with a GPU)\n"
	    "  -k, --kernel K        local attention kernel (default: kbench's on the GPU,\n"
	    "                        hopper on sm_90, else flash; cpu on the mpi backend)\n"
	    "  -w, --warmup N        untimed runs first (default 2)\n"
	    "  -n, --iters N         timed runs; the median is reported (default 5)\n"
	    "      --seed SEED       random inputs' seed (default 1)\n"
	    "      --check           compare with the fp64 single-device reference\n"
	    "  -v, --verbose         say more on stderr (errors of --check)\n"
	    "      --predict NxG     predicted rows for N nodes of G GPUs; no launcher\n"
	    "      --calibrate FILE  kbench rows of the local kernel (--predict)\n"
	    "      --calibrate-col C ms_median (default) or ms_min: the time fitted\n"
	    "      --links FILE      links as --probe-links measured them (--predict)\n"
	    "      --link-intra B,L  GB/s and microseconds inside a node (default 300,10)\n"
	    "      --link-inter B,L  ... between nodes (default 50,10: 400 Gb/s)\n"
	    "      --cores C[,R]     cpu kernel: a node's ranks share C cores (calibrated at R)\n"
	    "      --probe-links     measure the links between the ranks; TSV for --links\n"
	    "  -l, --list            list the strategies\n"
	    "  -h, --help            this help\n"
	    "      --version         the version, commit and build features\n");
}

/* Before PMIx is up the rank is known only from the launcher's
 * environment; ranks other than 0 keep bad-input messages to themselves so
 * that one line is printed, not N. */
static int env_rank(void)
{
	static const char *v[] = { "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID", NULL };
	const char *s;
	int i;

	for (i = 0; v[i] != NULL; i++)
		if ((s = getenv(v[i])) != NULL)
			return atoi(s);
	return 0;
}

#ifdef HAVE_NCCL
static int gpu_present(void)
{
	int n = 0;

	return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}
#endif

static const char *device_name(int backend)
{
	static char name[256] = "cpu";
#ifdef HAVE_CUDA
	struct cudaDeviceProp p;
	int d;

	if (backend == COMM_NCCL && cudaGetDevice(&d) == cudaSuccess &&
	    cudaGetDeviceProperties(&p, d) == cudaSuccess)
		snprintf(name, sizeof name, "%s", p.name);
#else
	(void)backend;
#endif
	return name;
}

static const char *status_name(int s)
{
	static const char *n[] = { "ok", "oom", "unsupported", "wrong", "error" };

	return s >= 0 && s <= CP_ERROR ? n[s] : "error";
}

/* FNV-1a over n bytes, continuing from h. */
static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	const unsigned char *c = p;
	size_t i;

	for (i = 0; i < n; i++)
		h = (h ^ c[i]) * 1099511628211ULL;
	return h;
}

/* A digest of the mask: ranks on nodes without a shared file system may
 * read different files under one name, and would then disagree silently. */
static uint64_t mask_digest(const struct mask *m)
{
	uint64_t h = 1469598103934665603ULL;
	size_t i;

	h = fnv(h, &m->sq, sizeof m->sq);
	h = fnv(h, &m->area, sizeof m->area);
	h = fnv(h, &m->heads, sizeof m->heads);
	for (i = 0; i < m->nslices; i++) {
		const struct mask_slice *sl = &m->slices[i];
		uint64_t v[5] = { sl->q0, sl->q1, sl->k0, sl->k1, sl->kind }, j;

		for (j = 0; j < 5; j++)
			h = (h ^ v[j]) * 1099511628211ULL;
	}
	if (m->body == MASK_BODY_BLOCKS && m->bits != NULL)
		h = fnv(h, m->bits, ((size_t)m->heads * m->nqb * m->nkb + 7) / 8);
	return h;
}

/* Ranks per node from PMIx node ids: hybrid strategies put a node's ranks
 * in one group, which they take as consecutive ranks. */
static int node_size_of(const struct boot *b, char *err, size_t n)
{
	int g, r, c = 0;

	for (r = 0; r < b->size; r++)
		c += b->node_of[r] == b->node_of[0];
	g = c;
	for (r = 0; r < b->size; r++)
		if (b->node_of[r] != r / g || b->size % g != 0) {
			snprintf(err, n, "ranks are not placed in equal blocks of consecutive ranks "
			    "per node (rank %d on node %d); use block placement or --node-size", r,
			    b->node_of[r]);
			return -1;
		}
	return g;
}

/* One strategy on one pass, run by every rank; rank 0 writes the row.
 * Nonzero for a wrong result or an error. */
static int bench(const struct cp_env *env, const struct cp_ops *st, const struct cp_job *job)
{
	const struct boot *b = env->boot;
	const struct mask *m = job->mask;
	const struct attn_shape *s = &job->shape;
	const char *pass = job->pass == PASS_FWD ? "fwd" : "bwd";
	struct cp_result res = { .status = CP_ERROR };
	int bad;

	crash_doing("rank %d of %d (%s): %s %s %s", b->rank, b->size, b->host, st->name, m->pattern, pass);
	if (st->run(env, job, &res) != 0 && res.status == CP_OK)
		res.status = CP_ERROR;
	bad = res.status == CP_WRONG || res.status == CP_ERROR;
	if (b->rank != 0)
		return bad;
	if (res.status != CP_OK && (env->verbose || res.status != CP_UNSUPPORTED))
		fprintf(stderr, "cpbench: %s %s %s: %s%s%s\n", st->name, m->pattern, pass,
		    status_name(res.status), res.why[0] ? ": " : "", res.why);
	if (env->verbose && job->check && res.status != CP_UNSUPPORTED)
		fprintf(stderr, "cpbench: %s %s %s: rel err o %.3g lse %.3g dq %.3g "
		    "dk %.3g dv %.3g\n", st->name, m->pattern, pass, res.err[0], res.err[1],
		    res.err[2], res.err[3], res.err[4]);

	struct row row = {
		.tool = "cpbench", .kernel = st->name, .mask = m->pattern,
		.sq = m->sq, .sk = m->sq, .area = (double)m->area / m->heads,
		.batch = s->batch, .hq = s->hq, .hkv = s->hkv, .hd = s->hd,
		.dtype = s->dtype == DT_FP16 ? "fp16" : "bf16", .pass = pass,
		.world = b->size, .ulysses = res.ulysses, .ring = res.ring,
		.status = status_name(res.status), .iters = job->iters,
		.ms_median = res.ms_median, .ms_min = res.ms_min, .ms_max = res.ms_max,
		.mem_gib = res.mem_bytes / (1024.0 * 1024 * 1024),
		.device = device_name(env->backend), .host = b->host,
		.commit = build_commit(), .seed = job->seed,
		.stack = stack_str(env->backend == COMM_NCCL ? stack_kern(env->kern) | STACK_NCCL : 0),
		.comm = 1, .sent_bytes = res.sent_bytes, .imbalance = res.imbalance,
		.nodes = b->size / env->node_size,
	};
	if (res.ms_median > 0)
		row.tflops = tsv_flops(row.area, s->hq, s->hd, s->batch, job->pass == PASS_BWD) /
		    b->size / (res.ms_median * 1e-3) / 1e12;
	tsv_row(stdout, &row);
	fflush(stdout);
	return bad;
}

int main(int argc, char *argv[])
{
	static const struct option longopts[] = {
		{ "strategy", required_argument, NULL, 's' },
		{ "heads", required_argument, NULL, 'H' },
		{ "head-dim", required_argument, NULL, 'D' },
		{ "dtype", required_argument, NULL, 't' },
		{ "pass", required_argument, NULL, 'p' },
		{ "ulysses", required_argument, NULL, 'U' },
		{ "ring", required_argument, NULL, 'R' },
		{ "node-size", required_argument, NULL, 'G' },
		{ "backend", required_argument, NULL, 'B' },
		{ "kernel", required_argument, NULL, 'k' },
		{ "warmup", required_argument, NULL, 'w' },
		{ "iters", required_argument, NULL, 'n' },
		{ "seed", required_argument, NULL, 'S' },
		{ "check", no_argument, NULL, 'C' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "list", no_argument, NULL, 'l' },
		{ "predict", required_argument, NULL, 'P' },
		{ "calibrate", required_argument, NULL, 'c' },
		{ "calibrate-col", required_argument, NULL, 'Y' },
		{ "links", required_argument, NULL, 'L' },
		{ "link-intra", required_argument, NULL, 'I' },
		{ "link-inter", required_argument, NULL, 'E' },
		{ "cores", required_argument, NULL, 'Q' },
		{ "probe-links", no_argument, NULL, 'X' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, OPT_VERSION },
		{ NULL, 0, NULL, 0 }
	};
	const struct cp_ops *strat[MAXS];
	char *slist = NULL, *plist = NULL, *names[MAXS], *p, err[512];
	const char *kname = NULL;
	int c, i, j, ns = 0, np, passes[2], hq = 64, hkv = 8, hd = 128, U = 0, R = 0, G = 0;
	int dtype = DT_BF16, backend = -1, warmup = 2, iters = 5, check = 0, verbose = 0, list = 0;
	int saved, exitcode = 0, probe = 0;
	struct pred_opts po = { 0 };
	uint64_t seed = 1;
	struct mask m;
	struct boot b;
	struct topo t;
	struct comm *world;
	struct cp_env env;
	struct cp_job job;
	const struct kern_ops *kern;

	/* Bad input is the same on every rank: only rank 0 says so */
	saved = dup(STDERR_FILENO);
	if (env_rank() != 0 && (i = open("/dev/null", O_WRONLY)) != -1) {
		dup2(i, STDERR_FILENO);
		close(i);
	}
	while ((c = getopt_long(argc, argv, "s:H:D:t:p:k:w:n:vlh", longopts, NULL)) != -1) {
		switch (c) {
		case 's': slist = optarg; break;
		case 'H':
			if ((p = strchr(optarg, ':')) == NULL)
				errx(EXIT_BADINPUT, "-H: '%s' is not HQ:HKV", optarg);
			*p++ = '\0';
			hq = parse_int(optarg, "-H: query heads", 1, 4096, 0);
			hkv = parse_int(p, "-H: key/value heads", 1, 4096, 0);
			if (hq % hkv != 0)
				errx(EXIT_BADINPUT, "-H: %d query heads are not a multiple of %d kv heads", hq, hkv);
			break;
		case 'D': hd = parse_int(optarg, "-D", 1, 1024, 0); break;
		case 't':
			if (strcmp(optarg, "bf16") != 0 && strcmp(optarg, "fp16") != 0)
				errx(EXIT_BADINPUT, "-t: '%s' is not bf16 or fp16", optarg);
			dtype = strcmp(optarg, "fp16") == 0 ? DT_FP16 : DT_BF16;
			break;
		case 'p': plist = optarg; break;
		case 'U': U = parse_int(optarg, "--ulysses", 1, 1 << 20, 0); break;
		case 'R': R = parse_int(optarg, "--ring", 1, 1 << 20, 0); break;
		case 'G': G = parse_int(optarg, "--node-size", 1, 1 << 20, 0); break;
		case 'B':
			if (strcmp(optarg, "nccl") == 0)
				backend = COMM_NCCL;
			else if (strcmp(optarg, "mpi") == 0)
				backend = COMM_MPI;
			else
				errx(EXIT_BADINPUT, "--backend: '%s' is not nccl or mpi", optarg);
			break;
		case 'k': kname = optarg; break;
		case 'w': warmup = parse_int(optarg, "-w", 0, 1000000, 0); break;
		case 'n': iters = parse_int(optarg, "-n", 1, 1000000, 0); break;
		case 'S': seed = (uint64_t)parse_int(optarg, "--seed", 0, INT64_MAX, 0); break;
		case 'C': check = 1; break;
		case 'v': verbose++; break;
		case 'l': list = 1; break;
		case OPT_VERSION: print_version("cpbench");
		case 'P': po.cluster = optarg; break;
		case 'c': po.calibrate = optarg; break;
		case 'Y':
			if (strcmp(optarg, "ms_median") != 0 && strcmp(optarg, "ms_min") != 0)
				errx(EXIT_BADINPUT, "--calibrate-col: '%s' is not ms_median or ms_min", optarg);
			po.calcol = optarg;
			break;
		case 'L': po.links = optarg; break;
		case 'I': po.intra = optarg; break;
		case 'E': po.inter = optarg; break;
		case 'Q': po.cores = optarg; break;
		case 'X': probe = 1; break;
		case 'h':
			usage();
			exit(0);
		default:
			usage();
			exit(EXIT_BADINPUT);
		}
	}
	argc -= optind;
	argv += optind;
	if (list) {
		for (i = 0; cp_table[i] != NULL; i++)
			printf("%s\t%s\n", cp_table[i]->name, cp_table[i]->about);
		close_stdout();
		return 0;
	}
	if (probe && (argc != 0 || po.cluster))
		errx(EXIT_BADINPUT, "--probe-links: takes no mask file and no --predict");
	if (!po.cluster && (po.calibrate || po.calcol || po.links || po.intra || po.inter || po.cores))
		errx(EXIT_BADINPUT, "--calibrate, --calibrate-col, --links, --link-intra, --link-inter, "
		     "--cores: only with --predict");
	if (!probe && (po.cluster ? argc < 1 : argc != 1)) {
		usage();
		exit(EXIT_BADINPUT);
	}

	if (slist != NULL) {
		ns = split_list(slist, names, MAXS);
		if (ns == 0)
			errx(EXIT_BADINPUT, "-s: no strategy given");
		for (i = 0; i < ns; i++)
			if ((strat[i] = cp_find(names[i])) == NULL)
				errx(EXIT_BADINPUT, "-s: unknown strategy '%s' (cpbench -l lists them)", names[i]);
	} else {
		for (ns = 0; ns < MAXS && cp_table[ns] != NULL; ns++)
			strat[ns] = cp_table[ns];
	}
	np = 0;
	if (plist == NULL) {
		passes[np++] = PASS_FWD;
		passes[np++] = PASS_BWD;
	} else {
		char *pv[4];
		int n = split_list(plist, pv, 4);

		if (n == 0 || n > 2)
			errx(EXIT_BADINPUT, "-p: '%s' is not fwd, bwd or fwd,bwd", plist);
		for (i = 0; i < n; i++) {
			if (strcmp(pv[i], "fwd") == 0)
				passes[np++] = PASS_FWD;
			else if (strcmp(pv[i], "bwd") == 0)
				passes[np++] = PASS_BWD;
			else
				errx(EXIT_BADINPUT, "-p: '%s' is not fwd or bwd", pv[i]);
		}
	}

	if (po.cluster) {
		po.kernel = kname;
		po.strat = strat;
		po.nstrat = ns;
		po.passes = passes;
		po.npass = np;
		po.verbose = verbose;
		po.job = (struct cp_job){ .ulysses = U, .ring = R,
			.shape = { .batch = 1, .hq = hq, .hkv = hkv, .hd = hd, .dtype = dtype,
			           .scale = 1.0 / sqrt((double)hd) } };
		return pred_main(&po, argv, argc);
	}
#ifdef HAVE_NCCL
	if (backend == -1)
		backend = gpu_present() ? COMM_NCCL : COMM_MPI;
#else
	if (backend == -1)
		backend = COMM_MPI;
	if (backend == COMM_NCCL)
		errx(EXIT_BADINPUT, "backend nccl: not in this build (no NCCL)");
#endif
#ifndef HAVE_MPI
	if (backend == COMM_MPI)
		errx(EXIT_BADINPUT, "backend mpi: not in this build (no MPI)");
#endif
	if (kname == NULL) {
		int ma = 0, mi = 0;

		if (backend == COMM_NCCL)
			(void)dev_cc(0, &ma, &mi);
		kname = kern_default(ma, mi, backend == COMM_NCCL)->name;
	}
	if ((kern = kern_find(kname)) == NULL)
		errx(EXIT_BADINPUT, "-k: unknown kernel '%s'", kname);
	if (kern->disabled != NULL)
		errx(EXIT_BADINPUT, "-k: kernel %s: not in this build (%s)", kname, kern->disabled);
	if (!!(kern->caps & KC_GPU) != (backend == COMM_NCCL))
		errx(EXIT_BADINPUT, "-k: kernel %s runs on the %s, backend %s on the %s", kname,
		    kern->caps & KC_GPU ? "GPU" : "CPU", backend == COMM_NCCL ? "nccl" : "mpi",
		    backend == COMM_NCCL ? "GPU" : "CPU");

	if (!probe && mask_read(argv[0], &m, err, sizeof err) == -1)
		errx(EXIT_BADINPUT, "%s", err);
	if (!probe && m.sq != m.sk)
		errx(EXIT_BADINPUT, "%s: seqlen_q %lld != seqlen_k %lld: CP needs self-attention",
		    argv[0], (long long)m.sq, (long long)m.sk);
	if (!probe && hq % m.heads != 0)
		errx(EXIT_BADINPUT, "%s: %d mask heads do not divide %d query heads", argv[0],
		    m.heads, hq);

	/* Ranks that cannot start cannot agree on who speaks: the launcher's
	 * rank 0 does */
	if (boot_init(&b, err, sizeof err) == -1)
		errx(EXIT_BADINPUT, "%s", err);
	if (!probe) {
		uint64_t d = mask_digest(&m), *all = xcalloc(b.size, sizeof *all);

		if (boot_allgather(&b, "mask", &d, all, sizeof d, err, sizeof err) == -1)
			boot_abort(&b, EXIT_BADINPUT, err);
		for (i = 0; i < b.size; i++)
			if (all[i] != all[0])
				errx(EXIT_BADINPUT, "%s: rank %d read a different mask than rank 0 "
				    "(is the file on a shared file system?)", argv[0], i);
		free(all);
	}
	if (U > 0 && b.size % U != 0)
		errx(EXIT_BADINPUT, "--ulysses %d does not divide the %d ranks", U, b.size);
	if (R > 0 && b.size % R != 0)
		errx(EXIT_BADINPUT, "--ring %d does not divide the %d ranks", R, b.size);
	if (U > 0 && R > 0 && U * R != b.size)
		errx(EXIT_BADINPUT, "--ulysses %d x --ring %d is not the %d ranks", U, R, b.size);
	if (G > 0 && b.size % G != 0)
		errx(EXIT_BADINPUT, "--node-size %d does not divide the %d ranks", G, b.size);
	if (G == 0 && (G = node_size_of(&b, err, sizeof err)) == -1)
		errx(EXIT_BADINPUT, "%s", err);
	dup2(saved, STDERR_FILENO);
	close(saved);

	/* From here on a failure is one rank's: it names itself and ends the job */
	if (topo_setup(&b, backend == COMM_NCCL, &t, err, sizeof err) == -1)
		boot_abort(&b, EXIT_BADINPUT, err);
	if (topo_report(&b, &t, err, sizeof err) == -1)
		boot_abort(&b, 1, err);
	/* Before MPI's and NCCL's own setup, so that a crash there, too,
	 * names its rank rather than an address alone (comm_mpi.c keeps Open
	 * MPI's handler out of the way) */
	crash_report();
	crash_doing("rank %d of %d (%s): %s init", b.rank, b.size, b.host,
	    backend == COMM_NCCL ? "nccl" : "mpi");
	if (comm_init(&world, backend, &b, err, sizeof err) == -1)
		boot_abort(&b, 1, err);
	crash_doing("rank %d of %d (%s): setup", b.rank, b.size, b.host);

	env = (struct cp_env){ .world = world, .boot = &b, .backend = backend, .kern = kern,
	                       .node_size = G, .verbose = verbose };
	if (probe) {
		pred_probe(&env, device_name(backend));
		comm_free(world);
		boot_fini(&b);
		if (b.rank == 0)
			close_stdout();
		return 0;
	}
	job = (struct cp_job){
		.mask = &m,
		.shape = { .sq = m.sq, .sk = m.sq, .batch = 1, .hq = hq, .hkv = hkv, .hd = hd,
		           .dtype = dtype, .scale = 1.0 / sqrt((double)hd) },
		.ulysses = U, .ring = R, .warmup = warmup, .iters = iters, .check = check,
		.seed = seed,
	};
	if (b.rank == 0)
		tsv_header(stdout);
	for (i = 0; i < ns; i++)
		for (j = 0; j < np; j++) {
			job.pass = passes[j];
			if (bench(&env, strat[i], &job))
				exitcode = EXIT_WRONG;
		}
	comm_free(world);
	boot_fini(&b);
	mask_free(&m);
	if (b.rank == 0)
		close_stdout();
	return exitcode;
}
