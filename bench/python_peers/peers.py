#!/usr/bin/env python3
"""The PyPI peers of tessel's benchmark figures: PyTorch 2.x eager and
torch.compile, JAX (jit) and tinygrad, all on the CPU with one thread and
pinned to one core, and PyTorch DDP (torch2_ddp: 1 and 2 processes of one
thread each, not pinned).

Run with the bench venv's interpreter (scripts/setup-deps.sh --bench makes it,
at $TESSEL_BENCH_PYENV, default ~/.cache/tessel-bench-pyenv):

    ~/.cache/tessel-bench-pyenv/bin/python bench/python_peers/peers.py --only=attention_fwd_bwd
    ... peers.py --quick --only=train_step_b256,fashion_epoch,lenet_epoch,gpt_train_step
    ... peers.py --only=ddp_fashion_epoch      # PyTorch DDP, 1 and 2 processes

bench/run_benchmarks runs it once after its own rows and merges what it prints.
Prints one JSON object on stdout, keyed by figure:

    {"attention_fwd_bwd": {"torch2_eager_ms": ..., "torch2_eager_cpu_ms": ...,
                           "torch_compile_ms": ..., "jax_ms": ..., "tinygrad_ms": ...,
                           "check_jax_max_abs_diff": ..., "tinygrad_error": "...", ...},
     "_meta": {"torch": "2.x", "jax": ..., "tinygrad": ..., "threads": ...}}

Numbers are medians in ms of one call (steady-state figures) or one epoch;
`<peer>_cpu_ms` is the process CPU time over the same calls (all threads: a
value well above `<peer>_ms` means the peer used more than one core).
Fields that belong to no peer start with `pypi_` (`pypi_images`, `pypi_vocab`,
`pypi_error` when a whole figure failed). String fields are notes: `<peer>_missing` (not importable), `<peer>_error`
(failed while building or checking that row), `<peer>_how` (what runs).
A peer that fails never gets a number. Progress goes to stderr.

Every figure computes what bench/run_benchmarks.cpp's row of the same name
computes (read the comments there); inputs are the same shapes and
distributions from numpy's generator, not the same values. Before timing,
each peer's result is compared with torch2_eager's on the same inputs
(`check_<peer>_max_abs_diff`).
"""
import argparse
import gzip
import json
import math
import os
import random
import socket
import statistics
import subprocess
import sys
import time
import traceback

# A DDP rank (this script started again by ddp_fashion_epoch) needs torch alone:
# importing JAX and tinygrad in every rank would only slow its start.
DDP_CHILD = "--ddp-child" in sys.argv

# One thread for every library, set before any of them is imported.
for _v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_v] = "1"
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1").strip()
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")  # torch's CUDA wheels: never touch a GPU
os.environ.setdefault("DEV", "CPU")               # tinygrad: the CPU device,
os.environ.setdefault("THREADS", "0")              # kernels without a core_id split,
os.environ.setdefault("NUM_CPU_THREADS", "1")      # and one worker thread
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

# One core, as `taskset -c 0`: some libraries keep worker threads whatever
# the flags above say (jaxlib's CPU client does), and on one core those
# threads can only take turns with the step, as tessel's single thread does.
# Threads made later inherit this; the DDP ranks get every core back (see
# _run_ddp), as tessel's ranks have them.
ALL_CPUS = os.sched_getaffinity(0)
if not DDP_CHILD:
    os.sched_setaffinity(0, {min(ALL_CPUS)})

import numpy as np  # noqa: E402

FIGURES = ["attention_fwd_bwd", "train_step_b256", "fashion_epoch", "lenet_epoch", "gpt_train_step",
           "ddp_fashion_epoch"]
PEERS = ("torch2_eager", "torch_compile", "jax", "tinygrad", "torch2_ddp")
MISSING = "missing (not installed: run scripts/setup-deps.sh --bench)"


def log(*a):
    print("peers.py:", *a, file=sys.stderr, flush=True)


def short(e):
    s = f"{type(e).__name__}: {e}".replace("\n", " ")
    return s if len(s) < 400 else s[:400] + "..."


# ------------------------------------------------------------------ imports

torch = F = jax = jnp = tg = None
versions, missing = {}, {}
try:
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    versions["torch"] = torch.__version__
except Exception as e:  # noqa: BLE001
    missing["torch2_eager"] = missing["torch_compile"] = missing["torch2_ddp"] = f"{MISSING}; {short(e)}"
if torch is not None:
    try:
        import torch.distributed as dist
        if not dist.is_available() or not dist.is_gloo_available():
            raise ImportError("torch.distributed with gloo is not available in this build")
    except Exception as e:  # noqa: BLE001
        missing["torch2_ddp"] = f"{MISSING}; {short(e)}"
try:
    if DDP_CHILD:
        raise ImportError("not needed in a DDP rank")
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_platforms", "cpu")
    versions["jax"] = jax.__version__
    import jaxlib
    versions["jaxlib"] = jaxlib.__version__
except Exception as e:  # noqa: BLE001
    missing["jax"] = f"{MISSING}; {short(e)}"
try:
    if DDP_CHILD:
        raise ImportError("not needed in a DDP rank")
    import tinygrad as tg
    from tinygrad import Tensor as TgTensor, TinyJit, Device
    versions["tinygrad_device"] = f"{Device.DEFAULT} ({type(Device[Device.DEFAULT].renderer).__name__})"
    try:
        from importlib.metadata import version as _pkg_version
        versions["tinygrad"] = _pkg_version("tinygrad")
    except Exception:  # noqa: BLE001
        versions["tinygrad"] = getattr(tg, "__version__", "?")
