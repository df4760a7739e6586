/* hopper's bwd on 64-key tiles (hb::bwd64, hd 128), included by
 * hopper_bwd.cuh: for masks whose 64 x 64 plan visits much less than the
 * 64 x 128 one (64-token block masks: a 128-key tile there holds two
 * blocks, each allowed or not on its own, and the 128-key kernel pays a
 * whole step where one half sees the q-tile).
 *
 * A CTA per (k-tile of 64 keys, kv-head, batch) item, walking the same
 * transposed plan as bwd, but the two consumers take its q-tiles in turns
 * (even steps the first, odd the second), each doing the whole tile over
 * the CTA's 64 keys: S^T and dP^T (both 64 x 64), dV and dK, and dQ = dS K
 * for all 128 columns (64 accumulators a thread), staged in four boxes of
 * its own that a reducing warp of its own adds to the workspace.  The
 * consumers' tiles then never wait on each other (in bwd they share each
 * tile's dS^T), so that one consumer's exponentials run under the other's
 * products as bwd's do.  The cost against bwd: per FLOP twice the Q/dO
 * loads and twice the dQ reductions (64 keys a q-tile, not 128).
 *
 * The ring of NST stages is shared: step i uses stage i % NST and is given
 * back by the consumer that ran it (4 warps), once its next tile's S^T is
 * done (by then the dK product that read Q has retired).  The producer's
 * thread alone walks the plan: it names each stage's step (INF), and the
 * consumers and reducing warps read the plan no more.  Each consumer
 * sums dK and dV over its own tiles; the second's sums reach the first
 * through the ring's shared memory at the end.  Not deterministic, no fuse
 * (init never picks this kernel with either). */

enum { BK64 = 64 };

/* Shared memory: K, V [2][64][64]; Q, dO [NST][2][BQ][64]; dS^T per
 * consumer [64][BQ]; dQ per consumer [4 boxes][BQ][32] fp32; L, D
 * [NST][BQ]; per stage its step (INF: q-tile, q-head, real first row,
 * cuts, first cut or bitmask, the step's number; q-tile -1: the walk has
 * ended); per consumer its staged dQ's q-head and row (DI; -1: no more);
 * mbarriers: K/V, full[NST], empty[NST]. */
struct lay64 {
	enum {
		KB = BK64 * 128 * 2, QB = BQ * 128 * 2, SB = BK64 * BQ * 2, DB = 4 * BQ * 128,
		K = 0, V = KB, Q = 2 * KB, O = Q + NST * QB, S = O + NST * QB,
		DQ = S + 2 * SB, L = DQ + 2 * DB, D = L + NST * BQ * 4, INF = D + NST * BQ * 4,
		DI = INF + NST * 32, BAR = DI + 16,
		TOTAL = BAR + 64 + 1024
	};
	static_assert(2 * NST * QB >= 2 * 64 * 128 * 4, "the second consumer's dK, dV past the ring");
};

/* Named barriers past bwd's: consumer w's dS^T is in shared memory. */
enum { DSB = 6 };

/* 64-key k-tiles by pairs (a CTA per 128-key k-tile, each consumer a
 * 64-key half on the q-tiles its half sees, both sharing a Q/dO stage and
 * summing their dQ in shared memory where both see one) were measured
 * and removed (b9b948b): the ring has room for two stages only, and they
 * ran 16-30 % behind this kernel (bench/NOTES.md, round 21). */

