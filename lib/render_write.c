/* Picture files: PGM, SVG, and PNG written by hand (stored deflate blocks,
 * our own CRC-32 and Adler-32), so there is no zlib dependency. */
#include <stdlib.h>
#include <string.h>

#include "render.h"

int render_format(const char *path)
{
	const char *dot = strrchr(path, '.');

	if (dot == NULL)
		return -1;
	if (strcmp(dot, ".png") == 0)
		return RENDER_PNG;
	if (strcmp(dot, ".svg") == 0)
		return RENDER_SVG;
	if (strcmp(dot, ".pgm") == 0)
		return RENDER_PGM;
	return -1;
}

static uint32_t crc32_update(uint32_t crc, const uint8_t *p, size_t n)
{
	static uint32_t table[256];

	if (table[1] == 0) {
		for (uint32_t i = 0; i < 256; i++) {
			uint32_t c = i;

			for (int k = 0; k < 8; k++)
				c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
			table[i] = c;
		}
	}
	crc = ~crc;
	while (n--)
		crc = table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
	return ~crc;
}

static void put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}

static void chunk(FILE *fp, const char *type, const uint8_t *data, size_t n)
{
	uint8_t b[4];
	uint32_t crc;

	put32(b, (uint32_t)n);
	fwrite(b, 1, 4, fp);
	fwrite(type, 1, 4, fp);
	if (n)
		fwrite(data, 1, n, fp);
	crc = crc32_update(0, (const uint8_t *)type, 4);
	crc = crc32_update(crc, data, n);
	put32(b, crc);
	fwrite(b, 1, 4, fp);
}

static int write_png(FILE *fp, const struct picture *pic)
{
	static const uint8_t sig[8] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n' };
	size_t raw = (size_t)pic->h * (size_t)(pic->w + 1), nblk = raw / 65535 + 1, at = 0;
	uint8_t ihdr[13] = { 0 }, *z, *p;
	uint32_t s1 = 1, s2 = 0;

	if ((z = malloc(2 + raw + 5 * nblk + 4)) == NULL)
		return -1;
	p = z;
	*p++ = 0x78;        /* deflate, 32K window */
	*p++ = 0x01;        /* no dictionary, fastest; (0x78 << 8 | 0x01) % 31 == 0 */
	/* The raw image: each row a filter byte 0, then the pixels. */
	do {
		size_t n = raw - at < 65535 ? raw - at : 65535;
		uint8_t *blk;

		*p++ = at + n == raw ? 1 : 0;
		*p++ = (uint8_t)n; *p++ = (uint8_t)(n >> 8);
		*p++ = (uint8_t)~n; *p++ = (uint8_t)(~n >> 8);
		blk = p;
		for (size_t x = at; x < at + n; x++) {
			size_t row = x / (size_t)(pic->w + 1), col = x % (size_t)(pic->w + 1);

			*p++ = col == 0 ? 0 : pic->px[row * (size_t)pic->w + col - 1];
		}
		for (size_t x = 0; x < n; x++) {
			s1 = (s1 + blk[x]) % 65521;
			s2 = (s2 + s1) % 65521;
		}
		at += n;
	} while (at < raw);
	put32(p, s2 << 16 | s1);
	p += 4;
	put32(ihdr, (uint32_t)pic->w);
	put32(ihdr + 4, (uint32_t)pic->h);
	ihdr[8] = 8;        /* bit depth */
	ihdr[9] = 0;        /* greyscale */
	fwrite(sig, 1, sizeof sig, fp);
	chunk(fp, "IHDR", ihdr, sizeof ihdr);
	chunk(fp, "IDAT", z, (size_t)(p - z));
	chunk(fp, "IEND", NULL, 0);
	free(z);
	return 0;
}

/* Runs of equal grey along each row become one rect; white is the background. */
static void write_svg(FILE *fp, const struct picture *pic)
{
	fprintf(fp, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
	    "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%lld\" height=\"%lld\" "
	    "viewBox=\"0 0 %lld %lld\" shape-rendering=\"crispEdges\">\n"
	    "<rect width=\"%lld\" height=\"%lld\" fill=\"#ffffff\"/>\n",
	    (long long)pic->w, (long long)pic->h, (long long)pic->w, (long long)pic->h,
	    (long long)pic->w, (long long)pic->h);
	for (int64_t i = 0; i < pic->h; i++) {
		const uint8_t *row = pic->px + i * pic->w;

		for (int64_t j = 0; j < pic->w;) {
			int64_t e = j;

			while (e < pic->w && row[e] == row[j])
				e++;
			if (row[j] != 255)
				fprintf(fp, "<rect x=\"%lld\" y=\"%lld\" width=\"%lld\" height=\"1\" fill=\"#%02x%02x%02x\"/>\n",
				    (long long)j, (long long)i, (long long)(e - j), row[j], row[j], row[j]);
			j = e;
		}
	}
	fprintf(fp, "</svg>\n");
}

int render_write(FILE *fp, const struct picture *pic, int format)
{
	switch (format) {
	case RENDER_PNG:
		if (write_png(fp, pic) == -1)
			return -1;
		break;
	case RENDER_SVG:
		write_svg(fp, pic);
		break;
	default:
		fprintf(fp, "P5\n%lld %lld\n255\n", (long long)pic->w, (long long)pic->h);
		fwrite(pic->px, 1, (size_t)(pic->w * pic->h), fp);
		break;
	}
	return ferror(fp) ? -1 : 0;
}
