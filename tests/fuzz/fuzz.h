/* What the libFuzzer harnesses share: the input as a byte stream, as a
 * FILE, and the rule that every refusal says why on one line. */
#ifndef FUZZ_H
#define FUZZ_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Bytes taken in order; past the end they read as 0, so every input is
 * some case and a short one a small case. */
struct fz {
	const uint8_t *p;
	size_t n, i;
};

static inline unsigned fz_u8(struct fz *f)
{
	return f->i < f->n ? f->p[f->i++] : 0;
}

static inline unsigned fz_u16(struct fz *f)
{
	unsigned x = fz_u8(f);
	return x | fz_u8(f) << 8;
}

static inline uint64_t fz_mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return x;
}

/* The bytes as a stream to read (fmemopen refuses size 0). */
static inline FILE *fz_open(const uint8_t *data, size_t size)
{
	return size > 0 ? fmemopen((void *)data, size, "rb") : fopen("/dev/null", "rb");
}

#define fz_assert(c, ...) do { if (!(c)) { fprintf(stderr, "fuzz: " __VA_ARGS__); \
	fprintf(stderr, " (%s:%d: %s)\n", __FILE__, __LINE__, #c); abort(); } } while (0)

/* A reader's refusal: a message, on one line. */
static inline void fz_refusal(const char *err)
{
	fz_assert(err[0] != '\0' && strchr(err, '\n') == NULL, "refusal without a one-line message: '%s'", err);
}

#endif
