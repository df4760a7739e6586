/* Ulysses (DeepSpeed): all-to-all from sequence shards to head shards,
 * attention over the whole sequence and the whole mask, all-to-all back.
 * KV heads fewer than the ranks are replicated, their gradients summed. */
#include "cp_impl.h"

static int run(const struct cp_env *env, const struct cp_job *job, struct cp_result *res)
{
	/* Pure Ulysses spans the world; --ulysses/--ring are for the hybrids. */
	return cp_hybrid(env, job, res, comm_size(env->world), 1, 1);
}

static int sched(const struct cp_job *job, int w, int ns, struct cp_sched *s)
{
	return cp_hybrid_sched(job, w, ns, w, 1, 1, s);
}

const struct cp_ops cp_ulysses = {
	"ulysses", "all-to-all to head shards, whole-sequence attention (DeepSpeed Ulysses)", run, sched
};
