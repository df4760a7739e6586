#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hist.h"
#include "util.h"

#ifndef DATADIR
#define DATADIR "/usr/local/share/longattn"
#endif
#ifndef SRCDIR
#define SRCDIR "."
#endif

const char *hist_default(int64_t total)
{
	if (total <= 12 * 1024)
		return "pile";
	if (total <= 64 * 1024)
		return "prolong64k";
	return "prolong512k";
}

void hist_free(struct hist *h)
{
	free(h->lo);
	free(h->hi);
	free(h->cum);
	memset(h, 0, sizeof *h);
}

/* Strict field parsers: the whole token or nothing. */
static int field_int(const char *s, int64_t *v)
{
	char *end;
	long long x;

	errno = 0;
	x = strtoll(s, &end, 10);
	if (end == s || *end != '\0' || errno == ERANGE)
		return -1;
	*v = x;
	return 0;
}

static int field_double(const char *s, double *v)
{
	char *end;

	errno = 0;
	*v = strtod(s, &end);
	if (end == s || *end != '\0' || errno == ERANGE || !isfinite(*v))
		return -1;
	return 0;
}

static int split_ws(char *line, char **f, int max)
{
	int n = 0;
	char *tok, *save;

	for (tok = strtok_r(line, " \t\r\n", &save); tok != NULL; tok = strtok_r(NULL, " \t\r\n", &save)) {
		if (n == max)
			return max + 1;
		f[n++] = tok;
	}
	return n;
}

/* A text input read a line at a time, for the messages' FILE:LINE. */
struct lines {
	FILE *fp;
	const char *path;
	char *line;
	size_t cap;
	long lineno;
};

/* The fields of the next line (as split_ws), 0 for a blank one; -1 at the
 * end of the input; -2 with a message for binary data or a read error. */
static int next_line(struct lines *r, char **f, int max, char *err, size_t errlen)
{
	ssize_t len = getline(&r->line, &r->cap, r->fp);

	if (len == -1) {
		if (!ferror(r->fp))
			return -1;
		snprintf(err, errlen, "%s: %s", r->path, strerror(errno));
		return -2;
	}
	r->lineno++;
	if (memchr(r->line, '\0', (size_t)len) != NULL) {
		snprintf(err, errlen, "%s:%ld: binary data", r->path, r->lineno);
		return -2;
	}
	return split_ws(r->line, f, max);
}

int hist_parse(struct hist *h, FILE *fp, const char *path, char *err, size_t errlen)
{
	struct lines r = { fp, path, NULL, 0, 0 };
	char *f[4];
	size_t nbin = 0, alloc = 0;
	double total = 0;
	const char *base;
	int nf;

	memset(h, 0, sizeof *h);
	base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
	snprintf(h->name, sizeof h->name, "%s", base);
	while ((nf = next_line(&r, f, 3, err, errlen)) >= 0) {
		int64_t lo, hi;
		double w;

		if (nf == 0)
			continue;
		if (r.lineno == 1 && nf == 3 && strcmp(f[0], "lo") == 0 && strcmp(f[1], "hi") == 0 &&
		    strcmp(f[2], "weight") == 0)
			continue;
		if (nf != 3) {
			snprintf(err, errlen, "%s:%ld: want 3 fields 'lo hi weight', got %d", path, r.lineno, nf > 3 ? 4 : nf);
			goto bad;
		}
		if (field_int(f[0], &lo) || field_int(f[1], &hi)) {
			snprintf(err, errlen, "%s:%ld: lo and hi must be integers", path, r.lineno);
			goto bad;
		}
		if (field_double(f[2], &w)) {
			snprintf(err, errlen, "%s:%ld: weight '%s' is not a number", path, r.lineno, f[2]);
			goto bad;
		}
		if (lo < 0 || hi > HIST_MAXLEN) {
			snprintf(err, errlen, "%s:%ld: bin [%lld, %lld) out of range", path, r.lineno,
			    (long long)lo, (long long)hi);
			goto bad;
		}
		if (lo >= hi) {
			snprintf(err, errlen, "%s:%ld: lo %lld is not below hi %lld", path, r.lineno,
			    (long long)lo, (long long)hi);
			goto bad;
		}
		if (hi <= 1) {
			snprintf(err, errlen, "%s:%ld: bin [%lld, %lld) holds no positive length", path, r.lineno,
			    (long long)lo, (long long)hi);
			goto bad;
		}
		if (w < 0) {
			snprintf(err, errlen, "%s:%ld: negative weight %s", path, r.lineno, f[2]);
			goto bad;
		}
		if (nbin == alloc) {
			alloc = alloc ? 2 * alloc : 64;
			h->lo = xrealloc(h->lo, alloc * sizeof *h->lo);
			h->hi = xrealloc(h->hi, alloc * sizeof *h->hi);
			h->cum = xrealloc(h->cum, alloc * sizeof *h->cum);
		}
		total += w;
		h->lo[nbin] = lo;
		h->hi[nbin] = hi;
		h->cum[nbin] = total;
		nbin++;
	}
	if (nf == -2)
		goto bad;
	if (nbin == 0) {
		snprintf(err, errlen, "%s: no bins", path);
		goto bad;
	}
	if (!(total > 0)) {
		snprintf(err, errlen, "%s: weights sum to zero", path);
		goto bad;
	}
	if (!isfinite(total)) {     /* a draw would never land below it */
		snprintf(err, errlen, "%s: weights sum beyond the largest double", path);
		goto bad;
	}
	free(r.line);
	h->n = nbin;
	return 0;
bad:
	free(r.line);
	hist_free(h);
	return -1;
}

