/* Small things every tool needs: errors, checked allocation, number parsing,
 * atomic output files.  Errors go through err(3)/errx(3) (glibc's err.h),
 * which prefix the tool's name; bad input exits 2, a measured failure 1. */
#ifndef UTIL_H
#define UTIL_H
#include <err.h>
#include <stdint.h>
#include <stdio.h>
#include <stddef.h>

#define EXIT_BADINPUT 2
#define EXIT_WRONG    1

void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t sz);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);

/* Parse a whole string as an integer in [lo,hi] or exit 2 with
 * "TOOL: WHAT: 'S' is not ...".  Accepts K/M/G suffixes (x1024) when
 * suffix is nonzero, so "-n 32K" means 32768. */
int64_t parse_int(const char *s, const char *what, int64_t lo, int64_t hi, int suffix);
double  parse_double(const char *s, const char *what, double lo, double hi);

/* Atomic output: out_open("-") is stdout; otherwise a temp file beside path
 * that out_close renames over path after a checked fclose, and out_abort
 * removes.  On failure both exit 2 naming path, unless noted. */
struct outfile {
	FILE *fp;
	char *path;      /* NULL for stdout */
	char *tmp;
};
void out_open(struct outfile *o, const char *path);
/* The temp file beside path (path.tmpXXXXXX, mode 0666 & ~umask): its fd,
 * or -1 with errno set.  When path is a device or FIFO, path itself is
 * opened and *tmp is NULL: rename only a non-NULL tmp.  For writers that
 * report errors instead of exiting. */
int  out_mktemp(const char *path, char **tmp);
void out_unlink(const char *tmp);     /* NULL is fine */
void out_close(struct outfile *o);
void out_abort(struct outfile *o);    /* never exits */

/* Checked close of stdout for tools that print results: exit 2 on error. */
void close_stdout(void);

/* Split "a,b,c" in place into at most max pointers; returns the count. */
int split_list(char *s, char **out, int max);

/* fn(arg) on nt threads, the caller's among them, until all return.  Fewer
 * run if a thread cannot start: fn must share its work out itself. */
void run_threads(int nt, void *(*fn)(void *), void *arg);
/* fn(arg, i0, i1) over [0, n) in pieces of grain (the last shorter), the
 * pieces claimed one at a time by at most nt threads. */
void par_ranges(int nt, int64_t n, int64_t grain, void (*fn)(void *arg, int64_t i0, int64_t i1), void *arg);

/* The host name and the build's commit, for result rows. */
const char *host_name(void);
const char *build_commit(void);

/* After crash_report, SIGSEGV, SIGBUS or SIGFPE write one line to stderr,
 * "TOOL: crashed (signal N) in WHAT", WHAT as the last crash_doing set
 * it, and a backtrace, then take the signal's default action (a core
 * where enabled): a crash in a job of many ranks names its rank and step.
 * crash_doing prepares the line, so that the handler only writes. */
void crash_report(void);
void crash_doing(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* --version (getopt_long's value OPT_VERSION): "TOOL longattn VERSION
 * (commit C; features cuda nccl ...)" on stdout, the build's features as
 * the Makefile found them; exits 0. */
#define OPT_VERSION 0x1000      /* above every tool's own long-option values */
_Noreturn void print_version(const char *tool);

#endif
