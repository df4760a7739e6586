/* LoongTrain: head parallel (Ulysses) x context parallel with the double
 * ring: an inner ring over a window of W ring members, an outer ring over
 * the windows, the outer K/V in flight during the inner ring.
 *
 * Defaults.  Ulysses: half a node (at least 1), so that a node holds
 * ring members too and the inner ring has something to do inside it.
 * Window: the ring members that share a node (node size / Ulysses), so the
 * inner ring stays on NVLink and only the outer ring crosses nodes; 2 when
 * the node size is unknown.  This default shrinks until it divides the
 * ring; a window asked for (job->window) that does not is unsupported. */
#include "cp_impl.h"

static int divides_heads(const struct cp_job *job, int u)
{
	int hq = job->shape.hq, hkv = job->shape.hkv;

	return hq % u == 0 && (hkv % u == 0 || u % hkv == 0);
}

/* Degrees and window on w ranks, ns a node (0: unknown). */
static void degrees(const struct cp_job *job, int w, int ns, int *U, int *R, int *W)
{
	if (job->ulysses > 0) {
		*U = job->ulysses;
	} else if (job->ring > 0) {
		*U = w / job->ring;
	} else {
		*U = ns >= 2 ? ns / 2 : 1;
		while (*U > 1 && (w % *U || !divides_heads(job, *U)))
			(*U)--;
	}
	*R = job->ring > 0 ? job->ring : *U > 0 && w % *U == 0 ? w / *U : 1;
	if (job->window > 0) {
		*W = job->window;
		return;
	}
	*W = ns > 0 && *U > 0 ? ns / *U : 2;
	if (*W < 1)
		*W = 1;
	while (*W > 1 && *R % *W)
		(*W)--;
}

static int run(const struct cp_env *env, const struct cp_job *job, struct cp_result *res)
{
	int U, R, W;

	degrees(job, comm_size(env->world), env->node_size, &U, &R, &W);
	return cp_hybrid(env, job, res, U, R, W);
}

static int sched(const struct cp_job *job, int w, int ns, struct cp_sched *s)
{
	int U, R, W;

	degrees(job, w, ns, &U, &R, &W);
	return cp_hybrid_sched(job, w, ns, U, R, W, s);
}

const struct cp_ops cp_loongtrain = {
	"loongtrain", "head parallel x double ring (inner ring in a node, outer across) (LoongTrain)", run, sched
};