template <typename T, int X>
__global__ void __launch_bounds__(NT + 128, 1) bwd64(const __grid_constant__ CUtensorMap tq,
    const __grid_constant__ CUtensorMap tdo, const __grid_constant__ CUtensorMap tk,
    const __grid_constant__ CUtensorMap tv, const __grid_constant__ CUtensorMap tdq, const args a)
{
	constexpr bool QM = X & 1;
	typedef lay64 M;
	constexpr uint32_t KBOX = BK64 * 128, QBOX = BQ * 128;
	extern __shared__ unsigned char smraw[];
	const uint32_t s0 = (smaddr(smraw) + 1023) & ~1023u;
	unsigned char *sm = smraw + (s0 - smaddr(smraw));
	const uint32_t barkv = s0 + M::BAR, barq = s0 + M::BAR + 8, bare = barq + 8 * NST;
	const int tid = threadIdx.x, wg = tid >> 7, wi = (tid >> 5) & 3, lane = tid & 31;
	const int g = lane >> 2, t4 = lane & 3;
	const int4 item = a.item[blockIdx.x];
	const int hk = blockIdx.y + a.hk0, kt = item.x, b = blockIdx.z;
	const int k0 = kt * BK64, kr = wi * 16;
	T *tag = nullptr;

	if (tid == 0) {
		bar_init(barkv, 1);
		for (int i = 0; i < NST; i++) {
			bar_init(barq + 8 * i, 1);
			bar_init(bare + 8 * i, 4);
			sts32(s0 + M::INF + i * 32 + 20, (uint32_t)-1);
		}
		asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
		asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
	}
	__syncthreads();

	if (wg == 2) {
		asm volatile("setmaxnreg.dec.sync.aligned.u32 " HB_PREG ";");
		if (wi == 0 && lane == 0) {
			/* the walk, its steps' tiles and what the consumers need of
			 * each (INF), then an end mark for each consumer: only this
			 * thread walks, NST steps ahead, so that the plan's loads
			 * (an entry a step on scattered rows) stall no one else */
			bwalk w = {0, 0, 0, 0};
			int left = item.z, it = 0;
			bool more = left > 0 && hb_start<QM>(w, a, hk, kt, item);
			const int kg = real_k<BK64>(a, kt).x;
			bar_expect(barkv, 2 * M::KB);
#pragma unroll
			for (int c = 0; c < 2; c++) {
				tma4(s0 + M::K + c * KBOX, &tk, c * 64, hk, kg, b, barkv);
				tma4(s0 + M::V + c * KBOX, &tv, c * 64, hk, kg, b, barkv);
			}
			for (; more; it++) {
				const int st = it % NST;
				const uint32_t bar = barq + 8 * st, inf = s0 + M::INF + st * 32;
				if (it >= NST)
					bar_wait(bare + 8 * st, ((it - NST) / NST) & 1);
				const plan_ent E = a.ent[w.e];
				const int h = hk * a.group + w.gi, q0 = w.t * BQ, qg = real_q(a, w.t);
				const int cw = E.ncut > MANY ? a.einf[w.e] >> 2 : E.cut0;
				asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" :: "r"(inf), "r"(w.t), "r"(h), "r"(qg),
				    "r"((int)E.ncut) : "memory");
				asm volatile("st.shared.v2.u32 [%0], {%1, %2};" :: "r"(inf + 16), "r"(cw), "r"(it) : "memory");
				bar_expect(bar, 2 * M::QB + 2 * BQ * 4);
				stage_load<2>(&tq, &tdo, a, s0 + M::Q + st * M::QB, s0 + M::O + st * M::QB,
				    s0 + M::L + st * BQ * 4, s0 + M::D + st * BQ * 4, h, qg, q0, b, bar);
				more = --left > 0 && hb_next<QM>(w, a, hk, kt);
			}
			for (int end = it + 2; it < end; it++) {
				const int st = it % NST;
				if (it >= NST)
					bar_wait(bare + 8 * st, ((it - NST) / NST) & 1);
				sts32(s0 + M::INF + st * 32, (uint32_t)-1);
				sts32(s0 + M::INF + st * 32 + 20, it);
				bar_arrive(barq + 8 * st);
			}
		} else if (wi == 1 || wi == 2) {
			/* consumer x's dQ: its four boxes (columns 32y..) added to
			 * the workspace by TMA, tile by tile, free again once read */
			const int x = wi - 1;
			nbar_arrive(DQE + x, NDQ);
			for (;;) {
				nbar_sync(DQF + x, NDQ);
				int h, q0;
				asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(h), "=r"(q0) : "r"(s0 + M::DI + 8 * x) : "memory");
				if (h < 0)
					break;
				if (lane == 0) {
#pragma unroll
					for (int y = 0; y < 4; y++)
						asm volatile("cp.reduce.async.bulk.tensor.4d.global.shared::cta.add.tile.bulk_group"
						    " [%0, {%2, %3, %4, %5}], [%1];"
						    :: "l"(&tdq), "r"(s0 + M::DQ + x * M::DB + y * BQ * 128), "r"(32 * y), "r"(h),
						    "r"(q0), "r"(b) : "memory");
					asm volatile("cp.async.bulk.commit_group;" ::: "memory");
					asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
				}
				__syncwarp();
				nbar_arrive(DQE + x, NDQ);
			}
			if (lane == 0)
				asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
		}
		return;
	}
	asm volatile("setmaxnreg.inc.sync.aligned.u32 " HB_CREG ";");

	float dk[64], dv[64];