except Exception as e:  # noqa: BLE001
    missing["tinygrad"] = f"{MISSING}; {short(e)}"


# ------------------------------------------------------------------ timing

def _clock():
    return time.perf_counter(), time.process_time()


class Timer:
    """Steady-state timing of several contestants of one figure: warm-up
    calls, then `reps` repetitions, each a loop of enough calls to last
    `min_time` s; the contestants' repetitions are interleaved in a shuffled
    order per round (a slow spell on a shared machine hits all alike).
    Medians of ms per call, wall and process CPU time."""

    def __init__(self, reps, min_time, seed=0):
        self.reps, self.min_time = reps, min_time
        self.rng = random.Random(seed)

    def run(self, calls):
        n_per = {}
        for name, f in calls.items():
            f()
            f()
            t0 = time.perf_counter()
            f()
            one = max(time.perf_counter() - t0, 1e-6)
            n_per[name] = max(1, int(math.ceil(self.min_time / one)))
        wall = {k: [] for k in calls}
        cpu = {k: [] for k in calls}
        for _ in range(self.reps):
            order = list(calls)
            self.rng.shuffle(order)
            for name in order:
                f, n = calls[name], n_per[name]
                w0, c0 = _clock()
                for _ in range(n):
                    f()
                w1, c1 = _clock()
                wall[name].append((w1 - w0) * 1e3 / n)
                cpu[name].append((c1 - c0) * 1e3 / n)
        return {k: (statistics.median(wall[k]), statistics.median(cpu[k])) for k in calls}


def time_epochs(epochs, rounds, warm):
    """One-shot figures (epochs): `warm` warm epochs each, then `rounds`
    epochs each, alternating which contestant goes first; medians."""
    out = {}
    for name, f in epochs.items():
        for _ in range(warm.get(name, 1)):
            f()
    wall = {k: [] for k in epochs}
    cpu = {k: [] for k in epochs}
    names = list(epochs)
    for r in range(rounds):
        order = names if r % 2 == 0 else names[::-1]
        for name in order:
            w0, c0 = _clock()
            loss = epochs[name]()
            w1, c1 = _clock()
            wall[name].append((w1 - w0) * 1e3)
            cpu[name].append((c1 - c0) * 1e3)
            out.setdefault(name + "_epoch_loss", loss)
    for k in epochs:
        out[k] = (statistics.median(wall[k]), statistics.median(cpu[k]))
    return out


class Figure:
    """Collects one figure's contestants, checks and notes."""

    def __init__(self, name, peers):
        self.name, self.res, self.calls = name, {}, {}
        self.peers = peers
        for p in peers:
            if p in missing:
                self.res[p + "_missing"] = missing[p]

    def wanted(self, peer):
        return peer in self.peers and peer not in missing

    def build(self, peer, how, make):
        """make() returns the timed callable, or raises: the peer gets an error note."""
        if not self.wanted(peer):
            return None
        try:
            t0 = time.perf_counter()
            f = make()
            self.res[peer + "_how"] = how
            self.res[peer + "_setup_s"] = round(time.perf_counter() - t0, 3)
            self.calls[peer] = f
            return f
        except Exception as e:  # noqa: BLE001
            log(f"{self.name}: {peer} failed: {short(e)}")
            traceback.print_exc(file=sys.stderr)
            self.res[peer + "_error"] = short(e)
            return None

    def check(self, peer, got, ref):
        """Max |difference| of a list of arrays against the reference's."""
        if ref is None or got is None:
            return
        d = max(float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)))) for a, b in zip(got, ref))
        self.res[f"check_{peer}_max_abs_diff"] = d

    def timed(self, timer):
        if not self.calls:
            return self.res
        for peer, (ms, cpu_ms) in timer.run(self.calls).items():
            self.res[peer + "_ms"] = ms
            self.res[peer + "_cpu_ms"] = cpu_ms
        return self.res


# ------------------------------------------------------- attention_fwd_bwd