static int builtin_name(const char *s)
{
	if (*s == '\0')
		return 0;
	for (; *s; s++)
		if (!islower((unsigned char)*s) && !isdigit((unsigned char)*s) && *s != '_' && *s != '-')
			return 0;
	return 1;
}

int hist_load(struct hist *h, const char *name, char *err, size_t errlen)
{
	const char *dirs[4];
	char path[4096], exe[4096];
	FILE *fp;
	int r, i, nd = 0;

	if (builtin_name(name)) {
		const char *env = getenv("LONGATTN_DATA");
		ssize_t n;
		char *slash;

		if (env != NULL && *env != '\0')
			dirs[nd++] = env;
		/* PREFIX/bin/tool -> PREFIX/share/longattn/dists: an installed
		 * tree works wherever it was put, whatever PREFIX it was built for */
		if ((n = readlink("/proc/self/exe", exe, sizeof exe - 40)) > 0) {
			exe[n] = '\0';
			if ((slash = strrchr(exe, '/')) != NULL) {
				strcpy(slash, "/../share/longattn/dists");
				dirs[nd++] = exe;
			}
		}
		dirs[nd++] = DATADIR "/dists";
		dirs[nd++] = SRCDIR "/masks/dists";
		for (i = 0; i < nd; i++) {
			snprintf(path, sizeof path, "%s/%s.tsv", dirs[i], name);
			if ((fp = fopen(path, "r")) == NULL)
				continue;
			r = hist_parse(h, fp, path, err, errlen);
			fclose(fp);
			if (r == 0)
				snprintf(h->name, sizeof h->name, "%s", name);
			return r;
		}
	}
	if ((fp = fopen(name, "r")) == NULL) {
		if (builtin_name(name))
			snprintf(err, errlen, "%s: no such histogram (not built in, not a file)", name);
		else
			snprintf(err, errlen, "%s: %s", name, strerror(errno));
		return -1;
	}
	r = hist_parse(h, fp, name, err, errlen);
	fclose(fp);
	return r;
}

int hist_read_lengths(FILE *fp, const char *path, struct lens *out, char *err, size_t errlen)
{
	struct lines r = { fp, path, NULL, 0, 0 };
	char *f[2];
	int nf;

	while ((nf = next_line(&r, f, 1, err, errlen)) >= 0) {
		int64_t v;

		if (nf == 0)
			continue;
		if (nf > 1) {
			snprintf(err, errlen, "%s:%ld: want one length per line", path, r.lineno);
			goto bad;
		}
		if (r.lineno == 1 && strcmp(f[0], "len") == 0)
			continue;
		if (field_int(f[0], &v)) {
			snprintf(err, errlen, "%s:%ld: '%s' is not an integer", path, r.lineno, f[0]);
			goto bad;
		}
		if (v <= 0 || v >= HIST_MAXLEN) {
			snprintf(err, errlen, "%s:%ld: length %lld out of range [1, 2^32)", path, r.lineno, (long long)v);
			goto bad;
		}
		lens_push(out, v);
	}
	free(r.line);
	if (nf == -2)
		return -1;
	if (out->n == 0) {
		snprintf(err, errlen, "%s: no lengths", path);
		return -1;
	}
	return 0;
bad:
	free(r.line);
	return -1;
}
