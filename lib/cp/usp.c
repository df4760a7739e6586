/* USP (Fang and Zhao): Ulysses inside a node x ring attention across
 * nodes.  Default: Ulysses over the ranks of a node, the ring over nodes. */
#include "cp_impl.h"

/* Degrees on w ranks, ns a node (0: unknown). */
static void degrees(const struct cp_job *job, int w, int ns, int *U, int *R)
{
	if (job->ulysses > 0)
		*U = job->ulysses;
	else if (job->ring > 0)
		*U = w / job->ring;
	else
		*U = ns > 0 ? ns : w;
	if (*U > w)
		*U = w;
	*R = job->ring > 0 ? job->ring : *U > 0 ? w / *U : 1;
}

static int run(const struct cp_env *env, const struct cp_job *job, struct cp_result *res)
{
	int U, R;

	degrees(job, comm_size(env->world), env->node_size, &U, &R);
	return cp_hybrid(env, job, res, U, R, R);
}

static int sched(const struct cp_job *job, int w, int ns, struct cp_sched *s)
{
	int U, R;

	degrees(job, w, ns, &U, &R);
	return cp_hybrid_sched(job, w, ns, U, R, R, s);
}

const struct cp_ops cp_usp = {
	"usp", "Ulysses inside a node x ring attention across nodes (USP)", run, sched
};
