/* USP (Fang and Zhao): Ulysses inside a node x ring attention across
 * nodes.  Default: Ulysses over the ranks of a node, the ring over nodes. */
#include "cp_impl.h"

static int run(const struct cp_env *env, const struct cp_job *job, struct cp_result *res)
{
	int w = comm_size(env->world), U, R;

	if (job->ulysses > 0)
		U = job->ulysses;
	else if (job->ring > 0)
		U = w / job->ring;
	else
		U = env->node_size > 0 ? env->node_size : w;
	if (U > w)
		U = w;
	R = job->ring > 0 ? job->ring : U > 0 ? w / U : 1;
	return cp_hybrid(env, job, res, U, R, R);
}

const struct cp_ops cp_usp = {
	"usp", "Ulysses inside a node x ring attention across nodes (USP)", run
};