#pragma unroll
	for (int i = 0; i < 64; i++)
		dk[i] = dv[i] = 0;

	const uint32_t kvalid = keys_valid<BK64>(a, k0, kr, g);
	const float *sL = (const float *)(sm + M::L), *sD = (const float *)(sm + M::D);

	float s[32], dp[32];
	const int wgu = warp_uniform(wg);
	/* K and V K-major (S^T, dP^T: both consumers over all 64 keys), K
	 * N-major over its two boxes (dQ's 128 columns); this consumer's dS^T */
	const uint32_t k_d = dlo(s0 + M::K, 16), v_d = dlo(s0 + M::V, 16), kq_d = dlo(s0 + M::K, KBOX);
	const uint32_t sS = s0 + M::S + wgu * M::SB, sq0 = s0 + M::DQ + wgu * M::DB;
	/* S^T - L = K Q^T - L and dP^T - D = V dO^T - D: two groups (bwd's
	 * issue_sdp, ai always) */
	auto issue_sdp = [&](int st) {
		const uint32_t q_d = dlo(s0 + M::Q + st * M::QB, 16), o_d = dlo(s0 + M::O + st * M::QB, 16);
		acc_ld(s, dp, sL + st * BQ, sD + st * BQ, t4);
		reg_fence(s);
		reg_fence(dp);
		sdp_issue<8, KBOX, QBOX, true>(tag, s, dp, k_d, q_d, v_d, o_d);
	};

	bar_wait(barkv, 0);
	uint32_t pa[4][4], da[4][4];
	const float2 none[8] = {};  /* ai: p_pack and ds_pack read no L or D */
	int prev = -1;              /* the stage of this consumer's last tile */
	const uint32_t di = s0 + M::DI + 8 * wgu;
	for (int it = wgu;; it += 2) {
		const int st = it % NST;
		const uint32_t sQ = s0 + M::Q + st * M::QB, sO = s0 + M::O + st * M::QB, inf = s0 + M::INF + st * 32;
		/* The stage's step first: a consumer may reach a stage while the
		 * other's tile before it there has not landed (nothing orders the
		 * two consumers), and a parity wait one phase early returns at
		 * once.  Once the producer has named this step, that tile has
		 * landed (it waited for its release), and the wait is exact. */
		for (;;) {
			int x;
			asm volatile("ld.volatile.shared.u32 %0, [%1];" : "=r"(x) : "r"(inf + 20) : "memory");
			if (x == it)
				break;
		}
		bar_wait(barq + 8 * st, (it / NST) & 1);
		int t, h, qg, ncut, cw;
		asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(t), "=r"(h), "=r"(qg), "=r"(ncut)
		    : "r"(inf) : "memory");
		if (t < 0) {
			/* the end: the last tile's stage back (its dK product
			 * done), and the reducing warp told */
			wg_wait<0>();
			reg_fence(dk);
			reg_fence(da);
			__syncwarp();
			if (prev >= 0 && lane == 0)
				bar_arrive(bare + 8 * prev);
			nbar_sync(DQE + wgu, NDQ);
			if (tid % 128 == 0)
				asm volatile("st.shared.v2.u32 [%0], {%1, %2};" :: "r"(di), "r"(-1), "r"(0) : "memory");
			nbar_arrive(DQF + wgu, NDQ);
			break;
		}
		asm volatile("ld.shared.u32 %0, [%1];" : "=r"(cw) : "r"(inf + 16) : "memory");
		issue_sdp(st);
		const int q0 = t * BQ;

		uint32_t ok = kvalid;
		if (ncut > 0 && a.qiv != NULL)
			ok &= iv_bits(a.qiv, k0 + kr + g, q0 + 2 * t4);
		else if (ncut > MANY)
			ok &= bm_bits(a.bm + (int64_t)cw * BK64, kr + g, t4);
		else if (ncut > 0)
			ok &= cut_bits<lay>(a.cut + cw, ncut, q0 + 2 * t4, k0 + kr + g, q0, q0 + BQ, k0 + kr, k0 + kr + 16);

		wg_wait<1>();
		reg_fence(s);
		/* the last tile's dK product is done: its stage is free */
		reg_fence(dk);
		reg_fence(da);
		__syncwarp();
		if (prev >= 0 && lane == 0)
			bar_arrive(bare + 8 * prev);
		prev = st;
		p_pack<T, true>(s, pa, ok, a, none);
		rs_issue<128>(tag, dv, pa, sO);

		wg_wait<1>();
		reg_fence(dp);
		ds_pack<T, true>(s, dp, da, none, sS, kr, g, t4);
		asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
		nbar_sync(DSB + wgu, 128);
		/* dV, which read P^T from pa, is done (pa's registers free for
		 * dq: with both live the loop spilled) */
		wg_wait<0>();
		reg_fence(pa);

		/* dQ = dS K over the 64 keys, all 128 columns (A: dS^T read
		 * M-major; B: K N-major), then dK += dS^T Q, left running under
		 * the staging and the next tile's S^T and dP^T */
		float dq[64];
