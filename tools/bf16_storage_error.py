#!/usr/bin/env python3
"""Exact bf16-storage emulation of the moetrace GPU executor's numerics on the
small test model (tests/cuda/gpu_executor_test.cc: small_shape(2, 8, 2, 12)),
against the float64 reference of kernels/plan/src/reference.cc: how large the
error of any executor that stores activations, gradients between ops and
parameters in bf16 must be on that model (the bound the bf16 test asserts).

    python3 tools/bf16_storage_error.py [SEED ...]   (numpy; default seeds: 5, the test's, and 11 more)
    python3 tools/bf16_storage_error.py --against-rounded [SEED ...]   (default seed: 5)

--against-rounded: the same emulation perturbed at the fp32 level (each
stored value times 1 + u, |u| <= 1e-7 or 1e-6, 20 runs each: the GPU's fp32
sums in another order) against the unperturbed emulation rather than against
the float64 reference, i.e. against a CPU reference that rounds the same
tensors to bf16 at the same points: how close a GPU run can be held to such
a reference.

Math is float64; values are rounded to bf16 (RNE, through float32 as
gpu_support.h's bf16_value does) at each storage point the GPU executor has.
Routing (top-k choice) is held to the float64 reference's choice, as the GPU
test's planned routing does.  Inputs, output grads and initial weights are the
same SplitMix64 streams as random_weights / random_training_data, then rounded
to bf16 (make_gpu_fixture).
"""
import math
import sys
import numpy as np

_erf = np.vectorize(math.erf, otypes=[float])
erf = lambda z: _erf(z)

MASK = (1 << 64) - 1


class SplitMix64:
    def __init__(self, seed):
        self.s = seed & MASK

    def next(self):
        self.s = (self.s + 0x9E3779B97F4A7C15) & MASK
        z = self.s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)

    def uniform(self):
        return (self.next() >> 11) * 2.0 ** -53

    def symmetric(self, scale):
        return (2.0 * self.uniform() - 1.0) * scale

    def normal(self):
        u1 = 1.0 - self.uniform()
        u2 = self.uniform()
        return math.sqrt(-2.0 * math.log(u1)) * math.cos(6.283185307179586 * u2)


def bf16(x):
    f = np.asarray(x, dtype=np.float64).astype(np.float32)
    u = f.view(np.uint32).copy()
    fin = (u & 0x7F800000) != 0x7F800000
    u[fin] = u[fin] + 0x7FFF + ((u[fin] >> 16) & 1)
    u &= np.uint32(0xFFFF0000)
    return u.view(np.float32).astype(np.float64)


# ---------------------------------------------------------------- shape/data
L, E, K, M, H, D, LR = 2, 8, 2, 16, 24, 12, 0.05


def rand_matrix(r, c, scale, rng):
    return np.array([rng.symmetric(scale) for _ in range(r * c)]).reshape(r, c)


def random_weights(seed):
    rng = SplitMix64(seed)
    layers = []
    for _ in range(L):
        lw = {"gate": rand_matrix(M, E, 3.0 / math.sqrt(M), rng), "w1": [], "w2": []}
        for _ in range(E):
            lw["w1"].append(rand_matrix(M, H, math.sqrt(3.0 / M), rng))
            lw["w2"].append(rand_matrix(H, M, math.sqrt(3.0 / H), rng))
        lw["a"] = rand_matrix(M, D, math.sqrt(3.0 / M), rng)
        lw["b"] = rand_matrix(D, M, math.sqrt(3.0 / D), rng)
        layers.append(lw)
    return layers


def random_data(iters, tokens, seed):
    rng = SplitMix64(seed)
    xs = [np.array([rng.normal() for _ in range(t * M)]).reshape(t, M) for _ in range(iters) for t in tokens]
    gs = [np.array([rng.normal() for _ in range(t * M)]).reshape(t, M) for _ in range(iters) for t in tokens]
    return xs, gs


def map_w(f, w, *others):
    out = []
    for li, lw in enumerate(w):
        o = {}
        for k in ("gate", "a", "b"):
            o[k] = f(lw[k], *[x[li][k] for x in others])
        for k in ("w1", "w2"):
            o[k] = [f(lw[k][e], *[x[li][k][e] for x in others]) for e in range(E)]
        out.append(o)
    return out


