/* The mask file: round trips, and every way a file can be wrong is refused
 * with its own message.  Offsets are mask(5)'s, written out here on purpose. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mask.h"
#include "rng.h"
#include "tap.h"
#include "mask_gen.h"

static struct gmask g;
static char dir[64];
static char path[256], path2[256];

static uint64_t fnv(const unsigned char *p, size_t n)
{
	uint64_t h = 14695981039346656037ULL;
	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 1099511628211ULL;
	return h;
}

static unsigned char *load(const char *f, size_t *n)
{
	FILE *fp = fopen(f, "rb");
	unsigned char *b = malloc(1 << 24);
	*n = fread(b, 1, 1 << 24, fp);
	fclose(fp);
	return b;
}

static void save(const char *f, const unsigned char *b, size_t n)
{
	FILE *fp = fopen(f, "wb");
	fwrite(b, 1, n, fp);
	fclose(fp);
}

static void le32(unsigned char *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> 8 * i); }
static void le64(unsigned char *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> 8 * i); }

/* write b with a correct checksum, read it back: the message must contain want */
static void refused(const unsigned char *orig, size_t n, void (*edit)(unsigned char *, size_t *),
                    const char *want, const char *what)
{
	unsigned char *b = malloc(n + 64);
	struct mask m;
	char err[256] = "";
	int rc;

	memcpy(b, orig, n);
	edit(b, &n);
	le64(b + n - 8, fnv(b, n - 8));
	save(path2, b, n);
	rc = mask_read(path2, &m, err, sizeof err);
	ok(rc != 0 && strstr(err, want) != NULL && strchr(err, '\n') == NULL,
	    "refuses %s: %s", what, err);
	if (rc == 0)
		mask_free(&m);
	free(b);
}

static void e_magic(unsigned char *b, size_t *n) { (void)n; b[1] = 'X'; }
static void e_version(unsigned char *b, size_t *n) { (void)n; le32(b + 8, 7); }
static void e_body(unsigned char *b, size_t *n) { (void)n; le32(b + 12, 3); }
static void e_sq0(unsigned char *b, size_t *n) { (void)n; le64(b + 16, 0); }
static void e_sqbig(unsigned char *b, size_t *n) { (void)n; le64(b + 16, 1ULL << 32); }
static void e_skbig(unsigned char *b, size_t *n) { (void)n; le64(b + 24, ~0ULL); }
static void e_heads(unsigned char *b, size_t *n) { (void)n; le32(b + 32, 2); }
static void e_resv(unsigned char *b, size_t *n) { (void)n; b[36] = 1; }
static void e_area(unsigned char *b, size_t *n) { (void)n; b[40] ^= 1; }
static void e_count(unsigned char *b, size_t *n) { (void)n; le64(b + 48, 1ULL << 62); }
static void e_pat(unsigned char *b, size_t *n) { (void)n; memset(b + 64, 'a', 32); }
static void e_patctl(unsigned char *b, size_t *n) { (void)n; b[64] = '\n'; }
static void e_pattail(unsigned char *b, size_t *n) { (void)n; b[64 + 31] = 'z'; }
static void e_par(unsigned char *b, size_t *n) { (void)n; memset(b + 96, 'a', 256); }
static void e_long(unsigned char *b, size_t *n) { (void)b; *n += 4; }
/* slices 0..2 of the fixture: 0..4 full, 4..8 causal, 8..10 invcausal */
static void e_q1q0(unsigned char *b, size_t *n) { (void)n; le32(b + 352 + 20 + 4, 3); }
static void e_overlap(unsigned char *b, size_t *n) { (void)n; le32(b + 352 + 20, 3); }
static void e_order(unsigned char *b, size_t *n)
{
	unsigned char t[20];
	(void)n;
	memcpy(t, b + 352, 20);
	memcpy(b + 352, b + 372, 20);
	memcpy(b + 372, t, 20);
}
static void e_kind(unsigned char *b, size_t *n) { (void)n; le32(b + 352 + 16, 9); }
static void e_qout(unsigned char *b, size_t *n) { (void)n; le32(b + 352 + 40 + 4, 11); }
static void e_kout(unsigned char *b, size_t *n) { (void)n; le32(b + 352 + 40 + 12, 13); }
/* blocks fixture: sq 10 = [0,3,10), sk 7 = [0,2,5,7), 1 head: 6 bits */
static void e_bpad(unsigned char *b, size_t *n) { b[*n - 9] |= 0x80; }
static void e_bbound(unsigned char *b, size_t *n) { (void)n; le32(b + 352 + 4, 11); }
static void e_blast(unsigned char *b, size_t *n) { (void)n; le32(b + 352 + 8, 9); }
static void e_bheads(unsigned char *b, size_t *n) { (void)n; le32(b + 32, 0); }
static void e_bcount(unsigned char *b, size_t *n) { (void)n; le64(b + 48, 11); }

