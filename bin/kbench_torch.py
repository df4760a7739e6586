#!/usr/bin/env python3
"""kbench-torch: the PyTorch ecosystem's attention kernels over amask(5)
files, in kbench's result rows (see kbench-torch(1)).

The mask reader, the slice geometry, Flex's block tables and the document
and window classification are pure Python (the tests run them without
torch); torch is imported only to measure."""
import bisect
import getopt
import math
import os
import socket
import stat
import statistics
import struct
import sys
import warnings

PROG = "kbench-torch"
COMMIT = "@COMMIT@"

# The row schema: lib/tsv.c's columns, then stack, sent_bytes, imbalance,
# nodes (issue 17's and cpbench's additions).  Written from this one list.
COLUMNS = (
    "tool", "kernel", "mask", "seqlen_q", "seqlen_k", "area", "batch",
    "heads_q", "heads_kv", "head_dim", "dtype", "pass", "world", "ulysses",
    "ring", "status", "iters", "ms_median", "ms_min", "ms_max", "tflops",
    "mem_gib", "device", "host", "commit", "seed", "stack", "sent_bytes",
    "imbalance", "nodes",
)

TOL = 1e-2              # kbench's KB_TOL: relative error that passes
EXIT_WRONG, EXIT_BADINPUT = 1, 2


class Fatal(Exception):
    """One line on stderr and exit 2."""


def die(msg):
    raise Fatal(msg)


# ---- amask(5) ------------------------------------------------------------------

MAGIC = b"\x89AMASK\r\n"
VERSION, HDR, TRAILER, SLICE = 1, 352, 8, 20
MAXSEQ, MAXHEADS = 1 << 32, 65536
U64 = (1 << 64) - 1
FULL, CAUSAL, INVCAUSAL, BICAUSAL = range(4)
KINDS = ("full", "causal", "invcausal", "bicausal")
BODY_SLICES, BODY_BLOCKS = 1, 2


class MaskError(Exception):
    pass


def fnv1a(b):
    h = 0xcbf29ce484222325
    for x in b:
        h = ((h ^ x) * 0x100000001b3) & U64
    return h


class Mask:
    """A mask as amask(5) holds it; pieces(h) is the common form below."""

    def __init__(self):
        self.sq = self.sk = self.heads = self.area = 0
        self.body = BODY_SLICES
        self.pattern = self.params = ""
        self.slices = []                 # (q0, q1, k0, k1, kind)
        self.qb = self.kb = []
        self.bits = b""
        self.nqb = self.nkb = 0

    def getblock(self, h, i, j):
        n = (h * self.nqb + i) * self.nkb + j
        return (self.bits[n >> 3] >> (n & 7)) & 1

    def rowbits(self, h, i):
        """Bits of cells (h, i, 0..nkb-1) as an int, bit j = cell j."""
        n = (h * self.nqb + i) * self.nkb
        a, b = n >> 3, (n + self.nkb + 7) >> 3
        return (int.from_bytes(self.bits[a:b + 1], "little") >> (n & 7)) & ((1 << self.nkb) - 1)


def _body_size(body, heads, n1, n2):
    if body == BODY_SLICES:
        return 0 if n1 > (U64 >> 8) else n1 * SLICE
    b = 4 * (n1 + 1) + 4 * (n2 + 1) + (heads * n1 * n2 + 7) // 8
    return 0 if b > (U64 >> 8) else b


def _header(b):
    """The header's checks and the file length it implies (mask_io.c)."""
    if b[:8] != MAGIC:
        raise MaskError("not a mask file (bad magic)")
    version, body, sq, sk, heads = struct.unpack_from("<IIQQI", b, 8)
    area, n1, n2 = struct.unpack_from("<QQQ", b, 40)
    if version != VERSION:
        raise MaskError("version %d, this build reads %d" % (version, VERSION))
    if body not in (BODY_SLICES, BODY_BLOCKS):
        raise MaskError("unknown body kind %d" % body)
    if sq < 1 or sk < 1:
        raise MaskError("seqlen %d x %d: must be at least 1" % (sq, sk))
    if sq >= MAXSEQ or sk >= MAXSEQ:
        raise MaskError("seqlen %d x %d: must be below 2^32" % (sq, sk))
    if body == BODY_SLICES and (heads != 1 or n2 != 0):
        raise MaskError("a slice body has 1 mask head and no k blocks")
    if body == BODY_BLOCKS:
        if heads < 1 or heads > MAXHEADS:
            raise MaskError("%d mask heads, not in 1..%d" % (heads, MAXHEADS))
        if n1 < 1 or n1 > sq or n2 < 1 or n2 > sk:
            raise MaskError("%d x %d blocks for %d x %d tokens" % (n1, n2, sq, sk))
    want = _body_size(body, heads, n1, n2)
    if want == 0 and n1 > 0:
        raise MaskError("counts %d x %d too large" % (n1, n2))
    return dict(body=body, sq=sq, sk=sk, heads=heads, area=area, n1=n1, n2=n2,
                want=want + HDR + TRAILER)


def _size_msg(n, want):
    if n < want:
        return "truncated: %d bytes, the header says %d" % (n, want)
    return "%d bytes, the header says %d" % (n, want)


def _text(b, what):
    z = b.find(0)
    if z < 0:
        raise MaskError("%s is not NUL-terminated" % what)
    if any(c < 0x20 or c == 0x7f for c in b[:z]):
        raise MaskError("%s has a control character" % what)
    if any(b[z:]):
        raise MaskError("%s has bytes after its NUL" % what)
    return b[:z].decode("utf-8", "surrogateescape")


def read_mask(path):
    """The mask of a file ("-" is stdin), validated as mask_io.c does, in
    the same order and with the same messages; MaskError otherwise."""
    try:
        if path == "-":
            fp = sys.stdin.buffer
        else:
            if os.path.isdir(path):
                raise MaskError("is a directory")
            fp = open(path, "rb")
        try:
            b = fp.read(HDR)
            if len(b) == HDR:
                h = _header(b)
                if fp is not sys.stdin.buffer:
                    st = os.fstat(fp.fileno())
                    if stat.S_ISREG(st.st_mode) and st.st_size != h["want"]:
                        raise MaskError(_size_msg(st.st_size, h["want"]))
                b += fp.read(h["want"] + 1 - HDR)
        finally:
            if fp is not sys.stdin.buffer:
                fp.close()
    except OSError as e:
        raise MaskError(e.strerror or str(e)) from None
    return parse_mask(b)