def attention_fwd_bwd(args, timer):
    """Causal self-attention, B=8, H=4, T=256, D=32, f32: sum(attn(q,k,v) * R)
    backward to q, k, v (each call starts from no gradients; the loss and
    the three gradients exist when it returns)."""
    fig = Figure("attention_fwd_bwd", ["torch2_eager", "torch_compile", "jax", "tinygrad"])
    B, H, T, D = 8, 4, 256, 32
    rng = np.random.default_rng(5)
    qn, kn, vn, rn = (rng.standard_normal((B, H, T, D), dtype=np.float32) for _ in range(4))
    ref = None

    def torch_step(compiled):
        q, k, v = (torch.from_numpy(a.copy()).requires_grad_(True) for a in (qn, kn, vn))
        r = torch.from_numpy(rn)

        def loss_fn(q, k, v, r):
            return (F.scaled_dot_product_attention(q, k, v, is_causal=True) * r).sum()

        fn = torch.compile(loss_fn) if compiled else loss_fn

        def call():
            q.grad = k.grad = v.grad = None
            fn(q, k, v, r).backward()
        call()
        return call, [q.grad.numpy().copy(), k.grad.numpy().copy(), v.grad.numpy().copy()]

    if fig.wanted("torch2_eager"):
        def make():
            nonlocal ref
            call, ref = torch_step(False)
            return call
        fig.build("torch2_eager", "F.scaled_dot_product_attention(is_causal=True), (y*r).sum().backward()", make)
    if fig.wanted("torch_compile"):
        def make():
            call, got = torch_step(True)
            fig.check("torch_compile", got, ref)
            return call
        fig.build("torch_compile", "torch.compile(loss of F.scaled_dot_product_attention) + .backward() "
                  "(inductor, AOTAutograd backward)", make)
    if fig.wanted("jax"):
        def make():
            # jax.nn.dot_product_attention takes [B, T, H, D]: the same data transposed.
            tr = lambda a: jnp.asarray(np.ascontiguousarray(a.transpose(0, 2, 1, 3)))  # noqa: E731
            q, k, v, r = tr(qn), tr(kn), tr(vn), tr(rn)

            def loss(q, k, v, r):
                return (jax.nn.dot_product_attention(q, k, v, is_causal=True) * r).sum()
            vg = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))

            def call():
                jax.block_until_ready(vg(q, k, v, r))
            _, g = vg(q, k, v, r)
            fig.check("jax", [np.asarray(x).transpose(0, 2, 1, 3) for x in g], ref)
            return call
        fig.build("jax", "jax.jit(jax.value_and_grad(sum(jax.nn.dot_product_attention(is_causal=True) * r)))", make)
    if fig.wanted("tinygrad"):
        def make():
            q, k, v, r = (TgTensor(a.copy()).realize() for a in (qn, kn, vn, rn))

            @TinyJit
            def step(q, k, v, r):
                loss = (q.scaled_dot_product_attention(k, v, is_causal=True) * r).sum()
                gq, gk, gv = loss.gradient(q, k, v)
                return loss.realize(), gq.realize(), gk.realize(), gv.realize()

            out = None
            for _ in range(3):  # TinyJit captures on the second call, replays from the third
                out = step(q, k, v, r)
            fig.check("tinygrad", [o.numpy() for o in out[1:]], ref)

            def call():
                o = step(q, k, v, r)
                o[0].numpy()  # wait for the (asynchronous) kernels; the loss is one float
            return call
        fig.build("tinygrad", "TinyJit(Tensor.scaled_dot_product_attention(is_causal=True), loss.gradient(q, k, v))",
                  make)
    return fig.timed(timer)


# --------------------------------------------------------- train_step_b256

# torch.compile rows: the model and its loss under torch.compile (default mode,
# inductor; the backward compiled by AOTAutograd), the optimizer eager
# (foreach). Compiling opt.step as well was no faster on one CPU thread
# (GPT step, 2026-12-06: 339 vs 310 ms CPU time) and costs much compile time.
COMPILE_HOW = "torch.compile(model + F.cross_entropy) (inductor, default mode), optimizer eager (foreach)"


def _mlp():
    return torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))


def _mlp_init(seed):
    """The MLP's initial (w1 [256, 784], b1, w2 [10, 256], b2) as numpy arrays:
    the torch peers' weights (nn.Linear's default init after
    torch.manual_seed(seed)) when torch imports, so the JAX row starts from
    the same point and its first loss can be checked; else the same
    distribution (uniform, bound 1/sqrt(fan_in)) from numpy."""
    if torch is not None:
        torch.manual_seed(seed)
        return [p.detach().numpy().copy() for p in _mlp().parameters()]
    rng = np.random.default_rng(seed)
    out = []
    for fan_in, fan_out in ((784, 256), (256, 10)):
        bound = 1 / math.sqrt(fan_in)
        out += [rng.uniform(-bound, bound, (fan_out, fan_in)).astype(np.float32),
                rng.uniform(-bound, bound, fan_out).astype(np.float32)]
    return out


# JAX rows: the whole step (value_and_grad and the SGD update) is one
# jax.jit with the parameters donated, so XLA may update them in place.
# Weights are kept [in, out] (x @ w), the layout a JAX model stores.
JAX_HOW = ("jax.jit(value_and_grad(cross_entropy(mlp)) + SGD(lr=0.1) update, params donated), "
           "block_until_ready; weights " + ("copied from torch's init" if torch is not None else
                                            "drawn by numpy as nn.Linear's default init (torch not importable)"))


def _jax_params(seed):
    w1, b1, w2, b2 = _mlp_init(seed)
    # Copies owned by XLA (a numpy-backed array cannot be donated).
    return tuple(jnp.array(a, copy=True) for a in (w1.T, b1, w2.T, b2))


def _jax_loss(p, x, y):
    """Mean cross entropy of the MLP's logits; the logits as aux."""
    w1, b1, w2, b2 = p
    z = jnp.maximum(x @ w1 + b1, 0.0) @ w2 + b2
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(z), y[:, None], axis=1)), z


def _jax_sgd(p, x, y, lr):
    (loss, z), g = jax.value_and_grad(_jax_loss, has_aux=True)(p, x, y)
    return tuple(a - lr * b for a, b in zip(p, g)), loss, z


def _compiled_sgd_step(model, opt, compiled):
    """loss = cross_entropy(model(x), y); zero_grad; backward; step. With
    `compiled`: the model and loss under torch.compile (its backward compiled
    by AOTAutograd); the optimizer stays eager (see COMPILE_HOW)."""
    def loss_fn(x, y):
        return F.cross_entropy(model(x), y)
    fwd = torch.compile(loss_fn) if compiled else loss_fn
    return fwd, opt.step


