#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <ucontext.h>

#include "util.h"

void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (p == NULL)
		err(EXIT_BADINPUT, "malloc %zu bytes", n);
	return p;
}

void *xcalloc(size_t n, size_t sz)
{
	void *p = calloc(n ? n : 1, sz ? sz : 1);
	if (p == NULL)
		err(EXIT_BADINPUT, "calloc %zu x %zu bytes", n, sz);
	return p;
}

void *xrealloc(void *p, size_t n)
{
	p = realloc(p, n ? n : 1);
	if (p == NULL)
		err(EXIT_BADINPUT, "realloc %zu bytes", n);
	return p;
}

char *xstrdup(const char *s)
{
	char *p = strdup(s);
	if (p == NULL)
		err(EXIT_BADINPUT, "strdup");
	return p;
}

int64_t parse_int(const char *s, const char *what, int64_t lo, int64_t hi, int suffix)
{
	char *end;
	long long v;
	int64_t mul = 1;

	errno = 0;
	v = strtoll(s, &end, 10);
	if (end == s || errno == ERANGE)
		errx(EXIT_BADINPUT, "%s: '%s' is not an integer", what, s);
	if (suffix && *end != '\0' && end[1] == '\0') {
		switch (*end) {
		case 'k': case 'K': mul = 1024; end++; break;
		case 'm': case 'M': mul = 1024 * 1024; end++; break;
		case 'g': case 'G': mul = 1024 * 1024 * 1024; end++; break;
		}
	}
	if (*end != '\0')
		errx(EXIT_BADINPUT, "%s: '%s' is not an integer", what, s);
	if ((v > 0 && v > LLONG_MAX / mul) || (v < 0 && v < LLONG_MIN / mul))
		errx(EXIT_BADINPUT, "%s: '%s' is out of range", what, s);
	v *= mul;
	if (v < lo || v > hi)
		errx(EXIT_BADINPUT, "%s: '%s' is out of range [%lld, %lld]", what, s,
		    (long long)lo, (long long)hi);
	return v;
}

double parse_double(const char *s, const char *what, double lo, double hi)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (end == s || *end != '\0' || errno == ERANGE || !isfinite(v))
		errx(EXIT_BADINPUT, "%s: '%s' is not a number", what, s);
	if (v < lo || v > hi)
		errx(EXIT_BADINPUT, "%s: '%s' is out of range [%g, %g]", what, s, lo, hi);
	return v;
}

int out_mktemp(const char *path, char **tmp)
{
	struct stat st;
	mode_t um;
	int fd, e;

	/* A device or a FIFO (/dev/null, a named pipe) is written in place:
	 * renaming a temp file over it would replace the device itself. */
	*tmp = NULL;
	if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
		return open(path, O_WRONLY);
	*tmp = xmalloc(strlen(path) + 16);
	sprintf(*tmp, "%s.tmpXXXXXX", path);
	if ((fd = mkstemp(*tmp)) == -1) {
		e = errno;
		free(*tmp);
		*tmp = NULL;
		errno = e;
		return -1;
	}
	/* mkstemp makes 0600; an output file is as readable as any other */
	um = umask(0);
	umask(um);
	(void)fchmod(fd, 0666 & ~um);
	return fd;
}

void out_unlink(const char *tmp)
{
	if (tmp != NULL)
		unlink(tmp);
}

void out_open(struct outfile *o, const char *path)
{
	int fd;

	memset(o, 0, sizeof *o);
	if (path == NULL || strcmp(path, "-") == 0) {
		o->fp = stdout;
		return;
	}
	o->path = xstrdup(path);
	if ((fd = out_mktemp(path, &o->tmp)) == -1)
		err(EXIT_BADINPUT, "%s", path);
	if ((o->fp = fdopen(fd, "w")) == NULL) {
		out_unlink(o->tmp);
		err(EXIT_BADINPUT, "%s", path);
	}
}

void out_close(struct outfile *o)
{
	if (o->path == NULL) {
		if (fflush(stdout) == EOF || ferror(stdout))
			err(EXIT_BADINPUT, "stdout");
		return;
	}
	if ((ferror(o->fp) | (fclose(o->fp) == EOF)) ||
	    (o->tmp != NULL && rename(o->tmp, o->path) == -1)) {
		out_unlink(o->tmp);
		err(EXIT_BADINPUT, "%s", o->path);
	}
	free(o->path);
	free(o->tmp);
	memset(o, 0, sizeof *o);
}

void out_abort(struct outfile *o)
{
	if (o->path != NULL) {
		fclose(o->fp);
		out_unlink(o->tmp);
		free(o->path);
		free(o->tmp);
	}
	memset(o, 0, sizeof *o);
}

void close_stdout(void)
{
	if (ferror(stdout) | (fclose(stdout) == EOF))
		err(EXIT_BADINPUT, "stdout");
}