#pragma unroll
		for (int i = 0; i < 64; i++)
			dq[i] = 0;
		reg_fence(dq);
		wg_fence();
#pragma unroll
		for (int kk = 0; kk < 4; kk++)
			ss128<1, 1>(tag, dq, dsc(dlo(sS, 0), kk * 2048), dsc(kq_d, kk * 2048), kk > 0);
		wg_commit();
		rs_issue<128>(tag, dk, da, sQ);
		wg_wait<1>();
		reg_fence(dq);
		/* into this consumer's four boxes */
		const int odd = g & 1;
		nbar_sync(DQE + wgu, NDQ);
		dq_stage(sq0, dq, wi, g, t4, odd);
		if (tid % 128 == 0)
			asm volatile("st.shared.v2.u32 [%0], {%1, %2};" :: "r"(di), "r"(h), "r"(qg) : "memory");
		asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
		nbar_arrive(DQF + wgu, NDQ);
		reg_fence(dv);
	}
	wg_wait<0>();
	reg_fence(dk);
	reg_fence(dv);

	/* the second consumer's sums to the first through the ring, which no
	 * product reads any more (both have waited on their last) */
	float *xs = (float *)(sm + M::Q);
	const int tw = tid & 127;
	nbar_sync(1, NT);
	if (wg == 1) {
#pragma unroll
		for (int i = 0; i < 64; i++) {
			xs[i * 128 + tw] = dk[i];
			xs[(64 + i) * 128 + tw] = dv[i];
		}
	}
	nbar_sync(1, NT);
	if (wg == 1)
		return;
#pragma unroll
	for (int i = 0; i < 64; i++) {
		dk[i] += xs[i * 128 + tw];
		dv[i] += xs[(64 + i) * 128 + tw];
	}

	kv_store<T, 128, BK64>(a, item, b, hk, kt, dk, dv, kr, g, t4);
}
