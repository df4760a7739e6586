/* The one kernel table.  Every name is always listed, so `kbench -l` and
 * the rows say why a kernel is missing instead of calling it unknown.
 * HAVE_KERN_<NAME> comes from the Makefile once kernels/<name>.* is in the
 * build. */
#include <string.h>

#include "cpu.h"
#include "kernel.h"

#define OFF(n, a, why) static const struct kern_ops off_##n = { .name = #n, .about = a, .disabled = why }

#ifdef HAVE_CUDA
#define NOGPU "not built yet"
#else
#define NOGPU "no CUDA"
#endif

#ifdef HAVE_KERN_NAIVE
extern const struct kern_ops kern_naive;
#define NAIVE &kern_naive
#else
OFF(naive, "cuBLAS GEMMs and a masked softmax over materialised SxS scores", NOGPU);
#define NAIVE &off_naive
#endif

#ifdef HAVE_KERN_FLASH
extern const struct kern_ops kern_flash;
#define FLASH &kern_flash
#else
OFF(flash, "tiled online-softmax kernel over the plan", NOGPU);
#define FLASH &off_flash
#endif

#ifdef HAVE_KERN_HOPPER
extern const struct kern_ops kern_hopper;
#define HOPPER &kern_hopper
#else
OFF(hopper, "sm_90a kernel (TMA, wgmma) over the plan", NOGPU);
#define HOPPER &off_hopper
#endif

#ifdef HAVE_KERN_CUDNN
extern const struct kern_ops kern_cudnn;
#define CUDNN &kern_cudnn
#else
#ifdef HAVE_CUDNN
OFF(cudnn, "cuDNN SDPA", NOGPU);
#elif defined(HAVE_CUDA)
OFF(cudnn, "cuDNN SDPA", "no cuDNN");
#else
OFF(cudnn, "cuDNN SDPA", "no CUDA");
#endif
#define CUDNN &off_cudnn
#endif

const struct kern_ops *const kern_table[] = {
	&kern_cpu, NAIVE, FLASH, HOPPER, CUDNN, NULL
};

/* sm_90a code runs on compute capability 9.0 alone: on 9.x and 10.x it
 * would not even load. */
static int runs_on(const struct kern_ops *k, int major, int minor)
{
	if (k->disabled != NULL || !(k->caps & KC_GPU))
		return 0;
	return k != HOPPER || (major == 9 && minor == 0);
}

const struct kern_ops *kern_default(int cc_major, int cc_minor, int have_gpu)
{
	/* fastest first (bench/results/hopper-h200-versus.tsv) */
	const struct kern_ops *const pref[] = { HOPPER, FLASH, NAIVE };

	for (size_t i = 0; have_gpu && i < sizeof pref / sizeof pref[0]; i++)
		if (runs_on(pref[i], cc_major, cc_minor))
			return pref[i];
	return &kern_cpu;
}

int kern_all(int cc_major, int cc_minor, int have_gpu, const struct kern_ops **out, int max)
{
	int n = 0;

	if (!have_gpu) {
		if (max > 0)
			out[n++] = &kern_cpu;
		return n;
	}
	for (int i = 0; kern_table[i] != NULL && n < max; i++)
		if (runs_on(kern_table[i], cc_major, cc_minor))
			out[n++] = kern_table[i];
	return n;
}

const struct kern_ops *kern_find(const char *name)
{
	for (int i = 0; kern_table[i] != NULL; i++)
		if (strcmp(kern_table[i]->name, name) == 0)
			return kern_table[i];
	return NULL;
}