def gelu(z):
    return 0.5 * z * (1.0 + erf(z / math.sqrt(2.0)))


def gelu_grad(z):
    return 0.5 * (1.0 + erf(z / math.sqrt(2.0))) + z * np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)


POINTS = [
    "exp_hidden", "exp_gelu", "exp_out", "combine",          # MoE forward
    "dense_hidden", "dense_gelu", "dense_out",              # dense forward (dense_out = block output)
    "dense_dg", "dense_dgelu", "dense_dx",                  # dense backward
    "d_comb", "exp_dg", "exp_dgelu", "exp_dx",              # expert backward
    "perm_bwd", "d_logits", "gate_dx",                      # permute/gate backward
    "sgd",                                                  # param = bf16(param - lr grad)
    "tp_ar",                                                # ppmoe only: bf16 all-reduce of partials
]


NOISE = {"rel": 0.0, "rng": np.random.default_rng(0)}


def train(w0, xs, gs, tokens, iters, rnd, routing=None, tp=1):
    """rnd: set of storage points rounded to bf16. routing: dict (it,l,b) -> T x K
    expert ids to hold fixed; None: choose top-k (and record).
    tp=2: ppmoe's tensor-parallel pair: experts split E/2 per rank, dense hidden
    split D/2 per rank (Megatron column/row), partial activations stored bf16
    on each rank and summed by a bf16 all-reduce (fp32 sum, bf16 store:
    point "tp_ar")."""
    def R(name, v):
        if name not in rnd:
            return v
        if NOISE["rel"] > 0:  # fp32-level perturbation: another rounding realization
            v = v * (1.0 + NOISE["rel"] * NOISE["rng"].uniform(-1, 1, np.shape(v)))
        return bf16(v)
    eparts = [set(range(t * E // tp, (t + 1) * E // tp)) for t in range(tp)]
    dparts = [slice(t * D // tp, (t + 1) * D // tp) for t in range(tp)]

    def allreduce(parts):
        return parts[0] if tp == 1 else R("tp_ar", sum(parts))
    w = w0
    nb = len(tokens)
    chosen = {}
    outs, dxs = [], []
    for it in range(iters):
        grad = map_w(np.zeros_like, w)
        for b in range(nb):
            x = xs[it * nb + b]
            caches = []
            for l in range(L):
                lw = w[l]
                T = x.shape[0]
                logits = x @ lw["gate"]
                p = np.exp(logits - logits.max(axis=1, keepdims=True))
                p /= p.sum(axis=1, keepdims=True)
                if routing is None:
                    ch = np.argsort(-p, axis=1, kind="stable")[:, :K]
                else:
                    ch = routing[(it, l, b)]
                chosen[(it, l, b)] = ch
                pt = np.repeat(np.arange(T), K)       # token of each pair
                pe = ch.reshape(-1)                   # expert of each pair
                pw = p[pt, pe]
                hid = np.zeros((T * K, H)); act = np.zeros((T * K, H)); out = np.zeros((T * K, M))
                for e in range(E):
                    sel = pe == e
                    if not sel.any():
                        continue
                    hid[sel] = R("exp_hidden", x[pt[sel]] @ lw["w1"][e])
                    act[sel] = R("exp_gelu", gelu(hid[sel]))
                    out[sel] = R("exp_out", act[sel] @ lw["w2"][e])
                yp = []
                for ep in eparts:
                    on = np.isin(pe, list(ep))
                    yt = np.zeros((T, M))
                    np.add.at(yt, pt[on], pw[on][:, None] * out[on])
                    yp.append(R("combine", yt))
                y = allreduce(yp)
                mid = R("dense_hidden", y @ lw["a"])
                da = R("dense_gelu", gelu(mid))
                z = allreduce([R("dense_out", da[:, ds] @ lw["b"][ds]) for ds in dparts])
                caches.append(dict(x=x, p=p, pt=pt, pe=pe, pw=pw, hid=hid, act=act, out=out, y=y, mid=mid, da=da))
                x = z
            outs.append(x)
            dz = gs[it * nb + b]
            for l in reversed(range(L)):
                lw, c, g = w[l], caches[l], grad[l]
                # dense backward
                gg = R("dense_dg", dz @ lw["b"].T)
                gg = R("dense_dgelu", gg * gelu_grad(c["mid"]))
                g["b"] += c["da"].T @ dz
                g["a"] += c["y"].T @ gg
                dy = allreduce([R("dense_dx", gg[:, ds] @ lw["a"][:, ds].T) for ds in dparts])
                # unpermute backward
                pt, pe, pw = c["pt"], c["pe"], c["pw"]
                dwt = np.sum(dy[pt] * c["out"], axis=1)         # fp32 on the GPU
                dcomb = R("d_comb", pw[:, None] * dy[pt])
                dxp = np.zeros((len(pt), M))
                for e in range(E):
                    sel = pe == e
                    if not sel.any():
                        continue
                    h = R("exp_dg", dcomb[sel] @ lw["w2"][e].T)
                    h = R("exp_dgelu", h * gelu_grad(c["hid"][sel]))
                    g["w2"][e] += c["act"][sel].T @ dcomb[sel]
                    g["w1"][e] += c["x"][pt[sel]].T @ h
                    dxp[sel] = R("exp_dx", h @ lw["w1"][e].T)
                T = c["x"].shape[0]
                p = c["p"]
                dxparts = []
                for ep in eparts:
                    on = np.isin(pe, list(ep))
                    dx = np.zeros((T, M))
                    np.add.at(dx, pt[on], dxp[on])
                    dx = R("perm_bwd", dx)
                    # gate backward (on ppmoe: this rank's experts' d_weights only)
                    dprob = np.zeros_like(p)
                    dprob[pt[on], pe[on]] = dwt[on]
                    dot = np.sum(p * dprob, axis=1, keepdims=True)
                    dl = R("d_logits", p * (dprob - dot))
                    g["gate"] += c["x"].T @ dl
                    dxparts.append(R("gate_dx", dx + dl @ lw["gate"].T))
                dz = allreduce(dxparts)
            dxs.append(dz)
        if "sgd" in rnd:
            w = map_w(lambda a, g: bf16(a - LR * g), w, grad)
        else:
            w = map_w(lambda a, g: a - LR * g, w, grad)
    return outs, dxs, w, chosen


def maxrel(a, b):
    return np.max(np.abs(a - b)) / np.max(np.abs(b))


def frob(a, b):
    return np.linalg.norm(a - b) / np.linalg.norm(b)


def param_slices(w):
    """The executor's parameter slices: gate; [W1; W2^T] per expert; [A; B^T]."""
    for l, lw in enumerate(w):
        yield ("gate", l), lw["gate"]
        for e in range(E):
            yield ("expert", l, e), np.vstack([lw["w1"][e], lw["w2"][e].T])
        yield ("dense", l), np.vstack([lw["a"], lw["b"].T])


def errors(res, ref):
    o, d, w, _ = res
    ro, rd, rw, _ = ref
    r = {}
    r["out_max"] = max(maxrel(a, b) for a, b in zip(o, ro))
    r["out_fro"] = max(frob(a, b) for a, b in zip(o, ro))
    r["dx_max"] = max(maxrel(a, b) for a, b in zip(d, rd))
    r["dx_fro"] = max(frob(a, b) for a, b in zip(d, rd))
    ws = list(param_slices(w))
    rws = list(param_slices(rw))
    r["w_max"] = max(maxrel(a[1], b[1]) for a, b in zip(ws, rws))
    r["w_fro"] = max(frob(a[1], b[1]) for a, b in zip(ws, rws))
    return r


def fixture(tokens, seed, iters=2):
    w0 = map_w(bf16, random_weights(seed))
    xs, gs = random_data(iters, tokens, seed + 1)
    return w0, [bf16(x) for x in xs], [bf16(g) for g in gs]


def run(tokens, seed, rnd, iters=2, tp=1, cache={}):
    key = (tuple(tokens), seed)
    if key not in cache:
        w0, xs, gs = fixture(tokens, seed, iters)
        ref = train(w0, xs, gs, tokens, iters, set())
        cache[key] = (w0, xs, gs, ref)
    w0, xs, gs, ref = cache[key]
    res = train(w0, xs, gs, tokens, iters, rnd, routing=ref[3], tp=tp)
    return errors(res, ref)


COLS = ["out_max", "out_fro", "dx_max", "dx_fro", "w_max", "w_fro"]


def fmt(r):
    return " ".join(f"{r[c]:8.4f}" for c in COLS)


def against_rounded(seeds, runs=20, rels=(1e-7, 1e-6)):
    """Perturbed bf16 emulations against the unperturbed one (see the docstring)."""
    allpts = set(POINTS)
    blocks = {"P4": [21, 9, 14, 17], "P8": [21, 9, 14, 17, 11, 19, 6, 15]}
    print("worst of the perturbed runs against the bf16-rounding reference (routing held to the float64 reference's)")
    print(f"{'blocks':6} {'tp':>2} {'seed':>4} {'against':>9} " + " ".join(f"{c:>8}" for c in COLS))
    for tp in (1, 2):
        for bn, tk in blocks.items():
            for s in seeds:
                w0, xs, gs = fixture(tk, s)
                ref64 = train(w0, xs, gs, tk, 2, set())
                NOISE["rel"] = 0.0
                clean = train(w0, xs, gs, tk, 2, allpts, routing=ref64[3], tp=tp)
                worst = {c: 0.0 for c in COLS}
                for rel in rels:
                    NOISE["rel"] = rel
                    NOISE["rng"] = np.random.default_rng(1)
                    for _ in range(runs):
                        r = errors(train(w0, xs, gs, tk, 2, allpts, routing=ref64[3], tp=tp), clean)
                        worst = {c: max(worst[c], r[c]) for c in COLS}
                NOISE["rel"] = 0.0
                print(f"{bn:6} {tp:2d} {s:4d} {'float64':>9} " + fmt(errors(clean, ref64)))
                print(f"{bn:6} {tp:2d} {s:4d} {'rounded':>9} " + fmt(worst))


def main():
    if sys.argv[1:2] == ["--against-rounded"]:
        against_rounded([int(s) for s in sys.argv[2:]] or [5])
        return
    allpts = set(POINTS)
    seeds = [int(s) for s in sys.argv[1:]] or [5, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11, 12]
    blocks = {"P4": [21, 9, 14, 17], "P8": [21, 9, 14, 17, 11, 19, 6, 15]}
    print("all storage points rounded to bf16 (routing held to the float64 reference's)")
    print("tp=1: every variant but ppmoe; tp=2: ppmoe's tensor-parallel pair (bf16 all-reduce of partials)")
    print(f"{'blocks':6} {'tp':>2} {'seed':>4} " + " ".join(f"{c:>8}" for c in COLS))
    for tp in (1, 2):
        for bn, tk in blocks.items():
            rows = []
            for s in seeds:
                r = run(tk, s, allpts, tp=tp)
                rows.append(r)
                print(f"{bn:6} {tp:2d} {s:4d} " + fmt(r))
            for q, f in (("max", np.max), ("med", np.median), ("min", np.min)):
                print(f"{bn:6} {tp:2d} {q:>4} " + fmt({c: float(f([r[c] for r in rows])) for c in COLS}))
    for bn, tk in blocks.items():
        for tp in (1, 2):
            pts = POINTS if tp == 2 else [p for p in POINTS if p != "tp_ar"]
            print(f"\nattribution, {bn}, tp={tp}, mean over seeds {seeds}")
            print(f"{'point':14} " + " ".join(f"{c:>8}" for c in COLS) + "   | only this point rounded: " +
                  " ".join(f"{c:>8}" for c in COLS))
            base = [run(tk, s, allpts, tp=tp) for s in seeds]
            print(f"{'(all on)':14} " + fmt({c: np.mean([r[c] for r in base]) for c in COLS}))
            for pnt in pts:
                off = [run(tk, s, allpts - {pnt}, tp=tp) for s in seeds]
                only = [run(tk, s, {pnt}, tp=tp) for s in seeds]
                print(f"{'-' + pnt:14} " + fmt({c: np.mean([r[c] for r in off]) for c in COLS}) + "   | " +
                      fmt({c: np.mean([r[c] for r in only]) for c in COLS}))


if __name__ == "__main__":
    main()
