/* The mask picture: every cell's grey level against a brute-force count of
 * allowed pairs, for every pattern at awkward sizes (cells that do not
 * divide S, diagonals crossing cells, blocks), and the PNG's structure
 * (CRC-32 computed bitwise here, Adler-32, stored blocks). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mask.h"
#include "pattern.h"
#include "render.h"
#include "tap.h"

static uint32_t crc_bitwise(const uint8_t *p, size_t n)
{
	uint32_t c = 0xffffffffu;

	for (size_t i = 0; i < n; i++) {
		c ^= p[i];
		for (int k = 0; k < 8; k++)
			c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1)));
	}
	return ~c;
}

static uint32_t be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Walks the chunks, checks every CRC, inflates the stored blocks, checks
 * Adler-32 and compares the pixels.  Returns a reason or NULL. */
static const char *png_check(const uint8_t *f, size_t n, const struct picture *pic)
{
	static const uint8_t sig[8] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n' };
	uint8_t *z = malloc(n), *raw;
	size_t nz = 0, at = 8, nraw = 0, zi;
	uint32_t a = 1, b = 0;
	int iend = 0;

	if (n < 8 || memcmp(f, sig, 8) != 0)
		return "bad signature";
	while (at + 12 <= n) {
		uint32_t len = be32(f + at);

		if (at + 12 + len > n)
			return "chunk past the end";
		if (crc_bitwise(f + at + 4, len + 4) != be32(f + at + 8 + len))
			return "bad chunk CRC";
		if (memcmp(f + at + 4, "IHDR", 4) == 0 &&
		    (be32(f + at + 8) != (uint32_t)pic->w || be32(f + at + 12) != (uint32_t)pic->h || f[at + 16] != 8 || f[at + 17] != 0))
			return "bad IHDR";
		if (memcmp(f + at + 4, "IDAT", 4) == 0) {
			memcpy(z + nz, f + at + 8, len);
			nz += len;
		}
		if (memcmp(f + at + 4, "IEND", 4) == 0)
			iend = 1;
		at += 12 + len;
	}
	if (!iend || at != n)
		return "no IEND at the end";
	if (nz < 6 || ((z[0] << 8) | z[1]) % 31 != 0 || (z[0] & 0x0f) != 8)
		return "bad zlib header";
	raw = malloc(nz);
	for (zi = 2;;) {
		int final = z[zi] & 1;
		size_t len = z[zi + 1] | (size_t)z[zi + 2] << 8, nlen = z[zi + 3] | (size_t)z[zi + 4] << 8;

		if ((z[zi] & 6) != 0 || (len ^ 0xffff) != nlen)
			return "not a stored block";
		memcpy(raw + nraw, z + zi + 5, len);
		nraw += len;
		zi += 5 + len;
		if (final)
			break;
	}
	for (size_t i = 0; i < nraw; i++) {
		a = (a + raw[i]) % 65521;
		b = (b + a) % 65521;
	}
	if (zi + 4 != nz || be32(z + zi) != (b << 16 | a))
		return "bad Adler-32";
	if (nraw != (size_t)(pic->h * (pic->w + 1)))
		return "wrong raw size";
	for (int64_t i = 0; i < pic->h; i++)
		if (raw[i * (pic->w + 1)] != 0 || memcmp(raw + i * (pic->w + 1) + 1, pic->px + i * pic->w, (size_t)pic->w))
			return "pixels differ";
	free(raw);
	free(z);
	return NULL;
}

int main(void)
{
	static const int64_t sizes[] = { 5, 37, 100, 301 };
	static const int cells[] = { 1, 3, 7, 16, 512 };
	int nmask = 0;

	for (const struct pattern *pat = pattern_table; pat->name != NULL; pat++) {
		if (strcmp(pat->name, "custom") == 0)
			continue;
		for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
			int64_t s = sizes[si], lens[8] = { 0 }, nl = 0;
			struct pattern_args a = {
				.s = s, .seed = (uint64_t)si, .window = s / 5, .global = PAT_UNSET, .prefix = PAT_UNSET,
				.block = s / 7 + 1, .minblock = PAT_UNSET, .avgblock = PAT_UNSET,
				.buckets = 3, .startrow = PAT_UNSET, .ratio = 0.4, .heads = 2,
			};
			struct rng r;
			struct mask m;
			char err[256];

			if (strcmp(pat->name, "block_sparse_variable") == 0) {
				a.block = PAT_UNSET;
				a.minblock = s / 9 + 1;
				a.avgblock = s / 4 + 1;
			}
			for (int64_t left = s; left > 0; left -= lens[nl++])
				lens[nl] = nl == 7 ? left : (left / 3 + 1 < left ? left / 3 + 1 : left);
			a.lens = lens;
			a.nlens = (size_t)nl;
			rng_seed(&r, a.seed);
			a.rng = &r;
			if (pat->build(&m, &a, err, sizeof err) == -1) {
				ok(0, "%s S=%lld: %s", pat->name, (long long)s, err);
				continue;
			}
			nmask++;
			for (size_t ci = 0; ci < sizeof cells / sizeof cells[0]; ci++) {
				struct picture pic;
				int64_t worst = 0;

				for (int h = 0; h < m.heads; h++) {
					if (render_mask(&m, h, cells[ci], &pic, err, sizeof err) == -1) {
						ok(0, "%s: render: %s", pat->name, err);
						continue;
					}
					for (int64_t i = 0; i < pic.h; i++)
						for (int64_t j = 0; j < pic.w; j++) {
							int64_t n = 0, area = 0, want;

							for (int64_t q = i * pic.ch; q < (i + 1) * pic.ch && q < s; q++)
								for (int64_t k = j * pic.cw; k < (j + 1) * pic.cw && k < s; k++, area++)
									n += mask_allows(&m, h, q, k);
							want = (int64_t)(255.0 - 255.0 * (double)n / (double)area + 0.5);
							if (llabs(want - pic.px[i * pic.w + j]) > worst)
								worst = llabs(want - pic.px[i * pic.w + j]);
						}
					render_free(&pic);
				}
				ok(worst == 0, "%s S=%lld %d cells: every cell's grey is the exact allowed fraction (off by %lld)",
				    pat->name, (long long)s, cells[ci], (long long)worst);
			}
			if (si == 2) {
				struct picture pic;
				char *buf = NULL;
				size_t n = 0;
				FILE *fp = open_memstream(&buf, &n);
				const char *why;

				render_mask(&m, 0, 64, &pic, err, sizeof err);
				render_write(fp, &pic, RENDER_PNG);
				fclose(fp);
				why = png_check((const uint8_t *)buf, n, &pic);
				ok(why == NULL, "%s: PNG chunks, CRCs, stored deflate and Adler-32 check: %s", pat->name,
				    why ? why : "ok");
				free(buf);
				render_free(&pic);
			}
			mask_free(&m);
		}
	}
	ok(nmask > 60, "%d masks drawn", nmask);
	return tap_done();
}