int split_list(char *s, char **out, int max)
{
	int n = 0;
	char *tok;

	while (n < max && (tok = strsep(&s, ",")) != NULL)
		if (*tok != '\0')
			out[n++] = tok;
	return n;
}

const char *host_name(void)
{
	static char name[256];

	if (name[0] == '\0' && gethostname(name, sizeof name - 1) == -1)
		strcpy(name, "unknown");
	return name;
}

#ifndef COMMIT
#define COMMIT "unknown"
#endif
const char *build_commit(void)
{
	return COMMIT;
}

#ifndef LONGATTN_VERSION
#define LONGATTN_VERSION "unknown"
#endif
#ifndef LONGATTN_FEATURES
#define LONGATTN_FEATURES "unknown"
#endif
_Noreturn void print_version(const char *tool)
{
	printf("%s longattn %s (commit %s; features %s)\n", tool, LONGATTN_VERSION, COMMIT,
	    LONGATTN_FEATURES);
	close_stdout();
	exit(0);
}

/* What the handler writes: prepared outside it, for write(2) alone */
static char crash_what[256] = "starting";
static char crash_line[2][384];
static volatile sig_atomic_t crash_cur;

static void crash_prep(void)
{
	int next = !crash_cur;

	snprintf(crash_line[next], sizeof crash_line[next], "%s: crashed (signal %%d) in %s\n",
	         program_invocation_short_name, crash_what);
	crash_cur = next;
}

static void crash_handler(int sig, siginfo_t *si, void *ctx)
{
	const char *l = crash_line[crash_cur], *p = strstr(l, "%d");
	char num[4] = { (char)('0' + sig / 10 % 10), (char)('0' + sig % 10), 0, 0 };
	void *frames[32];
	int n;

	(void)si;
	if (p != NULL) {
		(void)!write(2, l, (size_t)(p - l));
		(void)!write(2, sig >= 10 ? num : num + 1, sig >= 10 ? 2 : 1);
		(void)!write(2, p + 2, strlen(p + 2));
	}
	n = backtrace(frames, 32);
	backtrace_symbols_fd(frames, n, 2);
#if defined(__x86_64__) && defined(REG_RIP)
	{
		/* A call through a null pointer leaves the unwinder nothing past
		 * the signal frame; the caller's return address is on top of
		 * the stack */
		static const char says[] = "called through a null pointer from:\n";
		const ucontext_t *uc = ctx;
		void *caller;

		if (uc->uc_mcontext.gregs[REG_RIP] == 0) {
			caller = *(void **)uc->uc_mcontext.gregs[REG_RSP];
			(void)!write(2, says, sizeof says - 1);
			backtrace_symbols_fd(&caller, 1, 2);
		}
	}
#else
	(void)ctx;
#endif
	raise(sig);         /* SA_RESETHAND: the default action now */
}

void crash_report(void)
{
	struct sigaction sa;
	void *frame;

	/* backtrace loads libgcc on first use: not inside the handler */
	(void)backtrace(&frame, 1);
	crash_prep();
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = crash_handler;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESETHAND | SA_SIGINFO;
	sigaction(SIGSEGV, &sa, NULL);
	sigaction(SIGBUS, &sa, NULL);
	sigaction(SIGFPE, &sa, NULL);
}

void crash_doing(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(crash_what, sizeof crash_what, fmt, ap);
	va_end(ap);
	crash_prep();
}

void run_threads(int nt, void *(*fn)(void *), void *arg)
{
	pthread_t *tid = xcalloc(nt > 1 ? nt : 1, sizeof *tid);
	int started = 0;

	for (int i = 1; i < nt; i++, started++)
		if (pthread_create(&tid[started], NULL, fn, arg) != 0)
			break;
	fn(arg);
	for (int i = 0; i < started; i++)
		pthread_join(tid[i], NULL);
	free(tid);
}

struct ranges {
	int64_t n, grain;
	void (*fn)(void *, int64_t, int64_t);
	void *arg;
	atomic_llong next;
};

static void *ranges_worker(void *arg)
{
	struct ranges *g = arg;
	int64_t i0;

	while ((i0 = atomic_fetch_add(&g->next, g->grain)) < g->n)
		g->fn(g->arg, i0, i0 + g->grain < g->n ? i0 + g->grain : g->n);
	return NULL;
}

void par_ranges(int nt, int64_t n, int64_t grain, void (*fn)(void *arg, int64_t i0, int64_t i1), void *arg)
{
	struct ranges g = { n, grain, fn, arg, 0 };
	int64_t pieces = (n + grain - 1) / grain;

	run_threads(nt < pieces ? nt : pieces > 0 ? (int)pieces : 1, ranges_worker, &g);
}