static int same(const struct mask *a, const struct mask *b)
{
	if (a->sq != b->sq || a->sk != b->sk || a->body != b->body || a->heads != b->heads ||
	    a->area != b->area || strcmp(a->pattern, b->pattern) || strcmp(a->params, b->params))
		return 0;
	if (a->body == MASK_BODY_SLICES) {
		if (a->nslices != b->nslices)
			return 0;
		for (size_t i = 0; i < a->nslices; i++)
			if (a->slices[i].q0 != b->slices[i].q0 || a->slices[i].q1 != b->slices[i].q1 ||
			    a->slices[i].k0 != b->slices[i].k0 || a->slices[i].k1 != b->slices[i].k1 ||
			    a->slices[i].kind != b->slices[i].kind)
				return 0;
		return 1;
	}
	if (a->nqb != b->nqb || a->nkb != b->nkb ||
	    memcmp(a->qb, b->qb, (size_t)(a->nqb + 1) * sizeof *a->qb) ||
	    memcmp(a->kb, b->kb, (size_t)(a->nkb + 1) * sizeof *a->kb))
		return 0;
	for (int h = 0; h < a->heads; h++)
		for (int64_t i = 0; i < a->nqb; i++)
			for (int64_t j = 0; j < a->nkb; j++)
				if (mask_getblock(a, h, i, j) != mask_getblock(b, h, i, j))
					return 0;
	return 1;
}