def train_step_b256(args, timer):
    """Sequential(Linear(784,256), ReLU, Linear(256,10)), batch 256, f32 inputs
    uniform in [0, 1), labels in 0..9: cross_entropy, zero_grad, backward,
    SGD(lr=0.1).step() (eager: the new weights exist when it returns)."""
    fig = Figure("train_step_b256", ["torch2_eager", "torch_compile", "jax"])
    B = 256
    rng = np.random.default_rng(1)
    xn = rng.random((B, 784), dtype=np.float32)
    yn = rng.integers(0, 10, B).astype(np.int64)
    ref = None

    def make_step(compiled):
        torch.manual_seed(0)
        model = _mlp()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x, y = torch.from_numpy(xn), torch.from_numpy(yn)
        fwd, step = _compiled_sgd_step(model, opt, compiled)

        def call():
            loss = fwd(x, y)
            opt.zero_grad()
            loss.backward()
            step()
            return loss
        first = float(call().detach())
        return call, [np.array([first])]

    if fig.wanted("torch2_eager"):
        def make():
            nonlocal ref
            call, ref = make_step(False)
            return call
        fig.build("torch2_eager", "nn.Linear x2, F.cross_entropy, optim.SGD(lr=0.1)", make)
    if fig.wanted("torch_compile"):
        def make():
            call, got = make_step(True)
            fig.check("torch_compile", got, ref)  # the first step's loss, same weights
            return call
        fig.build("torch_compile", COMPILE_HOW, make)
    if fig.wanted("jax"):
        def make():
            step = jax.jit(lambda p, x, y: _jax_sgd(p, x, y, 0.1)[:2], donate_argnums=0)
            x, y = jnp.asarray(xn), jnp.asarray(yn.astype(np.int32))
            state = [_jax_params(0)]

            def call():
                state[0], loss = step(state[0], x, y)
                jax.block_until_ready((state[0], loss))
                return loss
            t0 = time.perf_counter()
            first = float(call())  # compiles: excluded from the timings, reported apart
            fig.res["jax_compile_ms"] = (time.perf_counter() - t0) * 1e3
            fig.check("jax", [np.array([first])], ref)  # the first step's loss, same weights and batch
            return call
        fig.build("jax", JAX_HOW, make)
    return fig.timed(timer)


# ------------------------------------------------- fashion_epoch, lenet_epoch

def fashion_mnist_dir():
    return os.environ.get("TESSEL_FASHION_MNIST", "/usr/share/datasets/fashion-mnist")


def load_fashion_mnist_train():
    """As dsl/data/fashion_mnist.cpp: images [n, 1, 28, 28] f32 / 255, labels i64."""
    d = fashion_mnist_dir()
    with gzip.open(os.path.join(d, "train-images-idx3-ubyte.gz"), "rb") as f:
        raw = f.read()
    n, rows, cols = (int.from_bytes(raw[i:i + 4], "big") for i in (4, 8, 12))
    X = np.frombuffer(raw, np.uint8, offset=16).reshape(n, 1, rows, cols).astype(np.float32) / np.float32(255.0)
    with gzip.open(os.path.join(d, "train-labels-idx1-ubyte.gz"), "rb") as f:
        raw = f.read()
    Y = np.frombuffer(raw, np.uint8, offset=8).astype(np.int64)
    return X, Y


def _sgd_epoch(model, X, Y, batch, lr, seed, compiled):
    """The per-batch work of bench/torch_peer.cpp's sgd_epoch (and tessel's
    Trainer): randperm shuffling, index_select batch copies, forward,
    cross_entropy, zero_grad, backward, SGD step, loss.item(), argmax accuracy."""
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    n = X.shape[0]

    def logits_loss(xb, yb):
        logits = model(xb)
        return logits, F.cross_entropy(logits, yb)
    fwd = torch.compile(logits_loss) if compiled else logits_loss
    step = opt.step

    def epoch():
        model.train()
        order = torch.randperm(n, generator=gen)
        total = correct = 0.0
        for s in range(0, n, batch):
            idx = order[s:s + batch]
            xb, yb = X.index_select(0, idx), Y.index_select(0, idx)
            logits, loss = fwd(xb, yb)
            opt.zero_grad()
            loss.backward()
            step()
            total += loss.item() * idx.numel()
            with torch.no_grad():
                correct += logits.argmax(1).eq(yb).to(torch.float32).sum().item()
        return total / n
    return epoch


