/* hopper's bwd pass (namespace hb): not written yet, so check() refuses
 * every shape and kbench writes an `unsupported` row. */
namespace hb {

static const char *check(const struct attn_shape *s, const struct mask *m)
{
	(void)s; (void)m;
	return "bwd pass not written yet";
}

static int init(void **st, const struct attn_shape *s, const struct mask *m, char *err, size_t errlen)
{
	(void)st; (void)s; (void)m;
	snprintf(err, errlen, "bwd pass not written yet");
	return KERN_ERR;
}

static int run(void *st, const struct attn_io *io)
{
	(void)st; (void)io;
	return KERN_ERR;
}

static void fini(void *st)
{
	(void)st;
}

}
