/* A mask drawn as a grey picture, as the paper's mask figures: about
 * size x size cells, each as dark as the fraction of allowed pairs in it.
 * Counts are exact and computed per slice in closed form (no sampling);
 * the cost is O(slices + cells crossed by a diagonal edge). */
#ifndef RENDER_H
#define RENDER_H
#include <stdint.h>
#include <stdio.h>
#include "mask.h"

enum { RENDER_PGM, RENDER_PNG, RENDER_SVG };

struct picture {
	int64_t w, h;            /* cells across (keys) and down (queries) */
	int64_t cw, ch;          /* keys and queries per cell (the last may hold fewer) */
	uint8_t *px;             /* h*w grey levels, 0 = every pair allowed */
};

/* head: the mask head drawn (block bodies); size: cells on the longer side. */
int  render_mask(const struct mask *m, int head, int size, struct picture *pic, char *err, size_t errlen);
void render_free(struct picture *pic);
int  render_format(const char *path);          /* by extension; -1 if unknown */
int  render_write(FILE *fp, const struct picture *pic, int format);   /* 0 or -1 (I/O) */

#endif
