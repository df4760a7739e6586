#!/usr/bin/env python3
"""Cross-check for kbench's cudnn kernel: PyTorch's cuDNN SDPA on the same
shapes, timed the way kbench times (device events, warm-up, L2 flushed
between iterations, median), printed as TSV rows comparable to kbench's.

Only a cross-check: the product never runs Python.

usage: cudnn_xcheck.py [-n ITERS] [-b BATCH] [--hq 64] [--hkv 8] [--hd 128]
                       [--dtype bf16|fp16] S...     (S accepts K suffixes)
"""
import argparse
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def seqlen(s):
    s = s.strip()
    return int(s[:-1]) * 1024 if s[-1] in "kK" else int(s)


def timed(fn, iters, flush):
    e0 = torch.cuda.Event(enable_timing=True)
    e1 = torch.cuda.Event(enable_timing=True)
    ts = []
    for i in range(-3, iters):
        flush.fill_(i & 0xFF)
        e0.record()
        fn()
        e1.record()
        e1.synchronize()
        if i >= 0:
            ts.append(e0.elapsed_time(e1))
    return statistics.median(ts), min(ts), max(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=20)
    ap.add_argument("-b", type=int, default=1)
    ap.add_argument("--hq", type=int, default=64)
    ap.add_argument("--hkv", type=int, default=8)
    ap.add_argument("--hd", type=int, default=128)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    ap.add_argument("S", nargs="+", type=seqlen)
    a = ap.parse_args()
    dt = torch.bfloat16 if a.dtype == "bf16" else torch.float16
    dev = "cuda"
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    print("# torch", torch.__version__, "cudnn", torch.backends.cudnn.version(),
          torch.cuda.get_device_name(), file=sys.stderr)
    print("tool\tkernel\tmask\tseqlen_q\tseqlen_k\tarea\tbatch\theads_q\theads_kv"
          "\thead_dim\tdtype\tpass\tstatus\titers\tms_median\tms_min\tms_max\ttflops\tnote")
    for S in a.S:
        for causal in (False, True):
            mask = "causal" if causal else "full"
            area = S * (S + 1) // 2 if causal else S * S
            # BSHD storage seen as (B, H, S, D): the layout kbench hands over
            q = torch.randn(a.b, S, a.hq, a.hd, device=dev, dtype=dt).transpose(1, 2)
            k = torch.randn(a.b, S, a.hkv, a.hd, device=dev, dtype=dt).transpose(1, 2)
            v = torch.randn(a.b, S, a.hkv, a.hd, device=dev, dtype=dt).transpose(1, 2)
            do = torch.randn(a.b, S, a.hq, a.hd, device=dev, dtype=dt).transpose(1, 2)
            for t in (q, k, v):
                t.requires_grad_(True)
            note = "enable_gqa"
            kk, vv = k, v

            def fwd():
                return F.scaled_dot_product_attention(q, kk, vv, is_causal=causal,
                                                      enable_gqa=a.hq != a.hkv)
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                try:
                    o = fwd()
                except RuntimeError:
                    # no native GQA in this build's cuDNN path: repeat K/V heads
                    note = "kv_repeated"
                    kk = k.repeat_interleave(a.hq // a.hkv, dim=1).detach().requires_grad_(True)
                    vv = v.repeat_interleave(a.hq // a.hkv, dim=1).detach().requires_grad_(True)
                    o = fwd()
                flops = 4.0 * area * a.hq * a.hd * a.b
                for pas in ("fwd", "bwd"):
                    if pas == "fwd":
                        fn = fwd
                        fl = flops
                    else:
                        ins = (q, kk, vv)

                        def fn():
                            torch.autograd.grad(o, ins, do, retain_graph=True)
                        fl = 2.5 * flops
                    med, lo, hi = timed(fn, a.n, flush)
                    print(f"xcheck\ttorch-cudnn\t{mask}\t{S}\t{S}\t{area}\t{a.b}\t{a.hq}"
                          f"\t{a.hkv}\t{a.hd}\t{a.dtype}\t{pas}\tok\t{a.n}\t{med:.3f}"
                          f"\t{lo:.3f}\t{hi:.3f}\t{fl / med / 1e9:.1f}\t{note}", flush=True)
            del q, k, v, do, o, kk, vv
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
