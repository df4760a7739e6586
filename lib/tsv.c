#include <string.h>

#include "tsv.h"

const char *const tsv_columns[] = {
	"tool", "kernel", "mask", "seqlen_q", "seqlen_k", "area", "batch",
	"heads_q", "heads_kv", "head_dim", "dtype", "pass", "world", "ulysses",
	"ring", "status", "iters", "ms_median", "ms_min", "ms_max", "tflops",
	"mem_gib", "device", "host", "commit", "seed",
	"stack", "sent_bytes", "imbalance", "nodes", NULL
};

void tsv_header(FILE *fp)
{
	for (int i = 0; tsv_columns[i] != NULL; i++)
		fprintf(fp, "%s%s", i ? "\t" : "", tsv_columns[i]);
	fputc('\n', fp);
}

/* Tabs or newlines inside a field would break every awk program downstream. */
static void field(FILE *fp, const char *s)
{
	fputc('\t', fp);
	for (; s != NULL && *s; s++)
		fputc(*s == '\t' || *s == '\n' ? ' ' : *s, fp);
}

static void num(FILE *fp, int show, const char *fmt, double v)
{
	fputc('\t', fp);
	if (show)
		fprintf(fp, fmt, v);
}

void tsv_row(FILE *fp, const struct row *r)
{
	/* cpbench --predict's rows have numbers as measured ones do */
	int ok = r->status != NULL && (strcmp(r->status, "ok") == 0 || strcmp(r->status, "predicted") == 0);

	fputs(r->tool, fp);
	field(fp, r->kernel);
	field(fp, r->mask);
	fprintf(fp, "\t%lld\t%lld", (long long)r->sq, (long long)r->sk);
	fprintf(fp, r->area == (double)(long long)r->area ? "\t%.0f" : "\t%.1f", r->area);
	fprintf(fp, "\t%d\t%d\t%d\t%d", r->batch, r->hq, r->hkv, r->hd);
	field(fp, r->dtype);
	field(fp, r->pass);
	num(fp, r->world > 0, "%.0f", r->world);
	num(fp, r->ulysses > 0, "%.0f", r->ulysses);
	num(fp, r->ring > 0, "%.0f", r->ring);
	field(fp, r->status);
	num(fp, ok, "%.0f", r->iters);
	num(fp, ok, "%.4f", r->ms_median);
	num(fp, ok, "%.4f", r->ms_min);
	num(fp, ok, "%.4f", r->ms_max);
	num(fp, ok, "%.4g", r->tflops);
	num(fp, ok, "%.3f", r->mem_gib);
	field(fp, r->device);
	field(fp, r->host);
	field(fp, r->commit);
	fprintf(fp, "\t%llu", (unsigned long long)r->seed);
	field(fp, r->stack != NULL ? r->stack : "-");
	num(fp, ok && r->comm, "%.0f", r->sent_bytes);
	num(fp, ok && r->comm && r->imbalance > 0, "%.4f", r->imbalance);
	num(fp, r->nodes > 0, "%.0f", r->nodes);
	fputc('\n', fp);
}

double tsv_flops(double area, int hq, int hd, int batch, int bwd)
{
	double f = 4.0 * area * hq * hd * batch;
	return bwd ? 2.5 * f : f;
}