def _jax_sgd_epoch(X, Y, batch, lr, seed):
    """The per-batch work of _sgd_epoch in JAX: one jitted step per batch
    that gathers the batch from the device-resident data set (as
    index_select), runs forward, cross entropy, gradients and the SGD update
    (parameters donated) and returns the loss and the number of correct
    argmaxes; both are read back per batch (loss.item(), accuracy). The order
    is torch's randperm with the same generator seed when torch imports (the
    same batches as torch2_eager), else numpy's permutation. Both batch
    shapes (256 and the partial last one) are compiled here, before any
    epoch: returns (epoch, compile ms)."""
    n = X.shape[0]
    Xd, Yd = jnp.asarray(X.reshape(n, -1)), jnp.asarray(Y.astype(np.int32))

    def step(p, X, Y, idx):
        xb, yb = jnp.take(X, idx, axis=0), jnp.take(Y, idx, axis=0)
        p, loss, z = _jax_sgd(p, xb, yb, lr)
        return p, loss, jnp.sum(jnp.argmax(z, axis=1) == yb)
    step = jax.jit(step, donate_argnums=0)
    t0 = time.perf_counter()
    for size in sorted({batch, n % batch} - {0}):
        jax.block_until_ready(step(_jax_params(seed), Xd, Yd, np.arange(size, dtype=np.int32)))
    compile_ms = (time.perf_counter() - t0) * 1e3
    state = [_jax_params(seed)]
    gen = torch.Generator().manual_seed(seed) if torch is not None else None
    rng = np.random.default_rng(seed)

    def epoch():
        order = (torch.randperm(n, generator=gen).numpy() if gen is not None else rng.permutation(n)).astype(np.int32)
        total = correct = 0.0
        for s in range(0, n, batch):
            idx = order[s:s + batch]
            state[0], loss, c = step(state[0], Xd, Yd, idx)
            total += float(loss) * idx.shape[0]
            correct += float(c)
        return total / n
    return epoch, compile_ms


def epoch_figure(name, args, make_model, X, Y, extra, jax_epoch=False):
    """torch2_eager and torch_compile rows of an epoch figure (make_model()
    builds the torch model), and with jax_epoch a JAX row of the MLP."""
    fig = Figure(name, ["torch2_eager", "torch_compile"] + (["jax"] if jax_epoch else []))
    fig.res.update(extra)
    epochs = {}
    for peer, compiled, how in (("torch2_eager", False, "eager"),
                                ("torch_compile", True, COMPILE_HOW + "; two warm epochs")):
        if not fig.wanted(peer):
            continue
        try:
            model = make_model()
            epochs[peer] = _sgd_epoch(model, torch.from_numpy(X), torch.from_numpy(Y), 256, 0.1, 0, compiled)
            fig.res[peer + "_how"] = how
        except Exception as e:  # noqa: BLE001
            fig.res[peer + "_error"] = short(e)
    if fig.wanted("jax"):
        try:
            epochs["jax"], fig.res["jax_compile_ms"] = _jax_sgd_epoch(X, Y, 256, 0.1, 0)
            fig.res["jax_how"] = (JAX_HOW + "; batch gathered on the device, loss and correct count read back per "
                                  "batch; both batch shapes compiled before the warm epoch (jax_compile_ms)")
        except Exception as e:  # noqa: BLE001
            log(f"{name}: jax failed: {short(e)}")
            traceback.print_exc(file=sys.stderr)
            fig.res["jax_error"] = short(e)
    # torch.compile: the full batches and the partial last one are two shapes
    # (the second recompiles, possibly with a dynamic batch): both in warm epochs.
    ok = {}
    for peer, f in epochs.items():
        try:
            t0 = time.perf_counter()
            fig.res[peer + "_epoch1_loss"] = f()
            fig.res[peer + "_first_epoch_ms"] = (time.perf_counter() - t0) * 1e3
            ok[peer] = f
        except Exception as e:  # noqa: BLE001
            log(f"{name}: {peer} failed: {short(e)}")
            fig.res[peer + "_error"] = short(e)
    # Same weights, same batches in the same order: the first epochs' mean losses agree to rounding.
    ref = fig.res.get("torch2_eager_epoch1_loss")
    for peer in ok:
        if peer != "torch2_eager" and ref is not None:
            fig.res[f"check_{peer}_epoch1_loss_diff"] = abs(fig.res[peer + "_epoch1_loss"] - ref)
    if not ok:
        return fig.res
    rounds = 2 if args.quick else 4
    res = time_epochs(ok, rounds, warm={"torch_compile": 1, "torch2_eager": 0, "jax": 0})
    for peer in ok:
        fig.res[peer + "_ms"], fig.res[peer + "_cpu_ms"] = res[peer]
    fig.res["pypi_epochs_timed"] = rounds
    return fig.res


def fashion_epoch(args, timer):
    """One epoch of Sequential(Flatten, Linear(784,256), ReLU, Linear(256,10)),
    SGD lr 0.1, batch 256, on Fashion-MNIST's 60000 training images."""
    X, Y = load_fashion_mnist_train()

    def make():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Flatten(), _mlp())
    return epoch_figure("fashion_epoch", args, make, X, Y, {"pypi_images": float(X.shape[0])}, jax_epoch=True)


def make_lenet():
    """D2L's LeNet with BatchNorm, as bench/torch_peer.cpp's make_lenet
    (samples/lenet/lenet_model.h relu_bn), Xavier-uniform conv/linear weights."""
    nn = torch.nn
    net = nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.BatchNorm2d(6), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(6, 16, 5), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Flatten(),
                        nn.Linear(16 * 5 * 5, 120), nn.BatchNorm1d(120), nn.ReLU(),
                        nn.Linear(120, 84), nn.BatchNorm1d(84), nn.ReLU(),
                        nn.Linear(84, 10))
    for m in net.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            nn.init.xavier_uniform_(m.weight)
    return net


