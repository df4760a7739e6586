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

static int run(const struct cp_env *env, const struct cp_job *job, struct cp_result *res)
{
	int w = comm_size(env->world), ns = env->node_size, U, R, W;

	if (job->ulysses > 0) {
		U = job->ulysses;
	} else if (job->ring > 0) {
		U = w / job->ring;
	} else {
		U = ns >= 2 ? ns / 2 : 1;
		while (U > 1 && (w % U || !divides_heads(job, U)))
			U--;
	}
	R = job->ring > 0 ? job->ring : U > 0 && w % U == 0 ? w / U : 1;
	if (job->window > 0)
		return cp_hybrid(env, job, res, U, R, job->window);
	W = ns > 0 ? ns / U : 2;
	if (W < 1)
		W = 1;
	while (W > 1 && R % W)
		W--;
	return cp_hybrid(env, job, res, U, R, W);
}

const struct cp_ops cp_loongtrain = {
	"loongtrain", "head parallel x double ring (inner ring in a node, outer across) (LoongTrain)", run
};
