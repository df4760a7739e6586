/* Device memory through one tracker, so kbench can report a pass's peak
 * (bytes in use at the peak minus before it) and tell OOM from a crash.
 * Every GPU kernel allocates its workspace and plan copies through here.
 * Built only with CUDA (lib/dev_cuda.c). */
#ifndef DEV_H
#define DEV_H
#include <stddef.h>

int    dev_alloc(void **p, size_t n);   /* 0, or -1 when the device is out of memory */
void   dev_free(void *p);               /* NULL is fine */
size_t dev_inuse(void);
size_t dev_peak(void);
void   dev_peak_reset(void);            /* peak = in use now */
/* The compute capability of device dev, for the kernel choice of
 * kern_default; -1 when there is no such device (or no CUDA). */
int    dev_cc(int dev, int *major, int *minor);

#endif