def lenet_epoch(args, timer):
    """One epoch of the LeNet above on the first --lenet-images training
    images (default 15360 = 60 batches; <= 0: all), SGD lr 0.1, batch 256."""
    X, Y = load_fashion_mnist_train()
    n = X.shape[0] if args.lenet_images <= 0 else min(args.lenet_images, X.shape[0])
    X, Y = np.ascontiguousarray(X[:n]), np.ascontiguousarray(Y[:n])

    def make():
        torch.manual_seed(0)
        return make_lenet()
    return epoch_figure("lenet_epoch", args, make, X, Y,
                        {"pypi_images": float(n), "pypi_batches": float((n + 255) // 256)})


# ---------------------------------------------------------- gpt_train_step

def fortunes_vocab():
    """The GPT sample's vocabulary size: distinct bytes of the fortune files
    (samples/gpt/gpt_data.h), or None without the corpus."""
    d = os.environ.get("TESSEL_FORTUNES_DIR") or "/usr/share/games/fortunes"
    if not os.path.isdir(d):
        return None
    seen = set()
    for e in sorted(os.listdir(d)):
        p = os.path.join(d, e)
        if os.path.islink(p) or not os.path.isfile(p) or e.endswith(".dat"):
            continue
        with open(p, "rb") as f:
            seen.update(f.read())
    return len(seen) or None


def make_gpt(vocab, block, n_layer, n_head, d, dropout):
    """samples/gpt/gpt_model.h in torch.nn (minGPT's names and init): token and
    learned position embeddings, pre-LN blocks (c_attn Linear(d, 3d), causal
    SDPA, c_proj; MLP d -> 4d -> GELU -> d), final LN, lm_head tied to wte."""
    nn = torch.nn

    class Attn(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn, self.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.drop = nn.Dropout(dropout)

        def forward(self, x):
            B, T, C = x.shape
            q, k, v = (t.view(B, T, n_head, C // n_head).transpose(1, 2) for t in self.c_attn(x).split(C, dim=2))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout if self.training else 0.0)
            return self.drop(self.c_proj(y.transpose(1, 2).reshape(B, T, C)))

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_fc, self.c_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
            self.drop = nn.Dropout(dropout)

        def forward(self, x):
            return self.drop(self.c_proj(F.gelu(self.c_fc(x))))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.attn, self.ln_2, self.mlp = nn.LayerNorm(d), Attn(), nn.LayerNorm(d), MLP()

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.transformer = nn.ModuleDict(dict(
                wte=nn.Embedding(vocab, d), wpe=nn.Embedding(block, d),
                h=nn.ModuleList([Block() for _ in range(n_layer)]), ln_f=nn.LayerNorm(d)))
            self.drop = nn.Dropout(dropout)
            self.lm_head = nn.Linear(d, vocab, bias=False)
            self.lm_head.weight = self.transformer.wte.weight
            for m in self.modules():
                if isinstance(m, (nn.Linear, nn.Embedding)):
                    nn.init.normal_(m.weight, 0.0, 0.02)
                    if isinstance(m, nn.Linear) and m.bias is not None:
                        nn.init.zeros_(m.bias)
            for name, p in self.named_parameters():
                if name.endswith("c_proj.weight"):
                    nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * n_layer))

        def forward(self, idx):
            T = idx.shape[1]
            pos = torch.arange(T, dtype=torch.long)
            x = self.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
            for b in self.transformer.h:
                x = b(x)
            return self.lm_head(self.transformer.ln_f(x))

    return GPT()


def gpt_train_step(args, timer):
    """One training step of the GPT sample's model on a random token batch
    [batch, context] (targets: another random batch): forward in training
    mode, cross_entropy over [B*T, vocab], zero_grad, backward,
    clip_grad_norm_(1.0) (unless --gpt-clip=0), AdamW step (lr 1e-3, betas
    (0.9, 0.99), weight decay 0.1 on the Linear weights only, as
    gpt::param_groups)."""
    fig = Figure("gpt_train_step", ["torch2_eager", "torch_compile"])
    vocab = args.gpt_vocab or fortunes_vocab() or 100
    B, T, L, Hh, d = args.gpt_batch, 128, 4, 4, 128
    fig.res.update({"pypi_vocab": float(vocab), "pypi_batch": float(B), "pypi_context": float(T),
                    "pypi_layers": float(L), "pypi_heads": float(Hh), "pypi_n_embd": float(d),
                    "pypi_dropout": args.gpt_dropout, "pypi_clip": args.gpt_clip})
    rng = np.random.default_rng(7)
    xn = rng.integers(0, vocab, (B, T)).astype(np.int64)
    yn = rng.integers(0, vocab, (B, T)).astype(np.int64)
    ref = None

    def make_step(compiled):
        torch.manual_seed(1337)
        model = make_gpt(vocab, T, L, Hh, d, args.gpt_dropout)
        model.train()
        decay = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Linear)}
        # lm_head.weight is wte.weight: an embedding, not decayed (minGPT's groups)
        decay.discard(id(model.transformer.wte.weight))
        params = list(model.parameters())
        groups = [{"params": [p for p in params if id(p) in decay], "weight_decay": 0.1},
                  {"params": [p for p in params if id(p) not in decay], "weight_decay": 0.0}]
        opt = torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.99))
        x, y = torch.from_numpy(xn), torch.from_numpy(yn)

        def loss_fn(x, y):
            logits = model(x)
            return F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
        fwd = torch.compile(loss_fn) if compiled else loss_fn
        step = opt.step

        def call():
            loss = fwd(x, y)
            opt.zero_grad()
            loss.backward()
            if args.gpt_clip > 0:
                torch.nn.utils.clip_grad_norm_(params, args.gpt_clip)
            step()
            return loss
        first = float(call().detach())
        return call, first

    if fig.wanted("torch2_eager"):
        def make():
            nonlocal ref
            call, ref = make_step(False)
            fig.res["torch2_eager_first_loss"] = ref
            return call
        fig.build("torch2_eager", "nn.Module GPT, F.scaled_dot_product_attention, optim.AdamW (foreach)", make)
    if fig.wanted("torch_compile"):
        def make():
            call, first = make_step(True)
            fig.res["torch_compile_first_loss"] = first
            return call
        fig.build("torch_compile", COMPILE_HOW + "; clip_grad_norm_ eager", make)
    return fig.timed(timer)


