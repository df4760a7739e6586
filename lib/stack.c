/* The stack column (stack.h).  One file with the version calls of every
 * library, each under its HAVE_* (NCCL and cuDNN come only with CUDA): a
 * build without a library never has rows that used it. */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#ifdef HAVE_CUDA
#include <cublas_api.h>
#include <cuda_runtime_api.h>
#endif
#ifdef HAVE_CUDNN
#include <cudnn.h>
#endif
#ifdef HAVE_NCCL
#include <nccl.h>
#endif

#include "stack.h"

unsigned stack_kern(const struct kern_ops *k)
{
	unsigned s;

	if (!(k->caps & KC_GPU))
		return 0;
	s = STACK_CUDA;
	if (strcmp(k->name, "naive") == 0)
		s |= STACK_CUBLAS;
	if (strcmp(k->name, "cudnn") == 0)
		s |= STACK_CUDNN;
	return s;
}

#ifdef HAVE_CUDA
/* Appends " " and the formatted text to b. */
static void add(char *b, size_t n, const char *fmt, ...)
{
	size_t l = strlen(b);
	va_list ap;

	if (l + 1 >= n)
		return;
	b[l++] = ' ';
	b[l] = '\0';
	va_start(ap, fmt);
	vsnprintf(b + l, n - l, fmt, ap);
	va_end(ap);
}

#if defined(HAVE_CUDNN) || defined(HAVE_NCCL)
/* NAME=major.minor.patch from a library's code: MAJOR*10000 + MINOR*100 +
 * PATCH (NCCL since 2.9, cuDNN since 9), MAJOR*1000 + MINOR*100 + PATCH
 * before. */
static void semver(char *b, size_t n, const char *name, int v, int big)
{
	int d = v >= big ? 10000 : 1000;

	add(b, n, "%s=%d.%d.%d", name, v / d, v % d / 100, v % 100);
}
#endif

/* The kernel module's version (what nvidia-smi calls the driver), without
 * NVML: sysfs, else the NVRM line, else the CUDA version the driver
 * supports. */
static void driver(char *b, size_t n)
{
	char line[512], *t, *save = NULL;
	FILE *fp;
	int v = 0;

	if ((fp = fopen("/sys/module/nvidia/version", "r")) != NULL) {
		t = fgets(line, sizeof line, fp);
		fclose(fp);
		if (t != NULL && isdigit((unsigned char)line[0])) {
			line[strcspn(line, " \t\n")] = '\0';
			add(b, n, "driver=%s", line);
			return;
		}
	}
	if ((fp = fopen("/proc/driver/nvidia/version", "r")) != NULL) {
		t = fgets(line, sizeof line, fp);
		fclose(fp);
		for (t = t ? strtok_r(line, " \t\n", &save) : NULL; t != NULL; t = strtok_r(NULL, " \t\n", &save))
			if (isdigit((unsigned char)t[0]) && strchr(t, '.') != NULL) {
				add(b, n, "driver=%s", t);
				return;
			}
	}
	if (cudaDriverGetVersion(&v) != cudaSuccess)
		v = 0;
	add(b, n, "driver=cuda-%d.%d", v / 1000, v % 1000 / 10);
}

static void make(char *b, size_t n, unsigned what)
{
	int v, ma, mi, pa;

	b[0] = '\0';
	if (what & STACK_CUDA) {
		driver(b, n);
		if (cudaRuntimeGetVersion(&v) == cudaSuccess)
			add(b, n, "cuda=%d.%d", v / 1000, v % 1000 / 10);
	}
	if ((what & STACK_CUBLAS) && cublasGetProperty(MAJOR_VERSION, &ma) == CUBLAS_STATUS_SUCCESS &&
	    cublasGetProperty(MINOR_VERSION, &mi) == CUBLAS_STATUS_SUCCESS &&
	    cublasGetProperty(PATCH_LEVEL, &pa) == CUBLAS_STATUS_SUCCESS)
		add(b, n, "cublas=%d.%d.%d", ma, mi, pa);
#ifdef HAVE_CUDNN
	if (what & STACK_CUDNN)
		semver(b, n, "cudnn", (int)cudnnGetVersion(), 90000);
#endif
#ifdef HAVE_NCCL
	if ((what & STACK_NCCL) && ncclGetVersion(&v) == ncclSuccess)
		semver(b, n, "nccl", v, 20900);
#endif
	memmove(b, b + (b[0] == ' '), strlen(b));
}
#endif

const char *stack_str(unsigned what)
{
	static char s[16][160];
	static int have[16];

	what &= 15;
	if (!have[what]) {
#ifdef HAVE_CUDA
		make(s[what], sizeof s[what], what);
#endif
		if (s[what][0] == '\0')
			snprintf(s[what], sizeof s[what], "-");
		have[what] = 1;
	}
	return s[what];
}
