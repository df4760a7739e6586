/* The kernel choice of kbench and cpbench (kern_default, kern_all) for
 * devices this machine need not have: an H100/H200 (9.0), an A100 (8.0), a
 * B200 (10.0), a consumer Blackwell (12.0), and no GPU.  The expected
 * answers come from the table itself, so a CPU-only build is checked too. */
#include <string.h>

#include "kernel.h"
#include "stack.h"
#include "tap.h"

static const struct kern_ops *built(const char *name)
{
	const struct kern_ops *k = kern_find(name);

	return k != NULL && k->disabled == NULL ? k : NULL;
}

/* What kern_all must give: the table's built GPU kernels in order, hopper
 * only on 9.0; cpu alone without a GPU. */
static int want_all(int major, int minor, int gpu, const struct kern_ops **out)
{
	int n = 0;

	if (!gpu) {
		out[n++] = kern_find("cpu");
		return n;
	}
	for (int i = 0; kern_table[i] != NULL; i++) {
		const struct kern_ops *k = kern_table[i];
		if (k->disabled != NULL || !(k->caps & KC_GPU))
			continue;
		if (strcmp(k->name, "hopper") == 0 && !(major == 9 && minor == 0))
			continue;
		out[n++] = k;
	}
	return n;
}

int main(void)
{
	static const int cc[][2] = { { 9, 0 }, { 8, 0 }, { 8, 6 }, { 9, 1 }, { 10, 0 }, { 12, 0 } };
	const struct kern_ops *hopper = built("hopper"), *flash = built("flash");
	const struct kern_ops *naive = built("naive"), *cpu = kern_find("cpu");
	const struct kern_ops *got[16], *want[16], *one[1];

	ok(cpu != NULL && cpu->disabled == NULL, "cpu is always built");
	for (size_t i = 0; i < sizeof cc / sizeof cc[0]; i++) {
		int ma = cc[i][0], mi = cc[i][1], sm90 = ma == 9 && mi == 0;
		const struct kern_ops *d = kern_default(ma, mi, 1), *exp;

		exp = sm90 && hopper ? hopper : flash ? flash : naive ? naive : cpu;
		ok(d == exp, "default on compute capability %d.%d: %s (want %s)", ma, mi,
		    d ? d->name : "NULL", exp->name);
		ok(kern_default(ma, mi, 0) == cpu, "default without a GPU (cc %d.%d ignored): cpu", ma, mi);

		int n = kern_all(ma, mi, 1, got, 16), m = want_all(ma, mi, 1, want);
		int same = n == m;
		for (int j = 0; same && j < n; j++)
			same = got[j] == want[j];
		ok(same, "all on %d.%d: %d kernels, every built GPU kernel the device runs", ma, mi, n);
		int hashopper = 0, hasdisabled = 0, hascpu = 0;
		for (int j = 0; j < n; j++) {
			hashopper |= strcmp(got[j]->name, "hopper") == 0;
			hasdisabled |= got[j]->disabled != NULL;
			hascpu |= got[j] == cpu;
		}
		ok(hashopper == (sm90 && hopper != NULL), "all on %d.%d: hopper %s", ma, mi,
		    sm90 && hopper ? "included" : "left out");
		ok(!hasdisabled && !hascpu, "all on %d.%d: no disabled kernel, no cpu", ma, mi);
		ok(kern_all(ma, mi, 1, one, 1) == (n > 0), "all on %d.%d: at most max kernels", ma, mi);
	}
	ok(kern_all(9, 0, 0, got, 16) == 1 && got[0] == cpu, "all without a GPU: cpu alone");
	ok(kern_all(9, 0, 0, got, 0) == 0, "all with max 0: none");
	if (hopper != NULL)
		ok(kern_default(9, 0, 1) == hopper && kern_default(9, 0, 1) != kern_default(8, 0, 1),
		    "this build has hopper: the H100/H200 default differs from the A100's");

	/* The stack of a row: nothing for a host kernel, whatever the build. */
	ok(stack_kern(cpu) == 0 && strcmp(stack_str(0), "-") == 0, "a cpu row's stack is -");
	if (naive != NULL)
		ok(stack_kern(naive) == (STACK_CUDA | STACK_CUBLAS), "naive rows name cuBLAS");
	if (built("cudnn") != NULL)
		ok(stack_kern(built("cudnn")) == (STACK_CUDA | STACK_CUDNN), "cudnn rows name cuDNN");
	if (flash != NULL)
		ok(stack_kern(flash) == STACK_CUDA, "flash rows name the driver and runtime alone");
	return tap_done();
}
