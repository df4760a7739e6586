/* The mask file: see mask(5) -- amask(5) -- for the bytes.  A file is read
 * whole, every size is checked against its length before anything is
 * allocated from it, and the body goes through the same checks as a mask
 * built in memory, so a file that reads is a mask that means one thing. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mask.h"
#include "util.h"
#include "mask_priv.h"

#define MAGIC      "\x89" "AMASK\r\n"     /* 8 bytes; catches text-mode mangling */
#define VERSION    1
#define HDR        352
#define TRAILER    8
#define SLICE      20
#define MAXHEADS   65536

static uint64_t fnv1a(const unsigned char *p, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ULL;

	for (size_t i = 0; i < n; i++) {
		h ^= p[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

static uint32_t get32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get64(const unsigned char *p)
{
	return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

static void put32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)v;
	p[1] = (unsigned char)(v >> 8);
	p[2] = (unsigned char)(v >> 16);
	p[3] = (unsigned char)(v >> 24);
}

static void put64(unsigned char *p, uint64_t v)
{
	put32(p, (uint32_t)v);
	put32(p + 4, (uint32_t)(v >> 32));
}

/* Body bytes for the counts in a header; 0 if they cannot fit in memory. */
static uint64_t body_size(uint32_t body, uint32_t heads, uint64_t n1, uint64_t n2)
{
	unsigned __int128 bits, b;

	if (body == MASK_BODY_SLICES)
		return n1 > (UINT64_MAX >> 8) ? 0 : n1 * SLICE;
	bits = (unsigned __int128)heads * n1 * n2;
	b = 4 * ((unsigned __int128)n1 + 1) + 4 * ((unsigned __int128)n2 + 1) + (bits + 7) / 8;
	return b > (UINT64_MAX >> 8) ? 0 : (uint64_t)b;
}

static int text_ok(const unsigned char *p, size_t n, const char *what, char *err, size_t errlen)
{
	size_t len = strnlen((const char *)p, n);

	if (len == n)
		return mask_fail(err, errlen, "%s is not NUL-terminated", what);
	for (size_t i = 0; i < len; i++)
		if (p[i] < 0x20 || p[i] == 0x7f)
			return mask_fail(err, errlen, "%s has a control character", what);
	for (size_t i = len; i < n; i++)
		if (p[i] != 0)
			return mask_fail(err, errlen, "%s has bytes after its NUL", what);
	return 0;
}

struct hdr {
	uint32_t body, heads;
	uint64_t sq, sk, area, n1, n2;
	uint64_t want;           /* the file length the counts imply */
};

/* The header's own checks and the file length it implies, from the first
 * HDR bytes (the caller has them), so a reader knows how much to read
 * before it reads it. */
static int header(const unsigned char *b, struct hdr *h, char *err, size_t errlen)
{
	uint32_t version;

	if (memcmp(b, MAGIC, 8) != 0)
		return mask_fail(err, errlen, "not a mask file (bad magic)");
	if ((version = get32(b + 8)) != VERSION)
		return mask_fail(err, errlen, "version %u, this build reads %d", version, VERSION);
	h->body = get32(b + 12);
	h->sq = get64(b + 16);
	h->sk = get64(b + 24);
	h->heads = get32(b + 32);
	h->area = get64(b + 40);
	h->n1 = get64(b + 48);
	h->n2 = get64(b + 56);
	if (h->body != MASK_BODY_SLICES && h->body != MASK_BODY_BLOCKS)
		return mask_fail(err, errlen, "unknown body kind %u", h->body);
	if (h->sq < 1 || h->sk < 1)
		return mask_fail(err, errlen, "seqlen %llu x %llu: must be at least 1",
		    (unsigned long long)h->sq, (unsigned long long)h->sk);
	if (h->sq >= (uint64_t)MASK_MAXSEQ || h->sk >= (uint64_t)MASK_MAXSEQ)
		return mask_fail(err, errlen, "seqlen %llu x %llu: must be below 2^32",
		    (unsigned long long)h->sq, (unsigned long long)h->sk);
	if (h->body == MASK_BODY_SLICES && (h->heads != 1 || h->n2 != 0))
		return mask_fail(err, errlen, "a slice body has 1 mask head and no k blocks");
	if (h->body == MASK_BODY_BLOCKS) {
		if (h->heads < 1 || h->heads > MAXHEADS)
			return mask_fail(err, errlen, "%u mask heads, not in 1..%d", h->heads, MAXHEADS);
		if (h->n1 < 1 || h->n1 > h->sq || h->n2 < 1 || h->n2 > h->sk)
			return mask_fail(err, errlen, "%llu x %llu blocks for %llu x %llu tokens",
			    (unsigned long long)h->n1, (unsigned long long)h->n2,
			    (unsigned long long)h->sq, (unsigned long long)h->sk);
	}
	h->want = body_size(h->body, h->heads, h->n1, h->n2);
	if (h->want == 0 && h->n1 > 0)
		return mask_fail(err, errlen, "counts %llu x %llu too large", (unsigned long long)h->n1,
		    (unsigned long long)h->n2);
	h->want += HDR + TRAILER;
	return 0;
}

static int size_msg(size_t n, uint64_t want, char *err, size_t errlen)
{
	return mask_fail(err, errlen, n < want ? "truncated: %zu bytes, the header says %llu" :
	    "%zu bytes, the header says %llu", n, (unsigned long long)want);
}

static int parse(const unsigned char *b, size_t n, struct mask *m, char *err, size_t errlen)
{
	struct hdr h;
	uint64_t n1, n2;
	const unsigned char *p = b + HDR;

	if (n < HDR + TRAILER)
		return mask_fail(err, errlen, "truncated: %zu bytes, a mask file has at least %d",
		    n, HDR + TRAILER);
	if (header(b, &h, err, errlen) != 0)
		return -1;
	if (n < h.want)
		return size_msg(n, h.want, err, errlen);
	if (n > h.want)
		return mask_fail(err, errlen, "more bytes than the header says (%llu)",
		    (unsigned long long)h.want);
	if (fnv1a(b, n - TRAILER) != get64(b + n - TRAILER))
		return mask_fail(err, errlen, "bad checksum");
	if (get32(b + 36) != 0)
		return mask_fail(err, errlen, "reserved header field is not zero");
	if (text_ok(b + 64, MASK_PATTERN, "pattern name", err, errlen) != 0 ||
	    text_ok(b + 96, MASK_PARAMS, "parameter text", err, errlen) != 0)
		return -1;

	n1 = h.n1;
	n2 = h.n2;
	if (h.body == MASK_BODY_SLICES) {
		mask_init(m, (int64_t)h.sq, (int64_t)h.sk, (const char *)b + 64, (const char *)b + 96);
		if (n1 > 0 && (m->slices = malloc(n1 * sizeof *m->slices)) == NULL)
			return mask_fail(err, errlen, "out of memory for %llu slices", (unsigned long long)n1);
		m->cap = m->nslices = n1;
		for (uint64_t i = 0; i < n1; i++, p += SLICE) {
			struct mask_slice *s = &m->slices[i];
			s->q0 = get32(p);
			s->q1 = get32(p + 4);
			s->k0 = get32(p + 8);
			s->k1 = get32(p + 12);
			s->kind = (int32_t)(get32(p + 16) > INT32_MAX ? INT32_MAX : get32(p + 16));
		}
	} else {
		int64_t *qb = malloc((n1 + 1) * sizeof *qb), *kb = malloc((n2 + 1) * sizeof *kb);
		uint64_t bits = (uint64_t)h.heads * n1 * n2, nb = (bits + 7) / 8;
		int rc = -1;
		if (qb != NULL && kb != NULL) {
			for (uint64_t i = 0; i <= n1; i++, p += 4)
				qb[i] = get32(p);
			for (uint64_t i = 0; i <= n2; i++, p += 4)
				kb[i] = get32(p);
			rc = mask_init_blocks(m, (int64_t)h.sq, (int64_t)h.sk, (int)h.heads, (int64_t)n1,
			    qb, (int64_t)n2, kb, (const char *)b + 64, (const char *)b + 96);
		}
		free(qb);
		free(kb);
		if (rc != 0)
			return mask_fail(err, errlen, "out of memory for %llu x %llu blocks",
			    (unsigned long long)n1, (unsigned long long)n2);
		memcpy(m->bits, p, nb);
		if (bits % 8 != 0 && (p[nb - 1] >> (bits % 8)) != 0)
			return mask_fail(err, errlen, "bitmap padding bits are set");
	}
	if (mask_check(m, 1, err, errlen) != 0)
		return -1;
	if (m->area != h.area)
		return mask_fail(err, errlen, "area %llu in the header, the body gives %llu",
		    (unsigned long long)h.area, (unsigned long long)m->area);
	return 0;
}

/* Append to *b (capacity *cap, length *n) until *n == limit or end of file. */
static int slurp(FILE *fp, unsigned char **b, size_t *cap, size_t *n, size_t limit)
{
	while (*n < limit) {
		size_t r, want;
		if (*n == *cap) {
			size_t c = *cap ? *cap * 2 : 4096;
			unsigned char *x;
			if (c > limit)
				c = limit;
			if ((x = realloc(*b, c)) == NULL) {
				errno = ENOMEM;
				return -1;
			}
			*b = x;
			*cap = c;
		}
		want = *cap - *n;
		if ((r = fread(*b + *n, 1, want, fp)) == 0)
			break;
		*n += r;
	}
	return ferror(fp) ? -1 : 0;
}

int mask_read(const char *path, struct mask *m, char *err, size_t errlen)
{
	FILE *fp;
	unsigned char *b = NULL;
	size_t n = 0, cap = 0;
	struct hdr h;
	struct stat st;
	int rc = 0, known, stdin_ = strcmp(path, "-") == 0;

	memset(m, 0, sizeof *m);
	if (stdin_)
		fp = stdin;
	else if ((fp = fopen(path, "rb")) == NULL)
		return mask_fail(err, errlen, "%s", strerror(errno));
	known = fstat(fileno(fp), &st) == 0;
	if (known && S_ISDIR(st.st_mode))
		rc = mask_fail(err, errlen, "is a directory");
	/* The header says how long the file is: read no more than that, and
	 * one byte to see trailing garbage, whatever the input is. */
	else if (slurp(fp, &b, &cap, &n, HDR) != 0)
		rc = mask_fail(err, errlen, "%s", strerror(errno));
	else if (n == HDR && header(b, &h, err, errlen) != 0)
		rc = -1;
	else if (n == HDR && known && S_ISREG(st.st_mode) && (uint64_t)st.st_size != h.want)
		rc = size_msg((size_t)st.st_size, h.want, err, errlen);
	else if (n == HDR && h.want < SIZE_MAX && slurp(fp, &b, &cap, &n, (size_t)h.want + 1) != 0)
		rc = mask_fail(err, errlen, "%s", strerror(errno));
	if (!stdin_)
		fclose(fp);
	if (rc == 0)
		rc = parse(b, n, m, err, errlen);
	free(b);
	if (rc != 0)
		mask_free(m);
	return rc;
}

/* The bytes of m, or NULL with a message. */
static unsigned char *serialize(const struct mask *m, size_t *len, char *err, size_t errlen)
{
	uint64_t n1, n2, bs, bits = 0;
	unsigned char *b, *p;

	if (m->sq < 1 || m->sk < 1 || m->sq >= MASK_MAXSEQ || m->sk >= MASK_MAXSEQ) {
		mask_fail(err, errlen, "seqlen %lld x %lld cannot be written", (long long)m->sq,
		    (long long)m->sk);
		return NULL;
	}
	if (m->body == MASK_BODY_SLICES) {
		n1 = m->nslices;
		n2 = 0;
	} else if (m->body == MASK_BODY_BLOCKS && m->heads >= 1 && m->heads <= MAXHEADS) {
		n1 = (uint64_t)m->nqb;
		n2 = (uint64_t)m->nkb;
		bits = (uint64_t)m->heads * n1 * n2;
	} else {
		mask_fail(err, errlen, "body kind %d with %d heads cannot be written", m->body, m->heads);
		return NULL;
	}
	bs = body_size((uint32_t)m->body, (uint32_t)m->heads, n1, n2);
	if ((bs == 0 && n1 > 0) || bs > SIZE_MAX - HDR - TRAILER ||
	    (b = calloc(HDR + bs + TRAILER, 1)) == NULL) {
		mask_fail(err, errlen, "out of memory");
		return NULL;
	}
	memcpy(b, MAGIC, 8);
	put32(b + 8, VERSION);
	put32(b + 12, (uint32_t)m->body);
	put64(b + 16, (uint64_t)m->sq);
	put64(b + 24, (uint64_t)m->sk);
	put32(b + 32, (uint32_t)m->heads);
	put64(b + 40, m->area);
	put64(b + 48, n1);
	put64(b + 56, n2);
	/* the rest of each field stays zero: one byte string per mask */
	memcpy(b + 64, m->pattern, strnlen(m->pattern, MASK_PATTERN - 1));
	memcpy(b + 96, m->params, strnlen(m->params, MASK_PARAMS - 1));
	p = b + HDR;
	if (m->body == MASK_BODY_SLICES) {
		for (size_t i = 0; i < m->nslices; i++, p += SLICE) {
			const struct mask_slice *s = &m->slices[i];
			put32(p, (uint32_t)s->q0);
			put32(p + 4, (uint32_t)s->q1);
			put32(p + 8, (uint32_t)s->k0);
			put32(p + 12, (uint32_t)s->k1);
			put32(p + 16, (uint32_t)s->kind);
		}
	} else {
		for (int64_t i = 0; i <= m->nqb; i++, p += 4)
			put32(p, (uint32_t)m->qb[i]);
		for (int64_t i = 0; i <= m->nkb; i++, p += 4)
			put32(p, (uint32_t)m->kb[i]);
		memcpy(p, m->bits, (bits + 7) / 8);
		if (bits % 8)
			p[(bits + 7) / 8 - 1] &= (unsigned char)((1u << (bits % 8)) - 1);
	}
	put64(b + HDR + bs, fnv1a(b, HDR + bs));
	*len = HDR + bs + TRAILER;
	return b;
}

int mask_write(const char *path, const struct mask *m, char *err, size_t errlen)
{
	unsigned char *b;
	size_t n;
	char *tmp;
	FILE *fp;
	int fd, bad, e = 0;

	if ((b = serialize(m, &n, err, errlen)) == NULL)
		return -1;
	if (strcmp(path, "-") == 0) {
		bad = fwrite(b, 1, n, stdout) != n || fflush(stdout) == EOF;
		free(b);
		return bad ? mask_fail(err, errlen, "stdout: %s", strerror(errno)) : 0;
	}
	if ((fd = out_mktemp(path, &tmp)) == -1) {
		e = errno ? errno : EIO;
		goto out;
	}
	if ((fp = fdopen(fd, "wb")) == NULL) {
		e = errno ? errno : EIO;
		close(fd);
	} else {
		bad = fwrite(b, 1, n, fp) != n;
		bad |= ferror(fp);
		bad |= fclose(fp) == EOF;
		if (bad || (tmp != NULL && rename(tmp, path) == -1))
			e = errno ? errno : EIO;
	}
	if (e != 0)
		out_unlink(tmp);
out:
	free(b);
	free(tmp);
	return e != 0 ? mask_fail(err, errlen, "%s", strerror(e)) : 0;
}
