/* custom: a plain-text slice list, "q0 q1 k0 k1 kind" per line, kind one of
 * full causal invcausal bicausal; blank lines and '#' comments skipped. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pattern.h"

static int num(const char *s, int64_t *v)
{
	char *end;

	errno = 0;
	*v = strtoll(s, &end, 10);
	return end == s || *end != '\0' || errno == ERANGE ? -1 : 0;
}

int pat_custom(struct mask *m, const struct pattern_args *a, char *err, size_t errlen)
{
	const char *path = a->file;
	FILE *fp = stdin;
	char *line = NULL, *f[6], *save, *tok, *base;
	const char *name;
	size_t cap = 0;
	ssize_t len;
	long lineno = 0;
	int rc = -1;

	if (path == NULL) {
		snprintf(err, errlen, "custom: a slice list is required (-f FILE)");
		return -1;
	}
	if (strcmp(path, "-") != 0 && (fp = fopen(path, "r")) == NULL) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	base = strrchr(path, '/') ? strrchr(path, '/') + 1 : (char *)path;
	name = fp == stdin ? "stdin" : path;
	mask_init(m, a->s, a->s, "custom", "");
	pat_param(m, "file=%.200s", fp == stdin ? "stdin" : base);
	while ((len = getline(&line, &cap, fp)) != -1) {
		int64_t v[4];
		int nf = 0, kind;

		lineno++;
		/* the tokens would end at a NUL and hide what follows it */
		if (memchr(line, '\0', (size_t)len) != NULL) {
			snprintf(err, errlen, "%s:%ld: binary data", name, lineno);
			goto out;
		}
		if ((tok = strchr(line, '#')) != NULL)
			*tok = '\0';
		for (tok = strtok_r(line, " \t\r\n", &save); tok != NULL && nf < 6; tok = strtok_r(NULL, " \t\r\n", &save))
			f[nf++] = tok;
		if (nf == 0)
			continue;
		if (nf != 5) {
			snprintf(err, errlen, "%s:%ld: want 'q0 q1 k0 k1 kind'", name, lineno);
			goto out;
		}
		for (int i = 0; i < 4; i++) {
			if (num(f[i], &v[i]) == -1) {
				snprintf(err, errlen, "%s:%ld: '%s' is not an integer", name, lineno, f[i]);
				goto out;
			}
		}
		if ((kind = mask_kind_parse(f[4])) == -1) {
			snprintf(err, errlen, "%s:%ld: unknown kind '%s'", name, lineno, f[4]);
			goto out;
		}
		if (v[0] < 0 || v[2] < 0 || v[1] > a->s || v[3] > a->s) {
			snprintf(err, errlen, "%s:%ld: slice outside the sequence [0, %lld)", name, lineno, (long long)a->s);
			goto out;
		}
		if (v[1] <= v[0] || v[3] <= v[2]) {
			snprintf(err, errlen, "%s:%ld: empty or reversed range (q1 <= q0 or k1 <= k0)", name, lineno);
			goto out;
		}
		if (mask_add(m, v[0], v[1], v[2], v[3], kind) == -1) {
			snprintf(err, errlen, "%s:%ld: out of memory", name, lineno);
			goto out;
		}
	}
	if (ferror(fp)) {
		snprintf(err, errlen, "%s: %s", name, strerror(errno));
		goto out;
	}
	if (m->nslices == 0) {
		snprintf(err, errlen, "%s: no slices", name);
		goto out;
	}
	if (mask_finish(m, err, errlen) == -1) {
		char why[256];

		snprintf(why, sizeof why, "%s", err);
		snprintf(err, errlen, "%s: %s", name, why);
		goto out;
	}
	rc = 0;
out:
	if (rc != 0)
		mask_free(m);
	free(line);
	if (fp != stdin)
		fclose(fp);
	return rc;
}