int main(void)
{
	struct rng r;
	struct mask m, x;
	char err[256];
	int bad = 0, n = 0, accepted = 0, nflip = 0, ntrunc = 0, badtrunc = 0;
	unsigned char *b;
	size_t len;

	/* many small files: memory when there is some */
	snprintf(dir, sizeof dir, "%s/maskio.XXXXXX", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
	if (mkdtemp(dir) == NULL)
		return 1;
	snprintf(path, sizeof path, "%s/a.amask", dir);
	snprintf(path2, sizeof path2, "%s/b.amask", dir);
	rng_seed(&r, 99);

	/* round trips of random slice and block masks */
	for (int it = 0; it < 300; it++, n++) {
		int64_t sq = rng_range(&r, 1, 300), sk = rng_below(&r, 2) ? sq : rng_range(&r, 1, 300);
		if (it % 3 == 2) {
			int nq, nk, heads = rng_below(&r, 2) ? 1 : 4;
			int64_t *qb = g_cuts(&r, sq, &nq, 20), *kb = g_cuts(&r, sk, &nk, 20);
			mask_init_blocks(&m, sq, sk, heads, nq, qb, nk, kb, "blocks", "ratio=0.5 seed=3");
			for (int h = 0; h < heads; h++)
				for (int i = 0; i < nq; i++)
					for (int j = 0; j < nk; j++)
						if (rng_below(&r, 2))
							mask_setblock(&m, h, i, j);
			free(qb);
			free(kb);
			mask_finish(&m, err, sizeof err);
		} else {
			g_random(&g, &r, sq, sk);
			g_tomask(&g, &m, err, sizeof err);
		}
		if (mask_write(path, &m, err, sizeof err) != 0 ||
		    mask_read(path, &x, err, sizeof err) != 0 || !same(&m, &x)) {
			if (!bad++)
				fprintf(stderr, "round trip %d (%s, %zu slices): %s\n", it,
				    m.body == MASK_BODY_SLICES ? "slices" : "blocks", m.nslices, err);
		} else
			mask_free(&x);
		mask_free(&m);
	}
	ok(bad == 0, "write/read round trip of %d random masks (slices, blocks with 1 and 4 heads)", n);

	/* "-" reads stdin and writes stdout */
	{
		int fd = dup(0), ofd = dup(1);
		FILE *fp;
		mask_init(&m, 100, 100, "causal", "w=3");
		mask_add(&m, 0, 100, 0, 100, MASK_CAUSAL);
		mask_finish(&m, err, sizeof err);
		int wrc;
		fflush(stdout);
		fp = freopen(path2, "wb", stdout);
		wrc = fp != NULL ? mask_write("-", &m, err, sizeof err) : -1;
		fflush(stdout);
		dup2(ofd, 1);
		clearerr(stdout);
		ok(wrc == 0, "write to stdout");
		freopen(path2, "rb", stdin);
		ok(mask_read("-", &x, err, sizeof err) == 0 && same(&m, &x), "read from stdin: %s", err);
		mask_free(&x);
		mask_free(&m);
		dup2(fd, 0);
		close(fd);
		close(ofd);
	}

	/* the slice fixture for byte edits */
	mask_init(&m, 10, 12, "fixture", "a=1 b=two");
	mask_add(&m, 0, 4, 0, 4, MASK_FULL);
	mask_add(&m, 4, 8, 0, 6, MASK_CAUSAL);
	mask_add(&m, 8, 10, 2, 12, MASK_INVCAUSAL);
	ok(mask_finish(&m, err, sizeof err) == 0 && mask_write(path, &m, err, sizeof err) == 0,
	    "fixture written");
	b = load(path, &len);
	ok(len == 352 + 3 * 20 + 8, "file is 352 + 20 per slice + 8 bytes (%zu)", len);

	/* every truncation */
	for (size_t l = 0; l < len; l++, ntrunc++) {
		save(path2, b, l);
		if (mask_read(path2, &x, err, sizeof err) == 0) {
			badtrunc++;
			mask_free(&x);
		} else if (strstr(err, "truncated") == NULL)
			badtrunc++;
	}
	ok(badtrunc == 0, "every one of %d truncations refused as truncated", ntrunc);

	/* every flipped byte, three ways each */
	for (size_t i = 0; i < len; i++)
		for (int f = 0; f < 3; f++) {
			static const unsigned char flips[] = { 0xff, 0x01, 0x80 };
			b[i] ^= flips[f];
			save(path2, b, len);
			if (mask_read(path2, &x, err, sizeof err) == 0) {
				accepted++;
				mask_free(&x);
			}
			nflip++;
			b[i] ^= flips[f];
		}
	ok(accepted == 0, "every one of %d flipped bytes refused", nflip);
	b[len - 3] ^= 0x10;
	save(path2, b, len);
	ok(mask_read(path2, &x, err, sizeof err) != 0 && strcmp(err, "bad checksum") == 0,
	    "a flipped checksum byte: %s", err);
	b[len - 3] ^= 0x10;
	save(path2, b, len);
	ok(mask_read(path2, &x, err, sizeof err) == 0 && same(&m, &x), "unflipped it reads again");
	mask_free(&x);

	/* an endless stream after a good header is cut off where the header
	 * says the file ends, not read into memory until it runs out */
	{
		char fifo[300];
		pid_t pid = -1;
		int st;
		snprintf(fifo, sizeof fifo, "%s/fifo", dir);
		if (mkfifo(fifo, 0600) == 0 && (pid = fork()) == 0) {
			static unsigned char zero[65536];
			int fd = open(fifo, O_WRONLY);
			signal(SIGPIPE, SIG_IGN);
			if (write(fd, b, 360) != 360)
				_exit(1);
			while (write(fd, zero, sizeof zero) > 0)
				;
			_exit(0);
		}
		ok(mask_read(fifo, &x, err, sizeof err) != 0 && strstr(err, "more bytes") != NULL,
		    "an endless stream after a good header: %s", err);
		if (pid > 0)
			waitpid(pid, &st, 0);
		unlink(fifo);
	}
	refused(b, len, e_magic, "magic", "wrong magic");
	refused(b, len, e_version, "version 7, this build reads 1", "wrong version");
	refused(b, len, e_body, "body kind", "unknown body kind");
	refused(b, len, e_sq0, "at least 1", "seqlen 0");
	refused(b, len, e_sqbig, "below 2^32", "seqlen 2^32");
	refused(b, len, e_skbig, "below 2^32", "seqlen 2^64-1");
	refused(b, len, e_heads, "1 mask head", "2 heads on a slice body");
	refused(b, len, e_resv, "reserved", "reserved field set");
	refused(b, len, e_area, "area", "area mismatch");
	refused(b, len, e_count, "too large", "a huge slice count");
	refused(b, len, e_pat, "pattern name is not NUL", "pattern without NUL");
	refused(b, len, e_patctl, "control", "pattern with a newline");
	refused(b, len, e_pattail, "after its NUL", "bytes after the pattern's NUL");
	refused(b, len, e_par, "parameter text is not NUL", "params without NUL");
	refused(b, len, e_long, "the header says", "trailing bytes");
	refused(b, len, e_q1q0, "q1 3 <= q0 4", "q1 < q0");
	refused(b, len, e_overlap, "slices 0 and 1 overlap", "overlapping slices");
	refused(b, len, e_order, "out of order", "unsorted slices");
	refused(b, len, e_kind, "unknown kind 9", "unknown kind");
	refused(b, len, e_qout, "outside", "q1 beyond seqlen_q");
	refused(b, len, e_kout, "outside", "k1 beyond seqlen_k");
	free(b);
	mask_free(&m);

	/* the block fixture */
	{
		int64_t qb[] = { 0, 3, 10 }, kb[] = { 0, 2, 5, 7 };
		mask_init_blocks(&m, 10, 7, 1, 2, qb, 3, kb, "bfix", "");
		mask_setblock(&m, 0, 0, 1);
		mask_setblock(&m, 0, 1, 2);
		ok(mask_finish(&m, err, sizeof err) == 0 && m.area == 3 * 3 + 7 * 2 &&
		    mask_write(path, &m, err, sizeof err) == 0, "block fixture written, area 23");
		b = load(path, &len);
		ok(len == 352 + 4 * 3 + 4 * 4 + 1 + 8, "block file size (%zu)", len);
		refused(b, len, e_bpad, "padding", "bitmap padding bits set");
		refused(b, len, e_bbound, "not increasing", "block boundaries not increasing");
		refused(b, len, e_blast, "last q block boundary", "last boundary != seqlen");
		refused(b, len, e_bheads, "mask heads", "0 heads");
		refused(b, len, e_bcount, "blocks for", "more blocks than tokens");
		accepted = 0;
		for (size_t l = 0; l < len; l++) {
			save(path2, b, l);
			if (mask_read(path2, &x, err, sizeof err) == 0) {
				accepted++;
				mask_free(&x);
			}
		}
		for (size_t i = 0; i < len; i++) {
			b[i] ^= 0x01;
			save(path2, b, len);
			if (mask_read(path2, &x, err, sizeof err) == 0) {
				accepted++;
				mask_free(&x);
			}
			b[i] ^= 0x01;
		}
		ok(accepted == 0, "block file: every truncation and flipped bit refused");
		free(b);
		mask_free(&m);
	}

	/* I/O errors name the problem; no temp file is left behind */
	ok(mask_read(dir, &x, err, sizeof err) != 0, "reading a directory: %s", err);
	snprintf(path2, sizeof path2, "%s/none", dir);
	ok(mask_read(path2, &x, err, sizeof err) != 0 && strstr(err, "No such file"),
	    "reading a missing file: %s", err);
	snprintf(path2, sizeof path2, "%s/no/such/dir.amask", dir);
	mask_init(&m, 4, 4, "f", "");
	mask_add(&m, 0, 4, 0, 4, MASK_FULL);
	mask_finish(&m, err, sizeof err);
	ok(mask_write(path2, &m, err, sizeof err) != 0, "writing into a missing directory: %s", err);
	mask_free(&m);
	unlink(path);
	snprintf(path2, sizeof path2, "%s/b.amask", dir);
	unlink(path2);
	ok(rmdir(dir) == 0, "no temp files left behind");
	return tap_done();
}
