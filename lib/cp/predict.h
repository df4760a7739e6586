/* cpbench --predict and --probe-links (lib/cp/predict.c): the strategies'
 * schedules (cp_ops.sched) timed with a calibration, for a cluster one
 * does not have; and the link measurement that feeds it. */
#ifndef CP_PREDICT_H
#define CP_PREDICT_H
#include "cp.h"

struct pred_opts {
	const char *cluster;         /* "NODESxGPUS" */
	const char *calibrate;       /* kbench rows of the local kernel */
	const char *calcol;          /* the column fitted; NULL: ms_median */
	const char *links;           /* cpbench --probe-links output */
	const char *intra, *inter;   /* "GBPS,USEC" for every op of that scope */
	const char *cores;           /* "CORES[,RANKS]" (--cores): cpu ranks sharing cores */
	const char *kernel;          /* -k; NULL: the calibration rows' one kernel */
	const struct cp_ops *const *strat;
	int nstrat;
	const int *passes;
	int npass;
	struct cp_job job;           /* shape (sq, sk from each mask), degrees, window */
	int verbose;
};

/* Predicted rows of every mask file x strategy x pass on stdout.  Bad
 * input exits 2 (errx).  Returns the exit status. */
int pred_main(const struct pred_opts *o, char *const *masks, int nmask);

/* Collective over env->world: point-to-point, all-to-all and all-gather
 * bandwidth and latency inside a node and across nodes, and local copy
 * bandwidth; rank 0 writes the TSV that --links reads.  0, or -1 when a
 * rank failed (it said why). */
int pred_probe(const struct cp_env *env, const char *device);

#endif