# ------------------------------------------------------- ddp_fashion_epoch

# As bench/ddp_bench.cpp (the tessel row, started by run_benchmarks through
# tools/tessel-run): the fashion_epoch MLP (torch's init, seed 0), SGD lr 0.1,
# global batch 256 (256 / world per rank), DistributedSampler (shuffle, seed
# 0, set_epoch per epoch), 3 warm-up batches, then epochs each between two
# barriers; rank 0 reports the median epoch. samples = batches x 256, as
# ddp_bench counts them (60160 for 235 batches). One thread per process, no
# pinning (ddp_bench pins nothing either): the ranks get back every core the
# parent was started with.
DDP_GLOBAL_BATCH = 256
DDP_WARM_BATCHES = 3


def ddp_child(args):
    """One rank: world 1 is the plain model (no process group, no DDP), world
    2 DistributedDataParallel(model) (default 25 MB bucket) over gloo on
    loopback (MASTER_ADDR/MASTER_PORT from the parent). Prints one JSON line
    (rank 0)."""
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data.distributed import DistributedSampler
    world, rank = args.ddp_world, args.ddp_rank
    X, Y = load_fashion_mnist_train()
    Xt, Yt = torch.from_numpy(X), torch.from_numpy(Y)
    n = Xt.shape[0]
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), _mlp())
    if world > 1:
        dist.init_process_group("gloo", rank=rank, world_size=world)
        net = DistributedDataParallel(model)
    else:
        net = model
    per_rank = DDP_GLOBAL_BATCH // world
    sampler = DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=True, seed=0)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)

    def batches(epoch):
        # The sampler's indices, then index_select batch copies (as the other
        # epoch peers; a DataLoader would collate 128 samples one by one).
        sampler.set_epoch(epoch)
        order = torch.tensor(list(sampler), dtype=torch.int64)
        return [order[s:s + per_rank] for s in range(0, order.numel(), per_rank)]

    def step(idx):
        loss = F.cross_entropy(net(Xt.index_select(0, idx)), Yt.index_select(0, idx))
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    def barrier():
        if world > 1:
            dist.barrier()
    for idx in batches(1000)[:DDP_WARM_BATCHES]:
        step(idx).item()
    wall, cpu = [], []
    loss, nb = 0.0, 0
    for e in range(args.ddp_epochs):
        bs = batches(e)
        barrier()
        w0, c0 = _clock()
        for idx in bs:
            last = step(idx)
        loss = last.item()
        barrier()
        w1, c1 = _clock()
        wall.append(w1 - w0)
        cpu.append(c1 - c0)
        nb = len(bs)
    sec = statistics.median(wall)
    if rank == 0:
        samples = nb * DDP_GLOBAL_BATCH
        print(json.dumps({"world": world, "batches": nb, "samples": samples, "seconds": sec,
                          "samples_per_s": samples / sec, "cpu_seconds": statistics.median(cpu), "loss": loss}),
              flush=True)
    if world > 1:
        dist.destroy_process_group()


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_ddp(world, epochs, timeout_s=600):
    """Starts `world` ranks of this script (--ddp-child) and returns rank 0's result."""
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), WORLD_SIZE=str(world))
    procs = []
    for rank in range(world):
        cmd = [sys.executable, os.path.abspath(__file__), "--ddp-child", f"--ddp-world={world}",
               f"--ddp-rank={rank}", f"--ddp-epochs={epochs}"]
        procs.append(subprocess.Popen(cmd, env=dict(env, RANK=str(rank)), stdout=subprocess.PIPE, text=True,
                                      preexec_fn=lambda: os.sched_setaffinity(0, ALL_CPUS)))
    # A rank that fails leaves the other waiting in gloo (for minutes): stop it then.
    deadline = time.monotonic() + timeout_s
    try:
        while any(p.poll() is None for p in procs):
            if any(p.returncode not in (None, 0) for p in procs) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
    out0 = procs[0].stdout.read()  # one line: the pipe cannot fill while the ranks run
    for p in procs:
        p.stdout.close()
    bad = [f"rank {r} exit status {p.returncode}" for r, p in enumerate(procs) if p.returncode != 0]
    if bad:
        raise RuntimeError(f"{world} process(es): " + ", ".join(bad))
    lines = [ln for ln in out0.splitlines() if ln.startswith("{")]
    if not lines:
        raise RuntimeError(f"{world} process(es): rank 0 printed no result")
    return json.loads(lines[-1])


