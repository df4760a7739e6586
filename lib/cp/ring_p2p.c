/* Ring attention with point-to-point K/V passing (zigzag layout for every
 * mask: it balances causal work and, nearly, document masks too), the next
 * K/V in flight while the current ones compute, partial outputs merged by
 * LSE in fp32; backward passes dK/dV in fp32 with their K/V. */
#include "cp_impl.h"

static int run(const struct cp_env *env, const struct cp_job *job, struct cp_result *res)
{
	int w = comm_size(env->world);

	return cp_hybrid(env, job, res, 1, w, w);
}

static int sched(const struct cp_job *job, int w, int ns, struct cp_sched *s)
{
	return cp_hybrid_sched(job, w, ns, 1, w, w, s);
}

const struct cp_ops cp_ring_p2p = {
	"ring_p2p", "ring attention, zigzag layout, K/V passed rank to rank with overlap", run, sched
};
