/* The result row every measuring tool writes (DESIGN.md "Result rows").
 * Header once, then one row per (tool, kernel/strategy, mask, shape, pass).
 * A row whose status is not "ok" (or "predicted") has empty numbers. */
#ifndef TSV_H
#define TSV_H
#include <stdint.h>
#include <stdio.h>

struct row {
	const char *tool, *kernel, *mask;
	int64_t sq, sk;
	double area;                  /* allowed pairs per attention head (mask area / mask heads) */
	int batch, hq, hkv, hd;
	const char *dtype, *pass;     /* "bf16"/"fp16", "fwd"/"bwd" */
	int world, ulysses, ring;     /* 0 = not applicable: printed empty */
	const char *status;           /* ok oom unsupported wrong error predicted */
	int iters;
	double ms_median, ms_min, ms_max, tflops, mem_gib;
	const char *device, *host, *commit;
	uint64_t seed;
	const char *stack;            /* stack.h's text; NULL is "-" */
	int comm;                     /* 1: a CP row, the two below are printed */
	double sent_bytes;            /* payload bytes sent per rank in one pass, max over ranks */
	double imbalance;             /* per-rank allowed area (x q heads) max/mean; 0 = empty */
	int nodes;                    /* nodes the ranks span, real or --node-size's; 0 = empty */
};

extern const char *const tsv_columns[];   /* NULL-terminated */
void tsv_header(FILE *fp);
void tsv_row(FILE *fp, const struct row *r);

/* FLOPs as the reference counts them: fwd 4*area*hq*hd*batch, bwd 2.5x. */
double tsv_flops(double area, int hq, int hd, int batch, int bwd);

#endif