def ddp_fashion_epoch(args, timer):
    """PyTorch DDP against tessel's ddp_fashion_epoch row: samples/s of one
    plain process and of two DDP processes, and the scaling efficiency
    (2-process rate / (2 x 1-process rate)). Median of 3 epochs (1 with
    --quick) in each configuration."""
    fig = Figure("ddp_fashion_epoch", ["torch2_ddp"])
    if not fig.wanted("torch2_ddp"):
        return fig.res
    epochs = 1 if args.quick else 3
    d = fashion_mnist_dir()
    if not os.path.exists(os.path.join(d, "train-images-idx3-ubyte.gz")):
        raise FileNotFoundError(f"Fashion-MNIST not found in {d} (set TESSEL_FASHION_MNIST)")
    rate = {}
    try:
        for world in (1, 2):
            r = _run_ddp(world, epochs)
            rate[world] = r["samples_per_s"]
            fig.res[f"torch2_ddp_samples_per_s_{world}proc"] = r["samples_per_s"]
            fig.res[f"torch2_ddp_epoch_seconds_{world}proc"] = r["seconds"]
            fig.res[f"torch2_ddp_cpu_seconds_{world}proc"] = r["cpu_seconds"]  # rank 0's process, all threads
            fig.res[f"torch2_ddp_loss_{world}proc"] = r["loss"]
            fig.res["torch2_ddp_samples"] = float(r["samples"])
            fig.res["torch2_ddp_batches"] = float(r["batches"])
    except Exception as e:  # noqa: BLE001
        log(f"ddp_fashion_epoch: torch2_ddp failed: {short(e)}")
        fig.res["torch2_ddp_error"] = short(e)
        return fig.res
    fig.res["torch2_ddp_scaling_efficiency"] = rate[2] / (2 * rate[1])
    fig.res["torch2_ddp_epochs_timed"] = float(epochs)
    fig.res["torch2_ddp_how"] = ("1 process: the plain model; 2 processes: DistributedDataParallel(model) (default "
                                 "bucket), gloo on loopback, subprocesses with MASTER_ADDR=127.0.0.1; "
                                 "DistributedSampler(shuffle, seed 0) indices, index_select batches of 256 / world, "
                                 "SGD lr 0.1, torch.set_num_threads(1); median epoch between barriers after "
                                 f"{DDP_WARM_BATCHES} warm-up batches")
    return fig.res


# ------------------------------------------------------------------ main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="", help="comma-separated figures (default: all): " + ",".join(FIGURES))
    ap.add_argument("--quick", action="store_true", help="5 repetitions instead of 11, 2 epochs instead of 4")
    ap.add_argument("--lenet-images", type=int, default=15360, help="lenet_epoch: the first N images (<= 0: all)")
    ap.add_argument("--gpt-vocab", type=int, default=0, help="gpt_train_step: vocabulary (0: the fortunes corpus's, "
                    "else 100)")
    ap.add_argument("--gpt-batch", type=int, default=16)
    ap.add_argument("--gpt-dropout", type=float, default=0.1, help="the sample's model dropout (training mode)")
    ap.add_argument("--gpt-clip", type=float, default=1.0, help="max gradient norm (0: no clipping)")
    ap.add_argument("--peers", default="", help="comma-separated subset of " + ",".join(PEERS))
    # One rank of ddp_fashion_epoch (the script starts itself with these).
    ap.add_argument("--ddp-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--ddp-world", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--ddp-rank", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--ddp-epochs", type=int, default=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.ddp_child:
        ddp_child(args)
        return

    figs = [f for f in args.only.split(",") if f] or FIGURES
    unknown = [f for f in figs if f not in FIGURES]
    figs = [f for f in figs if f in FIGURES]
    if args.peers:
        keep = set(args.peers.split(","))
        for p in PEERS:
            if p not in keep:
                missing.setdefault(p, "not selected (--peers)")
    timer = Timer(reps=5 if args.quick else 11, min_time=0.05 if args.quick else 0.1)
    out = {"_meta": {**versions, "python": sys.version.split()[0], "threads": "1 (torch.set_num_threads(1), "
                     "XLA --xla_cpu_multi_thread_eigen=false, OMP/MKL/OPENBLAS_NUM_THREADS=1), "
                     f"pinned to CPU {min(ALL_CPUS)} (DDP ranks: every CPU)",
                     "unknown_figures": ",".join(unknown)}}
    if torch is not None:
        out["_meta"]["torch_num_threads"] = torch.get_num_threads()
    funcs = {"attention_fwd_bwd": attention_fwd_bwd, "train_step_b256": train_step_b256,
             "fashion_epoch": fashion_epoch, "lenet_epoch": lenet_epoch, "gpt_train_step": gpt_train_step,
             "ddp_fashion_epoch": ddp_fashion_epoch}
    torch_only = {"lenet_epoch": ("torch2_eager", "torch_compile"), "gpt_train_step": ("torch2_eager", "torch_compile"),
                  "ddp_fashion_epoch": ("torch2_ddp",)}
    for f in figs:
        log(f"{f} ...")
        t0 = time.perf_counter()
        if torch is None and f in torch_only:
            out[f] = {p + "_missing": missing[p] for p in torch_only[f]}
            continue
        try:
            out[f] = funcs[f](args, timer)
        except Exception as e:  # noqa: BLE001 (no data set, ...): the figure's peers are errors, not numbers
            traceback.print_exc(file=sys.stderr)
            out[f] = {"pypi_error": short(e)}
        log(f"{f} done in {time.perf_counter() - t0:.1f} s: " +
            ", ".join(f"{k} {v:.4g}" for k, v in out[f].items()
                      if k.endswith(("_ms", "samples_per_s_1proc", "samples_per_s_2proc")) and isinstance(v, float)))
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