def parse_mask(b):
    n = len(b)
    if n < HDR + TRAILER:
        raise MaskError("truncated: %d bytes, a mask file has at least %d" % (n, HDR + TRAILER))
    h = _header(b)
    if n < h["want"]:
        raise MaskError(_size_msg(n, h["want"]))
    if n > h["want"]:
        raise MaskError("more bytes than the header says (%d)" % h["want"])
    if fnv1a(b[:n - TRAILER]) != struct.unpack_from("<Q", b, n - TRAILER)[0]:
        raise MaskError("bad checksum")
    if struct.unpack_from("<I", b, 36)[0] != 0:
        raise MaskError("reserved header field is not zero")
    m = Mask()
    m.pattern = _text(b[64:96], "pattern name")
    m.params = _text(b[96:HDR], "parameter text")
    m.body, m.sq, m.sk, m.heads = h["body"], h["sq"], h["sk"], h["heads"]
    n1, n2 = h["n1"], h["n2"]
    if m.body == BODY_SLICES:
        for i in range(n1):
            q0, q1, k0, k1, kind = struct.unpack_from("<IIIII", b, HDR + SLICE * i)
            m.slices.append((q0, q1, k0, k1, min(kind, 0x7fffffff)))
        _check_slices(m)
    else:
        p = HDR
        m.nqb, m.nkb = n1, n2
        m.qb = list(struct.unpack_from("<%dI" % (n1 + 1), b, p))
        p += 4 * (n1 + 1)
        m.kb = list(struct.unpack_from("<%dI" % (n2 + 1), b, p))
        p += 4 * (n2 + 1)
        bits = m.heads * n1 * n2
        m.bits = b[p:p + (bits + 7) // 8]
        if bits % 8 and (m.bits[-1] >> (bits % 8)) != 0:
            raise MaskError("bitmap padding bits are set")
        _check_bounds(m.qb, n1, m.sq, "q")
        _check_bounds(m.kb, n2, m.sk, "k")
        m.area = sum(head_area(m, hh) for hh in range(m.heads))
        if m.area > U64:
            raise MaskError("area over all heads overflows 64 bits")
    if m.area != h["area"]:
        raise MaskError("area %d in the header, the body gives %d" % (h["area"], m.area))
    return m


def _check_bounds(b, n, s, what):
    if b[0] != 0:
        raise MaskError("first %s block boundary %d, not 0" % (what, b[0]))
    for i in range(1, n + 1):
        if b[i] <= b[i - 1]:
            raise MaskError("%s block boundaries %d and %d not increasing" % (what, i - 1, i))
    if b[n] != s:
        raise MaskError("last %s block boundary %d, not %d" % (what, b[n], s))


def _check_slices(m):
    for i, (q0, q1, k0, k1, kind) in enumerate(m.slices):
        if kind >= len(KINDS):
            raise MaskError("slice %d: unknown kind %d" % (i, kind))
        if q1 <= q0:
            raise MaskError("slice %d: q1 %d <= q0 %d" % (i, q1, q0))
        if k1 <= k0:
            raise MaskError("slice %d: k1 %d <= k0 %d" % (i, k1, k0))
        if q1 > m.sq:
            raise MaskError("slice %d: q range [%d,%d) outside [0,%d)" % (i, q0, q1, m.sq))
        if k1 > m.sk:
            raise MaskError("slice %d: k range [%d,%d) outside [0,%d)" % (i, k0, k1, m.sk))
    order = [(s[0], s[2], s[1], s[3], s[4]) for s in m.slices]   # mask_slice_cmp
    for i in range(1, len(order)):
        if order[i - 1] >= order[i]:
            raise MaskError("slices %d and %d out of order" % (i - 1, i))
    _disjoint(m.slices)
    m.area = sum(slice_area(s) for s in m.slices)


# ---- slice geometry (lib/mask_query.c, lib/mask_priv.h) -----------------------

def row_lo(s, q):
    return q + s[2] - s[0] if s[4] in (INVCAUSAL, BICAUSAL) else s[2]


def row_hi(s, q):
    return q + s[3] - s[1] + 1 if s[4] in (CAUSAL, BICAUSAL) else s[3]


def slice_rows(s):
    """The rows [ra, rb) of s that allow something; ra == rb if none."""
    q0, q1, k0, k1, kind = s
    a, b, c, d = q0, q1, k1 - q1, k0 - q0
    if q0 >= q1 or k0 >= k1:
        return q0, q0
    if kind == CAUSAL:
        a = max(a, k0 - c)
    elif kind == INVCAUSAL:
        b = min(b, k1 - d)
    elif kind == BICAUSAL and c < d:
        b = a
    return (q0, q0) if a >= b else (a, b)


def slice_area(s):
    q0, q1, k0, k1, kind = s
    if q1 <= q0 or k1 <= k0:
        return 0
    n, w = q1 - q0, k1 - k0
    if kind == FULL:
        return n * w
    if kind in (CAUSAL, INVCAUSAL):
        m = min(n, w)
        return m * w - m * (m - 1) // 2
    return n * (w - n + 1) if w >= n else 0


def piece(s):
    """A slice as rows [ra, rb) allowing k in [la*q + lt, ha*q + ht): the
    form every mask builder below shares.  Inside [ra, rb) every row is
    nonempty and within [k0, k1)."""
    ra, rb = slice_rows(s)
    q0, q1, k0, k1, kind = s
    la, lt = (1, k0 - q0) if kind in (INVCAUSAL, BICAUSAL) else (0, k0)
    ha, ht = (1, k1 - q1 + 1) if kind in (CAUSAL, BICAUSAL) else (0, k1)
    return (ra, rb, la, lt, ha, ht)


def pieces(m, h):
    """Mask head h as pieces: its slices, or its kept block cells."""
    if m.body == BODY_SLICES:
        return [p for p in map(piece, m.slices) if p[0] < p[1]]
    out = []
    for i in range(m.nqb):
        x = m.rowbits(h, i)
        while x:
            j = (x & -x).bit_length() - 1
            x &= x - 1
            out.append((m.qb[i], m.qb[i + 1], 0, m.kb[j], 0, m.kb[j + 1]))
    return out


def piece_lo(p, q):
    return p[2] * q + p[3]


def piece_hi(p, q):
    return p[4] * q + p[5]


def _sum_pos(w0, s, n):
    """The sum of max(0, w0 + s*t) for t in [0, n), s in {-1, 0, 1}."""
    if s == 0:
        return n * max(0, w0)
    if s < 0:
        w0 -= n - 1               # the same values, ascending
    lo, hi = max(w0, 1), w0 + n - 1
    return (lo + hi) * (hi - lo + 1) // 2 if hi >= lo else 0


def piece_area(p, q0, q1, k0, k1):
    """Pairs of piece p in [q0,q1) x [k0,k1), in closed form: the clipped
    width of a row, min(hi, k1) - max(lo, k0), is linear between the rows
    where an edge crosses k0 or k1."""
    a, b = max(p[0], q0), min(p[1], q1)
    if a >= b:
        return 0
    cuts = {a, b}
    if p[2]:
        cuts.add(k0 - p[3])
    if p[4]:
        cuts.add(k1 - p[5])
    cuts = sorted(c for c in cuts if a <= c <= b)

    def w(q):
        return min(piece_hi(p, q), k1) - max(piece_lo(p, q), k0)
    n = 0
    for r0, r1 in zip(cuts, cuts[1:]):
        w0 = w(r0)
        n += _sum_pos(w0, w(r0 + 1) - w0 if r1 - r0 > 1 else 0, r1 - r0)
    return n


def head_area(m, h):
    if m.body == BODY_SLICES:
        return sum(slice_area(s) for s in m.slices)
    widths = [m.kb[j + 1] - m.kb[j] for j in range(m.nkb)]
    a = 0
    for i in range(m.nqb):
        x, rowk = m.rowbits(h, i), 0
        while x:
            j = (x & -x).bit_length() - 1
            x &= x - 1
            rowk += widths[j]
        a += rowk * (m.qb[i + 1] - m.qb[i])
    return a


def row_intervals(m, h, q):
    """The allowed k of row q as sorted [lo, hi) intervals (brute force
    over the pieces: the tests' and the small checks' evaluator)."""
    out = []
    if m.body == BODY_SLICES:
        for s in m.slices:
            if s[0] <= q < s[1]:
                lo, hi = row_lo(s, q), row_hi(s, q)
                lo, hi = max(lo, s[2]), min(hi, s[3])
                if lo < hi:
                    out.append((lo, hi))
    else:
        i = bisect.bisect_right(m.qb, q) - 1
        x = m.rowbits(h, i)
        while x:
            j = (x & -x).bit_length() - 1
            x &= x - 1
            out.append((m.kb[j], m.kb[j + 1]))
    return sorted(out)


# The disjointness sweep of lib/mask_build.c: rows top to bottom, the live
# slices ordered by their left edge; disjoint slices cannot swap places
# without meeting, so only neighbours are tested.

def _edges(s):
    if s[4] in (INVCAUSAL, BICAUSAL):
        ls, lt = 1, s[2] - s[0]
    else:
        ls, lt = 0, s[2]
    if s[4] in (CAUSAL, BICAUSAL):
        hs, ht = 1, s[3] - s[1] + 1
    else:
        hs, ht = 0, s[3]
    return ls, lt, hs, ht


def _positive(slope, t, a, b):
    if slope == 0:
        if t <= 0:
            b = a - 1
    elif slope > 0:
        a = max(a, 1 - t)
    else:
        b = min(b, t - 1)
    return a, b


def slices_meet(x, y):
    xa, xb = slice_rows(x)
    ya, yb = slice_rows(y)
    a, b = max(xa, ya), min(xb, yb) - 1
    if a > b:
        return False
    xls, xlt, xhs, xht = _edges(x)
    yls, ylt, yhs, yht = _edges(y)
    a, b = _positive(yhs - xls, yht - xlt, a, b)
    a, b = _positive(xhs - yls, xht - ylt, a, b)
    return a <= b


def _disjoint(sl):
    ins, outs = [], []
    for i, s in enumerate(sl):
        ra, rb = slice_rows(s)
        if ra < rb:
            ins.append((ra, i))
            outs.append((rb, i))
    ins.sort()
    outs.sort()
    live = []
    a = b = 0

    def meet(x, y):
        if slices_meet(sl[x], sl[y]):
            x, y = min(x, y), max(x, y)
            raise MaskError("slices %d and %d overlap (%d %d %d %d %s, %d %d %d %d %s)" % (
                x, y, *sl[x][:4], KINDS[sl[x][4]], *sl[y][:4], KINDS[sl[y][4]]))

    while a < len(ins) or b < len(outs):
        if b < len(outs) and (a >= len(ins) or outs[b][0] <= ins[a][0]):
            r = outs[b][0]
        else:
            r = ins[a][0]
        while b < len(outs) and outs[b][0] == r:
            x = outs[b][1]
            p = bisect.bisect_left(live, row_lo(sl[x], r - 1), key=lambda i: row_lo(sl[i], r - 1))
            if p >= len(live) or live[p] != x:
                raise MaskError("slice %d: sweep lost it" % x)
            del live[p]
            if 0 < p < len(live):
                meet(live[p - 1], live[p])
            b += 1
        while a < len(ins) and ins[a][0] == r:
            x = ins[a][1]
            p = bisect.bisect_left(live, row_lo(sl[x], r), key=lambda i: row_lo(sl[i], r))
            if p > 0:
                meet(live[p - 1], x)
            if p < len(live):
                meet(x, live[p])
            live.insert(p, x)
            a += 1


# ---- what each library is given -----------------------------------------------

def classify(m):
    """Documents with one band each: (cuts, wl, wr) when the mask allows
    exactly the pairs with q, k in one document [cuts[i], cuts[i+1]) and
    -wl <= k - q <= wr (wl, wr None: unbounded), else None.  That is what
    varlen APIs (cu_seqlens, window_size) and SDPA's is_causal express."""
    if m.body != BODY_SLICES or m.sq != m.sk or not m.slices:
        return None
    spans = []
    dmin = dmax = None
    for s in m.slices:
        p = piece(s)
        if p[0] >= p[1]:
            continue
        spans.append((min(s[0], s[2]), max(s[1], s[3])))
        lo = s[2] - s[0] if p[2] else s[2] - (p[1] - 1)
        hi = s[3] - s[1] if p[4] else s[3] - 1 - p[0]
        dmin = lo if dmin is None else min(dmin, lo)
        dmax = hi if dmax is None else max(dmax, hi)
    if not spans:
        return None
    # documents: the closure of the slices' row and key ranges
    spans.sort()
    cuts, end = [0], 0
    for a, b in spans:
        if a > end:
            return None               # tokens no slice reaches
        if a == end and end > 0 and cuts[-1] != end:
            cuts.append(end)
        end = max(end, b)
    if end != m.sq:
        return None
    cuts.append(m.sq)
    wl, wr = -dmin, dmax
    if wl < 0 or wr < 0:
        return None
    longest = max(b - a for a, b in zip(cuts, cuts[1:]))
    wl = None if wl >= longest - 1 else wl
    wr = None if wr >= longest - 1 else wr
    # every allowed pair lies in its document's band (by construction), so
    # equal areas mean equal masks
    if sum(band_area(b - a, wl, wr) for a, b in zip(cuts, cuts[1:])) != m.area:
        return None
    return cuts, wl, wr


def band_area(n, wl, wr):
    """Pairs of [0,n)^2 with -wl <= k - q <= wr (None: unbounded)."""
    def below(t):               # pairs with k - q <= t
        if t < -(n - 1):
            return 0
        if t >= n - 1:
            return n * n
        if t >= 0:
            return n * n - (n - 1 - t) * (n - t) // 2
        return (n + t) * (n + t + 1) // 2
    hi = below(n if wr is None else wr)
    lo = below(-(n + 1) if wl is None else -wl - 1)
    return hi - lo


def flex_tables(m, bq, bk):
    """Flex's block-level tables, from the pieces, never from pairs: per
    mask head, full[i] and part[i], the k-blocks of q-block i that are
    entirely allowed or partly.  A block cut short by the sequence end is
    never full, so the kernel's mask_mod decides its padding."""
    nqb, nkb = -(-m.sq // bq), -(-m.sk // bk)
    out = []
    for h in range(m.heads):
        cnt = [dict() for _ in range(nqb)]
        for p in pieces(m, h):
            ra, rb = p[0], p[1]
            for i in range(ra // bq, (rb - 1) // bq + 1):
                qa, qe = max(ra, i * bq), min(rb, (i + 1) * bq) - 1
                ulo, uhi = piece_lo(p, qa), piece_hi(p, qe)      # union of the rows
                ilo, ihi = piece_lo(p, qe), piece_hi(p, qa)      # their intersection
                c = cnt[i]
                for j in range(ulo // bk, (uhi - 1) // bk + 1):
                    j0, j1 = j * bk, min((j + 1) * bk, m.sk)
                    if j0 >= ilo and j1 <= ihi:
                        n = (qe - qa + 1) * (j1 - j0)
                    else:
                        n = piece_area(p, qa, qe + 1, j0, j1)
                    if n:
                        c[j] = c.get(j, 0) + n
        full, part = [], []
        for i in range(nqb):
            rows = min((i + 1) * bq, m.sq) - i * bq
            f, pp = [], []
            for j in sorted(cnt[i]):
                cols = min((j + 1) * bk, m.sk) - j * bk
                (f if cnt[i][j] == bq * bk and rows == bq and cols == bk else pp).append(j)
            full.append(f)
            part.append(pp)
        out.append((full, part))
    return out


def row_pieces(m):
    """The most pieces that reach one row (slice bodies): a difference
    array over the pieces' row ranges, O(pieces + S)."""
    if m.body != BODY_SLICES:
        return 0
    d = [0] * (m.sq + 1)
    for p in pieces(m, 0):
        d[p[0]] += 1
        d[p[1]] -= 1
    most = c = 0
    for x in d:
        c += x
        most = max(most, c)
    return most


def flex_rows(m, r, rows):
    """Per row q < rows (padding rows allow nothing), the intervals of the
    pieces that reach it, at most r of them: flat lists lo, hi of rows * r
    entries, an unused slot being [0, 0).  Flex's mask_mod reads a row's
    entries only, loads that depend on q alone, so the kernel stays a
    flash kernel."""
    lo, hi, n = [0] * (rows * r), [0] * (rows * r), [0] * rows
    for p in pieces(m, 0):
        for q in range(p[0], p[1]):
            x = q * r + n[q]
            n[q] += 1
            lo[x], hi[x] = piece_lo(p, q), piece_hi(p, q)
    return lo, hi


# ---- the kernels -------------------------------------------------------------------

KERNELS = (
    ("sdpa-math", "torch", "SDPA, math backend: materialises the scores; any mask as a dense boolean"),
    ("sdpa-efficient", "torch", "SDPA, memory-efficient backend: any mask as a dense boolean (an O(S^2) bias)"),
    ("sdpa-flash", "torch", "SDPA, FlashAttention-2 backend: full and causal only (no attn_mask)"),
    ("sdpa-cudnn", "torch", "SDPA, cuDNN backend: full, causal, else a dense boolean if cuDNN takes it"),
    ("flex", "torch.nn.attention.flex_attention", "FlexAttention, compiled: a BlockMask from the slices or blocks"),
    ("fa3", "flash_attn_interface", "FlashAttention-3 varlen: documents (cu_seqlens), causal, windows"),
    ("fa2-varlen", "flash_attn", "FlashAttention-2 varlen: documents (cu_seqlens), causal, windows"),
    ("flashinfer", "flashinfer", "FlashInfer single prefill: full, causal, left windows; forward only"),
)
KNAMES = tuple(k[0] for k in KERNELS)
FLEX_BLOCK = 128
FLEX_R = 4          # pieces a row in Flex's row mask_mod; more make tiles


def flex_kind(m):
    """Which mask_mod Flex gets: "rows" (each row's slices, loads by q
    alone), "cells" (the block bitmap, one load by q and k) or "tiles"
    (partial blocks as 128x128 booleans, for rows reached by more than
    FLEX_R slices)."""
    if m.body == BODY_BLOCKS:
        return "cells"
    return "rows" if row_pieces(m) <= FLEX_R else "tiles"


def form(kern, m, hq):
    """What the kernel is given for mask m, or why it cannot take it:
    ("ok", text) or ("unsupported", reason).  Pure Python."""
    c = classify(m)
    one = c is not None and len(c[0]) == 2
    full = one and c[1] is None and c[2] is None
    causal = one and c[2] == 0 and c[1] is None
    if kern.startswith("sdpa-"):
        if full:
            return "ok", "no mask"
        if causal:
            return "ok", "is_causal"
        if kern == "sdpa-flash":
            return "unsupported", "the flash backend takes no attn_mask: full and causal only"
        return "ok", "dense boolean mask, %d x %d x %d bytes" % (
            1 if m.heads == 1 else hq, m.sq, m.sk)
    if kern == "flex":
        nqb, nkb = -(-m.sq // FLEX_BLOCK), -(-m.sk // FLEX_BLOCK)
        return "ok", "BlockMask %dx%d of %d, mask_mod %s" % (nqb, nkb, FLEX_BLOCK, flex_kind(m))
    if c is None:
        return "unsupported", "not documents of full, causal or windowed attention"
    cuts, wl, wr = c
    win = "(%s, %s)" % (-1 if wl is None else wl, -1 if wr is None else wr)
    if kern == "flashinfer":
        if not one:
            return "unsupported", "documents need the batch prefill wrapper"
        if wr not in (None, 0):
            return "unsupported", "a right window other than 0 or none"
        return "ok", "causal=%s window_left=%s" % (wr == 0, -1 if wl is None else wl)
    return "ok", "cu_seqlens of %d document%s, window_size %s" % (
        len(cuts) - 1, "" if len(cuts) == 2 else "s", win)


# ---- measuring: torch from here on --------------------------------------------------

class Unsupported(Exception):
    pass


def _oom(torch, e):
    if isinstance(e, torch.cuda.OutOfMemoryError):
        return True
    t = str(e)
    return "out of memory" in t or "CUBLAS_STATUS_ALLOC_FAILED" in t


class Dense:
    """A mask's rows as dense booleans, from its pieces with tensor ops:
    each piece row adds +1 at lo and -1 at hi of a difference row, and a
    prefix sum marks the allowed keys.  For SDPA's attn_mask, Flex's tiles
    and the reference; the pairs are never enumerated."""

    def __init__(self, torch, m, dev):
        self.torch, self.m, self.dev = torch, m, dev
        self.p = []
        for h in range(m.heads):
            ps = pieces(m, h) or [(0, 0, 0, 0, 0, 0)]
            t = torch.tensor(ps, dtype=torch.int64, device=dev)
            self.p.append(tuple(t[:, c].contiguous() for c in range(6)))

    def rows(self, h, a, b):
        torch = self.torch
        ra, rb, la, lt, ha, ht = self.p[h]
        sk = self.m.sk
        idx = ((ra < b) & (rb > a)).nonzero().squeeze(1)
        r0 = ra[idx].clamp(min=a)
        cnt = rb[idx].clamp(max=b) - r0
        d = torch.zeros((b - a) * (sk + 1), dtype=torch.int32, device=self.dev)
        if idx.numel():
            pid = torch.repeat_interleave(idx, cnt)
            first = torch.repeat_interleave(torch.cumsum(cnt, 0) - cnt, cnt)
            q = torch.repeat_interleave(r0, cnt) + torch.arange(pid.numel(), device=self.dev) - first
            base = (q - a) * (sk + 1)
            one = torch.ones(pid.numel(), dtype=torch.int32, device=self.dev)
            d.index_add_(0, base + la[pid] * q + lt[pid], one)
            d.index_add_(0, base + ha[pid] * q + ht[pid], -one)
        return torch.cumsum(d.view(b - a, sk + 1), 1, dtype=torch.int32)[:, :sk] > 0

    def chunk(self):
        """Rows per call that keep a difference array near 256 MB."""
        return max(1, min(self.m.sq, (64 << 20) // (self.m.sk + 1)))

    def full(self, h):
        m, torch = self.m, self.torch
        out = torch.empty((m.sq, m.sk), dtype=torch.bool, device=self.dev)
        c = self.chunk()
        for a in range(0, m.sq, c):
            out[a:a + c] = self.rows(h, a, min(a + c, m.sq))
        return out


def head_map(torch, m, hq, dev):
    """Attention head -> mask head (amask(5): a / (hq / heads))."""
    return torch.arange(hq, device=dev) // (hq // m.heads)


class FlexBuf:
    """The tensors the mask_mods below read.  Module-level functions read
    them through this one object, so a new mask of the same shapes swaps
    tensors, never code, and the compiled kernel is reused."""


_FB = FlexBuf()


def _flex_rows(b, h, q, k):
    # every load depends on q alone: a [BLOCK_M, 1] vector per slot
    fb = _FB
    hm = fb.hmap[h]
    r = (k >= fb.lo[hm, q, 0]) & (k < fb.hi[hm, q, 0])
    for i in range(1, FLEX_R):
        r = r | ((k >= fb.lo[hm, q, i]) & (k < fb.hi[hm, q, i]))
    return r


def _flex_cells(b, h, q, k):
    fb = _FB
    return fb.cells[fb.hmap[h], fb.qc[q], fb.kc[k]]


def _flex_tiles(b, h, q, k):
    fb = _FB
    return fb.tiles[fb.ti[fb.hmap[h], q // FLEX_BLOCK, k // FLEX_BLOCK],
                    q % FLEX_BLOCK, k % FLEX_BLOCK]


def flex_blockmask(torch, m, hq, dev):
    """A BlockMask from flex_tables (full blocks skip mask_mod) and the
    mask_mod of flex_kind, exact on every pair of a partial block.
    Returns the mask and a line about it."""
    from torch.nn.attention.flex_attention import BlockMask
    B = FLEX_BLOCK
    kind = flex_kind(m)
    nqb, nkb = -(-m.sq // B), -(-m.sk // B)
    tabs = flex_tables(m, B, B)
    it = lambda x: torch.tensor(x, dtype=torch.int32, device=dev)
    hm = head_map(torch, m, hq, dev)
    fb = _FB
    fb.hmap = hm.to(torch.int32)
    ntiles = 0
    if kind == "rows":
        lo, hi = flex_rows(m, FLEX_R, nqb * B)
        fb.lo = it(lo).view(1, nqb * B, FLEX_R)
        fb.hi = it(hi).view(1, nqb * B, FLEX_R)
        mod = _flex_rows
    elif kind == "cells":
        # one more cell each way, never set: the padding rows and keys
        c = torch.zeros((m.heads, m.nqb + 1, m.nkb + 1), dtype=torch.bool)
        for h in range(m.heads):
            for i in range(m.nqb):
                x = m.rowbits(h, i)
                while x:
                    j = (x & -x).bit_length() - 1
                    x &= x - 1
                    c[h, i, j] = True
        fb.cells = c.to(dev)
        qc, kc = [m.nqb] * (nqb * B), [m.nkb] * (nkb * B)
        for i in range(m.nqb):
            qc[m.qb[i]:m.qb[i + 1]] = [i] * (m.qb[i + 1] - m.qb[i])
        for j in range(m.nkb):
            kc[m.kb[j]:m.kb[j + 1]] = [j] * (m.kb[j + 1] - m.kb[j])
        fb.qc, fb.kc = it(qc), it(kc)
        mod = _flex_cells
    else:
        d = Dense(torch, m, dev)
        part = tabs[0][1]
        ntiles = sum(map(len, part))
        ti = torch.zeros((1, nqb, nkb), dtype=torch.int32)
        t = torch.zeros((ntiles + 1, B, B), dtype=torch.bool, device=dev)
        n = 0
        for i in range(nqb):
            if not part[i]:
                continue
            rows = d.rows(0, i * B, min((i + 1) * B, m.sq))
            for j in part[i]:
                n += 1
                ti[0, i, j] = n
                x = rows[:, j * B:(j + 1) * B]
                t[n, :x.shape[0], :x.shape[1]] = x
        fb.ti, fb.tiles = ti.to(dev), t
        mod = _flex_tiles
    pad = lambda rows: [x + [0] * (nkb - len(x)) for x in rows]
    sel = lambda x: it(x)[hm].unsqueeze(0)          # (1, hq, ...)
    bm = BlockMask.from_kv_blocks(
        sel([[len(x) for x in t[1]] for t in tabs]), sel([pad(t[1]) for t in tabs]),
        sel([[len(x) for x in t[0]] for t in tabs]), sel([pad(t[0]) for t in tabs]),
        BLOCK_SIZE=B, mask_mod=mod, seq_lengths=(m.sq, m.sk))
    nfull = sum(len(x) for t in tabs for x in t[0])
    npart = sum(len(x) for t in tabs for x in t[1])
    text = "%s mask_mod, %d full and %d partial blocks of %d%s" % (
        kind, nfull, npart, B, ", %d tiles" % ntiles if ntiles else "")
    return bm, text


class Kernel:
    """A kernel set up for one mask and shape: call(q, k, v) -> (o, lse)
    with q, k, v the [batch][seq][heads][dim] leaves, o [b][hq][s][d] and
    lse [b][hq][s] (natural log) or None where the API returns none."""
    note = ""


def sdpa_kernel_for(ctx, kern, m, o, how):
    torch = ctx.torch
    F = torch.nn.functional
    from torch.nn.attention import SDPBackend, sdpa_kernel
    be = {"sdpa-math": SDPBackend.MATH, "sdpa-efficient": SDPBackend.EFFICIENT_ATTENTION,
          "sdpa-flash": SDPBackend.FLASH_ATTENTION, "sdpa-cudnn": SDPBackend.CUDNN_ATTENTION}[kern]
    K = Kernel()
    mask = None
    if how == "dense":
        d = Dense(torch, m, ctx.dev)
        if m.heads == 1:
            mask = d.full(0)
        else:
            mask = torch.stack([d.full(h) for h in range(m.heads)])[head_map(torch, m, o.hq, ctx.dev)]
            mask = mask.unsqueeze(0)
        del d
    causal = how == "causal"
    g = o.hq // o.hkv
    state = {"rep": False}

    def call(q, k, v):
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if state["rep"]:
            k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
        with sdpa_kernel([be]):
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal,
                                                 scale=o.scale, enable_gqa=g > 1 and not state["rep"])
        return out, None

    def first(q, k, v):
        """The first call: SDPA says no (RuntimeError, reasons as warnings)
        when the backend cannot take the shape or mask; GQA falls back to
        k and v repeated to hq heads."""
        why = []
        for rep in ((False, True) if g > 1 else (False,)):
            state["rep"] = rep
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                try:
                    r = call(q, k, v)
                    K.note = "k, v repeated to %d heads" % o.hq if rep else ""
                    return r
                except RuntimeError as e:
                    if "No available kernel" not in str(e):
                        raise
                    why = [t for t in (str(x.message).split("(Triggered")[0].strip() for x in w)
                           if t and not t.endswith("because:")]
        raise Unsupported("; ".join(why[-2:]) if why else "no available kernel")
    K.call, K.first, K.mask = call, first, mask
    return K


def flex_kernel_for(ctx, m, o):
    import importlib
    torch = ctx.torch
    fa = importlib.import_module("torch.nn.attention.flex_attention")
    K = Kernel()
    # a compile that failed for this kind and shape fails again: say so
    # at once instead of compiling again (minutes over a set of masks)
    key = (flex_kind(m), m.sq, m.sk, o.hq, o.hkv, o.hd, o.dtype, o.batch)
    if key in ctx.flexfail:
        raise RuntimeError("as before: " + ctx.flexfail[key])
    bm, K.note = flex_blockmask(torch, m, o.hq, ctx.dev)
    aux = getattr(fa, "AuxRequest", None)
    if ctx.flex is None:
        # dynamic shapes: one compile per mask_mod for every length (a
        # static compile per length costs ~20 s of device time each)
        dyn = os.environ.get("LONGATTN_FLEX_DYNAMIC", "1") != "0"
        ctx.flex = torch.compile(fa.flex_attention, dynamic=dyn)
    f, gqa = ctx.flex, o.hq != o.hkv

    def call(q, k, v):
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if aux is not None:
            out, a = f(q, k, v, block_mask=bm, scale=o.scale, enable_gqa=gqa, return_aux=aux(lse=True))
            return out, a.lse
        return f(q, k, v, block_mask=bm, scale=o.scale, enable_gqa=gqa, return_lse=True)

    def first(q, k, v):
        try:
            return call(q, k, v)
        except Exception as e:
            if not _oom(torch, e):
                ctx.flexfail[key] = "%s: %s" % (type(e).__name__, first_line(e))
            raise
    K.call, K.first = call, first
    K.mask = bm
    return K


def varlen_kernel_for(ctx, kern, m, o):
    """fa3 and fa2-varlen: the documents as cu_seqlens, the band as
    window_size; flashinfer: one document, causal or a left window."""
    torch = ctx.torch
    cuts, wl, wr = classify(m)
    S, B = m.sq, o.batch
    K = Kernel()
    if kern == "flashinfer":
        import flashinfer

        def call(q, k, v):
            outs = [flashinfer.single_prefill_with_kv_cache(
                q[b], k[b], v[b], causal=wr == 0, kv_layout="NHD", sm_scale=o.scale,
                window_left=-1 if wl is None else wl) for b in range(B)]
            return torch.stack(outs).transpose(1, 2), None
        K.call = K.first = call
        return K
    mod = __import__("flash_attn_interface" if kern == "fa3" else "flash_attn")
    cu = torch.tensor([b * S + x for b in range(B) for x in cuts[:-1]] + [B * S],
                      dtype=torch.int32, device=ctx.dev)
    mx = max(y - x for x, y in zip(cuts, cuts[1:]))
    win = (-1 if wl is None else wl, -1 if wr is None else wr)

    def call(q, k, v):
        r = mod.flash_attn_varlen_func(
            q.reshape(B * S, o.hq, o.hd), k.reshape(B * S, o.hkv, o.hd), v.reshape(B * S, o.hkv, o.hd),
            cu, cu, mx, mx, softmax_scale=o.scale, causal=wr == 0, window_size=win)
        out, lse = (r[0], r[1]) if isinstance(r, tuple) else (r, None)
        out = out.view(B, S, o.hq, o.hd).transpose(1, 2)
        if lse is not None and tuple(lse.shape) == (o.hq, B * S):
            lse = lse.view(o.hq, B, S).transpose(0, 1)
        else:
            lse = None
        return out, lse
    K.call = K.first = call
    return K


def make_kernel(ctx, kern, m, o):
    st, text = form(kern, m, o.hq)
    if st != "ok":
        raise Unsupported(text)
    if kern.startswith("sdpa-"):
        how = {"no mask": "none", "is_causal": "causal"}.get(text, "dense")
        return sdpa_kernel_for(ctx, kern, m, o, how)
    if kern == "flex":
        return flex_kernel_for(ctx, m, o)
    return varlen_kernel_for(ctx, kern, m, o)


def inputs(ctx, o, m, seed):
    """q, k, v, dout from the seed, normal and never zero (as kbench's)."""
    torch = ctx.torch
    g = torch.Generator(device=ctx.dev)
    g.manual_seed(seed)
    dt = torch.bfloat16 if o.dtype == "bf16" else torch.float16
    out = []
    for n, h in ((m.sq, o.hq), (m.sk, o.hkv), (m.sk, o.hkv), (m.sq, o.hq)):
        x = torch.randn((o.batch, n, h, o.hd), generator=g, device=ctx.dev, dtype=dt)
        tiny = 1.0 / 64
        x = torch.where(x.abs() < tiny, torch.where(x < 0, -tiny, tiny).to(dt), x)
        out.append(x)
    for x in out[:3]:
        x.requires_grad_(True)
    return out


def reference(ctx, m, o, q, k, v, do, bwd):
    """fp64 attention over the same mask and inputs, on the device in
    chunks of query rows, kept on the host: o and lse [b][hq][s](...),
    and for bwd dq [b][hq][s][d], dk, dv [b][hkv][s][d].  The mask comes
    from Dense, and its allowed pairs are counted against the area."""
    torch = ctx.torch
    key = (id(m), o.hq, o.hkv, o.hd, o.dtype, o.batch, o.seed)
    c = ctx.ref if ctx.ref.get("key") == key else {"key": key}
    ctx.ref = c
    if "o" in c and (not bwd or "dq" in c):
        return c
    dev, g, sc = ctx.dev, o.hq // o.hkv, o.scale
    Q = q.detach().double().transpose(1, 2)
    Kx = k.detach().double().transpose(1, 2).repeat_interleave(g, 1)
    Vx = v.detach().double().transpose(1, 2).repeat_interleave(g, 1)
    d = Dense(torch, m, dev)
    hm = head_map(torch, m, o.hq, dev)
    step = max(1, min(m.sq, (1 << 27) // max(1, o.batch * o.hq * m.sk)))

    def allowed(a, b):
        return torch.stack([d.rows(h, a, b) for h in range(m.heads)])[hm].unsqueeze(0)
    if "o" not in c:
        O = torch.empty_like(Q)
        L = torch.empty(Q.shape[:3], dtype=torch.float64, device=dev)
        count = [0] * m.heads
        for a in range(0, m.sq, step):
            b = min(a + step, m.sq)
            al = allowed(a, b)
            for h in range(m.heads):
                count[h] += int(al[0, h * (o.hq // m.heads)].sum())
            s = (Q[:, :, a:b] @ Kx.transpose(-1, -2) * sc).masked_fill(~al, float("-inf"))
            L[:, :, a:b] = torch.logsumexp(s, -1)
            p = torch.where(al, torch.exp(s - L[:, :, a:b, None]), 0.0)
            O[:, :, a:b] = p @ Vx
        want = [head_area(m, h) for h in range(m.heads)]
        if count != want:
            raise RuntimeError("reference: the dense mask has %s pairs, the file %s" % (count, want))
        if m.sq * m.sk <= 1 << 21:
            # small: the dense rows against the pure-Python evaluator too
            for h in range(m.heads):
                x = torch.zeros((m.sq, m.sk), dtype=torch.bool)
                for q in range(m.sq):
                    for lo, hi in row_intervals(m, h, q):
                        x[q, lo:hi] = True
                if not torch.equal(x, d.rows(h, 0, m.sq).cpu()):
                    raise RuntimeError("reference: dense mask head %d differs from its slices" % h)
        c["o"], c["lse"] = O, L
    if bwd and "dq" not in c:
        O, L = c["o"].to(dev), c["lse"].to(dev)
        dO = do.double().transpose(1, 2)
        dQ = torch.empty_like(Q)
        dK = torch.zeros_like(Kx)
        dV = torch.zeros_like(Vx)
        for a in range(0, m.sq, step):
            b = min(a + step, m.sq)
            al = allowed(a, b)
            s = Q[:, :, a:b] @ Kx.transpose(-1, -2) * sc
            p = torch.where(al, torch.exp(s - L[:, :, a:b, None]), 0.0)
            dp = dO[:, :, a:b] @ Vx.transpose(-1, -2)
            dd = (dO[:, :, a:b] * O[:, :, a:b]).sum(-1, keepdim=True)
            ds = p * (dp - dd)
            dQ[:, :, a:b] = ds @ Kx * sc
            dK += ds.transpose(-1, -2) @ Q[:, :, a:b] * sc
            dV += p.transpose(-1, -2) @ dO[:, :, a:b]
        B, S, D = o.batch, m.sk, o.hd
        c["dq"] = dQ
        c["dk"] = dK.view(B, o.hkv, g, S, D).sum(2)
        c["dv"] = dV.view(B, o.hkv, g, S, D).sum(2)
    for n in ("o", "lse", "dq", "dk", "dv"):
        if n in c and c[n].is_cuda:
            c[n] = c[n].cpu()
    return c


def relerr(torch, x, ref):
    """||x - ref|| / ||ref|| as lib/ref.c's ref_relerr: NaN fails, equal
    infinities (empty rows' lse) are equal."""
    x = x.detach().to(ref.device, torch.float64)
    if bool(torch.isnan(x).any()) or bool(torch.isnan(ref).any()):
        return float("nan")
    inf = torch.isinf(x) | torch.isinf(ref)
    if bool(inf.any()):
        if not torch.equal(x[inf], ref[inf]):
            return float("inf")
        x, ref = x[~inf], ref[~inf]
    num = float(((x - ref) ** 2).sum())
    den = float((ref ** 2).sum())
    return math.sqrt(num / den) if den > 0 else math.sqrt(num)


def poison(ctx, sizes):
    """Fill the allocator's free blocks of the outputs' sizes with NaN
    (0xff bytes), so an element the kernel does not write fails: the APIs
    allocate their outputs, so this is as close as kbench's NaN fill gets."""
    torch = ctx.torch
    keep = [torch.full((n,), 255, dtype=torch.uint8, device=ctx.dev) for n in sizes]
    torch.cuda.synchronize()
    del keep


class Result:
    def __init__(self, status="ok", why=""):
        self.status, self.why = status, why
        self.ms = []
        self.mem = 0.0
        self.err = {}
        self.note = ""


def job(ctx, o, kern, m, pas):
    torch = ctx.torch
    r = Result()
    if kern == "flashinfer" and pas == "bwd":
        return Result("unsupported", "no backward pass")
    K = q = k = v = do = out = None
    try:
        gc_collect(torch)
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        K = make_kernel(ctx, kern, m, o)
        q, k, v, do = inputs(ctx, o, m, o.seed)
        # the first call, untimed: SDPA picks or refuses, Flex compiles
        out, lse = K.first(q, k, v)
        r.note = K.note
        dob = do.transpose(1, 2)
        if pas == "fwd":
            del out, lse
            out = None

            def fn():
                K.call(q, k, v)
        else:
            def fn():
                torch.autograd.grad(out, (q, k, v), dob, retain_graph=True)
            fn()
        torch.cuda.synchronize()
        p1 = torch.cuda.max_memory_allocated()
        if o.check:
            check(ctx, o, m, K, pas, q, k, v, do, out, r)
            if r.status != "ok":
                return r
        torch.cuda.reset_peak_memory_stats()
        for _ in range(o.warmup):
            fn()
        torch.cuda.synchronize()
        e0 = torch.cuda.Event(enable_timing=True)
        e1 = torch.cuda.Event(enable_timing=True)
        for i in range(o.iters):
            ctx.flush.fill_(i & 0xff)
            e0.record()
            fn()
            e1.record()
            e1.synchronize()
            r.ms.append(e0.elapsed_time(e1))
        r.mem = max(p1, torch.cuda.max_memory_allocated()) - base
    except Unsupported as e:
        r = Result("unsupported", str(e))
    except Exception as e:            # a library's failure is the row's, not the run's
        if _oom(torch, e):
            r = Result("oom", first_line(e))
        else:
            r = Result("error", "%s: %s" % (type(e).__name__, first_line(e)))
            if o.verbose:
                import traceback
                traceback.print_exc()
    finally:
        K = q = k = v = do = out = None
        gc_collect(torch)
    return r


def first_line(e):
    t = str(e).strip()
    return t.splitlines()[0][:300] if t else type(e).__name__


def gc_collect(torch):
    import gc
    gc.collect()
    torch.cuda.empty_cache()


def check(ctx, o, m, K, pas, q, k, v, do, out, r):
    """One more pass on poisoned memory, against the fp64 reference."""
    torch = ctx.torch
    ref = reference(ctx, m, o, q, k, v, do, pas == "bwd")
    nq = o.batch * m.sq * o.hq * o.hd * 2       # bf16 and fp16: 2 bytes
    nk = o.batch * m.sk * o.hkv * o.hd * 2
    nl = o.batch * o.hq * m.sq * 4
    if pas == "fwd":
        poison(ctx, (nq, nl, nq * 2))
        x, lse = K.call(q, k, v)
        r.err["o"] = relerr(torch, x, ref["o"])
        if lse is not None:
            r.err["lse"] = relerr(torch, lse, ref["lse"])
        del x, lse
    else:
        poison(ctx, (nq, nk, nk, nq * 2, nk * 2))
        dq, dk, dv = torch.autograd.grad(out, (q, k, v), do.transpose(1, 2), retain_graph=True)
        r.err["dq"] = relerr(torch, dq.transpose(1, 2), ref["dq"])
        r.err["dk"] = relerr(torch, dk.transpose(1, 2), ref["dk"])
        r.err["dv"] = relerr(torch, dv.transpose(1, 2), ref["dv"])
        del dq, dk, dv
    bad = [(n, e) for n, e in r.err.items() if not (e <= TOL)]
    if bad:
        r.status = "wrong"
        r.why = "relative error " + " ".join("%s %.3g" % (n, e) for n, e in bad)


def stack(ctx, kern):
    torch = ctx.torch
    s = "torch=%s cuda=%s" % (torch.__version__.split("+")[0], torch.version.cuda)
    v = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    if v:
        s += " cudnn=%d.%d.%d" % (v // 10000, v // 100 % 100, v % 100) if v >= 90000 else \
            " cudnn=%d.%d.%d" % (v // 1000, v // 100 % 10, v % 100)
    lib = {"flex": "triton", "fa3": "flash_attn_interface", "fa2-varlen": "flash_attn",
           "flashinfer": "flashinfer"}.get(kern)
    if lib:
        ver = getattr(sys.modules.get(lib) or __import__(lib), "__version__", None)
        s += " %s=%s" % (lib.replace("flash_attn_interface", "fa3"), ver or "?")
    return s


def tsv_field(s):
    return str(s).replace("\t", " ").replace("\n", " ")


def row_out(ctx, o, kern, m, path, pas, r):
    ok = r.status == "ok"
    area = m.area / m.heads
    v = dict.fromkeys(COLUMNS, "")
    v.update(tool=PROG, kernel=kern, mask=m.pattern or os.path.basename(path), seqlen_q=m.sq,
             seqlen_k=m.sk, area="%.0f" % area if area == int(area) else "%.1f" % area,
             batch=o.batch, heads_q=o.hq, heads_kv=o.hkv, head_dim=o.hd, dtype=o.dtype, **{"pass": pas},
             world=1, status=r.status, device=ctx.devname, host=ctx.host, commit=ctx.commit,
             seed=o.seed, stack=ctx.stacks[kern])
    tf = 0.0
    if ok:
        med = statistics.median(r.ms)
        f = 4.0 * area * o.hq * o.hd * o.batch * (2.5 if pas == "bwd" else 1.0)
        tf = f / (med * 1e-3) / 1e12
        v.update(iters=o.iters, ms_median="%.4f" % med, ms_min="%.4f" % min(r.ms),
                 ms_max="%.4f" % max(r.ms), tflops="%.4g" % tf,
                 mem_gib="%.3f" % (r.mem / (1 << 30)))
    print("\t".join(tsv_field(v[c]) for c in COLUMNS), flush=True)
    if o.verbose or sys.stderr.isatty() or r.status in ("wrong", "error"):
        t = "%s: %s %s %d %s: %s" % (PROG, kern, v["mask"], m.sq, pas, r.status)
        if ok:
            t += " %.3f ms %.2f TFLOP/s %.3f GiB" % (statistics.median(r.ms), tf, r.mem / (1 << 30))
        elif r.why:
            t += " (%s)" % r.why
        if o.verbose:
            for n, e in r.err.items():
                t += " err_%s %.3g" % (n, e)
            if r.note:
                t += " [%s]" % r.note
        sys.stderr.write(t + "\n")
    return r.status in ("wrong", "error")


class Ctx:
    pass


def run_all(o, paths, masks, torch):
    kernels = o.kernels or [k for k in KNAMES if found(k, None) is None]
    for k in kernels:
        w = found(k, None)
        if w is not None:
            die("kernel %s: not found (%s)" % (k, w))
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        die("no CUDA device (torch %s)" % torch.__version__)
    if o.device >= torch.cuda.device_count():
        die("device %d: only %d CUDA devices" % (o.device, torch.cuda.device_count()))
    ctx = Ctx()
    ctx.torch = torch
    ctx.dev = torch.device("cuda", o.device)
    torch.cuda.set_device(ctx.dev)
    props = torch.cuda.get_device_properties(ctx.dev)
    ctx.devname = props.name
    ctx.host = socket.gethostname()
    ctx.commit = COMMIT if not COMMIT.startswith("@") else "unknown"
    ctx.flex, ctx.ref, ctx.flexfail = None, {}, {}
    ctx.stacks = dict((k, stack(ctx, k)) for k in kernels)
    # twice the L2, allocated before any row's baseline: not a row's memory
    l2 = getattr(props, "L2_cache_size", 0) or (64 << 20)
    ctx.flush = torch.empty(2 * l2, dtype=torch.uint8, device=ctx.dev)
    import importlib
    cfg = importlib.import_module("torch._dynamo").config
    for n, val in (("cache_size_limit", 256), ("recompile_limit", 256),
                   ("accumulated_cache_size_limit", 1024), ("accumulated_recompile_limit", 1024),
                   ("fail_on_recompile_limit_hit", True)):
        if hasattr(cfg, n):
            setattr(cfg, n, val)
    o.scale = 1.0 / math.sqrt(o.hd)
    print("\t".join(COLUMNS), flush=True)
    bad = False
    for path, m in zip(paths, masks):
        for kern in kernels:
            for pas in o.passes:
                r = job(ctx, o, kern, m, pas)
                bad |= row_out(ctx, o, kern, m, path, pas, r)
    return EXIT_WRONG if bad else 0



# ---- command line ------------------------------------------------------------------

USAGE = """usage: kbench-torch [-v] [--check] [-k KERNEL,...] [-p fwd,bwd] [-H HQ:HKV] [-D HEADDIM]
                    [-t bf16|fp16] [-b BATCH] [-w WARMUP] [-n ITERS] [--device N]
                    [-s SEED] MASKFILE...
       kbench-torch -l [MASKFILE...]
  -k, --kernel LIST   kernels (default: every kernel found)
  -p, --pass LIST     fwd, bwd or both (default fwd,bwd)
  -H, --heads HQ:HKV  query and key/value heads (default 64:8)
  -D, --head-dim N    head dimension (default 128)
  -t, --dtype T       bf16 or fp16 (default bf16)
  -b, --batch N       batch size (default 1)
  -w, --warmup N      untimed iterations (default 5)
  -n, --iters N       timed iterations (default 20)
  -s, --seed N        seed of the random inputs (default 1)
      --check         compare with an fp64 reference; a mismatch is `wrong'
      --device N      the CUDA device (default 0)
  -v, --verbose       a line per row on stderr, with the errors of --check
  -l, --list          the kernels found, and with masks what each is given
  -h, --help          this help
"""


def parse_int(s, what, lo, hi, suffix):
    t, mul = s, 1
    if suffix and len(t) > 1 and t[-1] in "kKmMgG" and t[-2].isdigit():
        mul = 1024 ** ("kKmMgG".index(t[-1]) // 2 + 1)
        t = t[:-1]
    try:
        v = int(t, 10) * mul
    except ValueError:
        die("%s: '%s' is not an integer" % (what, s))
    if t.strip() != t or "_" in t:
        die("%s: '%s' is not an integer" % (what, s))
    if v < lo or v > hi:
        die("%s: '%s' is out of range [%d, %d]" % (what, s, lo, hi))
    return v


def parse_heads(s):
    if ":" not in s:
        die("heads: '%s' is not HQ:HKV" % s)
    a, b = s.split(":", 1)
    hq = parse_int(a, "heads", 1, 4096, False)
    hkv = parse_int(b, "heads", 1, 4096, False)
    if hq % hkv:
        die("heads %s: %d query heads are not a multiple of %d kv heads" % (s, hq, hkv))
    return hq, hkv


class Opts:
    kernels = None
    passes = ("fwd", "bwd")
    hq, hkv, hd, dtype, batch = 64, 8, 128, "bf16", 1
    warmup, iters, seed, device = 5, 20, 1, 0
    check = verbose = listing = False


def parse_args(argv):
    o = Opts()
    try:
        opts, args = getopt.gnu_getopt(argv, "k:p:H:D:t:b:w:n:s:vlh", [
            "kernel=", "pass=", "heads=", "head-dim=", "dtype=", "batch=", "warmup=",
            "iters=", "seed=", "check", "device=", "verbose", "list", "help"])
    except getopt.GetoptError as e:
        sys.stderr.write("%s: %s\n%s" % (PROG, e.msg, USAGE))
        sys.exit(EXIT_BADINPUT)
    plist = "fwd,bwd"
    for k, v in opts:
        if k in ("-k", "--kernel"):
            o.kernels = v
        elif k in ("-p", "--pass"):
            plist = v
        elif k in ("-H", "--heads"):
            o.hq, o.hkv = parse_heads(v)
        elif k in ("-D", "--head-dim"):
            o.hd = parse_int(v, "head dim", 1, 1024, False)
        elif k in ("-t", "--dtype"):
            if v not in ("bf16", "fp16"):
                die("dtype: '%s' is not bf16 or fp16" % v)
            o.dtype = v
        elif k in ("-b", "--batch"):
            o.batch = parse_int(v, "batch", 1, 65535, True)
        elif k in ("-w", "--warmup"):
            o.warmup = parse_int(v, "warm-up", 0, 100000, True)
        elif k in ("-n", "--iters"):
            o.iters = parse_int(v, "iterations", 1, 100000, True)
        elif k in ("-s", "--seed"):
            o.seed = parse_int(v, "seed", 0, (1 << 63) - 1, False)
        elif k == "--check":
            o.check = True
        elif k == "--device":
            o.device = parse_int(v, "device", 0, 1023, False)
        elif k in ("-v", "--verbose"):
            o.verbose = True
        elif k in ("-l", "--list"):
            o.listing = True
        elif k in ("-h", "--help"):
            sys.stderr.write(USAGE)
            sys.exit(0)
    passes = []
    for p in plist.split(","):
        if not p:
            continue
        if p not in ("fwd", "bwd"):
            die("pass: '%s' is not fwd or bwd" % p)
        if p not in passes:
            passes.append(p)
    if not passes:
        die("pass: '%s' names no pass" % plist)
    o.passes = tuple(passes)
    if o.kernels is not None:
        names = [k for k in o.kernels.split(",") if k]
        if not names:
            die("kernel: '%s' names no kernel" % o.kernels)
        for k in names:
            if k not in KNAMES:
                die("kernel: unknown kernel '%s' (kbench-torch -l lists them)" % k)
        o.kernels = list(dict.fromkeys(names))
    return o, args


def read_masks(paths, hq):
    masks = []
    for p in paths:
        try:
            m = read_mask(p)
        except MaskError as e:
            die("%s: %s" % (p, e))
        if hq % m.heads:
            die("%s: %d mask heads do not divide %d query heads" % (p, m.heads, hq))
        masks.append(m)
    return masks


def found(name, torch_why):
    """None if the kernel's library imports, else why not."""
    if torch_why is not None:
        return torch_why
    lib = dict((k[0], k[1]) for k in KERNELS)[name]
    try:
        __import__(lib)
    except Exception as e:          # an import can fail in many ways
        return "%s: %s" % (lib, str(e).splitlines()[0] if str(e) else type(e).__name__)
    return None


def import_torch():
    """torch, or None and why not."""
    try:
        import torch
    except ImportError:
        return None, "torch not found (pip install torch)"
    # The backward pass is timed by repeated autograd.grad over one forward
    # graph (retain_graph): a compiled graph (Flex) must not donate its
    # saved buffers to the first of them.
    try:
        import torch._functorch.config as fc
        fc.donated_buffer = False
    except (ImportError, AttributeError):
        pass
    return torch, None


def listing(o, paths):
    torch, why = import_torch()
    why = why and "no torch"
    masks = read_masks(paths, o.hq)
    for name, lib, about in KERNELS:
        w = found(name, why)
        print("%-14s %-26s %s" % (name, "found" if w is None else "not found: " + w, about))
    for p, m in zip(paths, masks):
        for name in KNAMES:
            st, text = form(name, m, o.hq)
            print("%s\t%s\t%s\t%s" % (p, name, st, text))


def main(argv):
    try:
        sys.stdout.reconfigure(errors="surrogateescape")
    except AttributeError:
        pass
    try:
        o, paths = parse_args(argv)
        if o.listing:
            listing(o, paths)
            sys.stdout.flush()
            return 0
        if not paths:
            sys.stderr.write(USAGE)
            return EXIT_BADINPUT
        masks = read_masks(paths, o.hq)
        torch, why = import_torch()
        if torch is None:
            die(why)
        return run_all(o, paths, masks, torch)
    except Fatal as e:
        sys.stdout.flush()
        sys.stderr.write("%s: %s\n" % (PROG, e))
        return EXIT_BADINPUT
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
