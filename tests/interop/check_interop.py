#!/usr/bin/env python3
"""Interop test (ctest label interop): tessel's checkpoints open in Python's
safetensors and PyTorch, and files written by them open in tessel.

  check_interop.py --tool build/tests/interop/interop_tool --dir WORKDIR

Needs Debian's python3-torch/python3-numpy and PyPI's safetensors in the venv
that scripts/setup-deps.sh creates (TESSEL_PYENV, default
~/.cache/tessel-pyenv). Missing dependencies are a failure, never a skip.
"""
import argparse
import json
import math
import os
import subprocess
import sys
from pathlib import Path

SETUP_HINT = "run scripts/setup-deps.sh to install the interop test's Python dependencies"


def pyenv_dir():
    return Path(os.environ.get("TESSEL_PYENV", Path.home() / ".cache" / "tessel-pyenv"))


def import_deps():
    """Imports numpy, torch and safetensors, re-running this script in the
    venv from scripts/setup-deps.sh when the current Python lacks them."""
    try:
        import numpy  # noqa: F401
        import safetensors  # noqa: F401
        import torch  # noqa: F401
        return
    except ImportError as e:
        missing = e.name
    venv_python = pyenv_dir() / "bin" / "python"
    if venv_python.exists() and Path(sys.executable).absolute() != venv_python.absolute():
        os.execv(str(venv_python), [str(venv_python), *sys.argv])
    print(f"interop: FAIL: Python module '{missing}' not found (tried {sys.executable}"
          f" and {venv_python}); {SETUP_HINT}", file=sys.stderr)
    sys.exit(1)


import_deps()

import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.numpy import load_file as np_load, save_file as np_save  # noqa: E402
from safetensors.torch import load_file as pt_load, save_file as pt_save  # noqa: E402

failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)
    return ok


def load_strict(model, sd, fname):
    """torch's load_state_dict(strict=True) of `sd` into `model`, checked."""
    try:
        model.load_state_dict(sd, strict=True)
        loaded = True
    except RuntimeError as e:
        loaded = False
        print(e)
    return check(loaded, f"{fname}: torch load_state_dict(strict=True)")


def run_tool(tool, *args):
    r = subprocess.run([tool, *map(str, args)], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"interop: FAIL: {tool} {' '.join(map(str, args))} exited "
                         f"{r.returncode}:\n{r.stdout}{r.stderr}")
    return r.stdout


def tessel_read(tool, path):
    """name -> (dtype, shape, sum, first values) as tessel sees the file."""
    out = {}
    for line in run_tool(tool, "read", path).splitlines():
        name, dtype, shape, total, *first = line.split()
        dims = tuple(int(d) for d in shape.strip("[]").split(",") if d)
        out[name] = (dtype, dims, float(total), [float(v) for v in first])
    return out


def torch_dtype_name(t):
    return str(t.dtype).removeprefix("torch.")


def same_view(name, dtype, values, seen):
    """Compares a tensor's dtype, shape, sum and first values (values: a
    float64 numpy array) with tessel's `read` line for it."""
    if not check(name in seen, f"tessel sees '{name}'"):
        return
    t_dtype, t_shape, t_sum, t_first = seen[name]
    flat = values.reshape(-1)
    total = float(np.sum(flat))
    scale = max(1.0, float(np.sum(np.abs(flat))))
    check(t_dtype == dtype and t_shape == tuple(values.shape)
          and abs(t_sum - total) <= 1e-12 * scale
          and t_first == flat[:4].tolist(),
          f"'{name}': tessel {t_dtype}{list(t_shape)} sum {t_sum} first {t_first}; "
          f"python {dtype}{list(values.shape)} sum {total} first {flat[:4].tolist()}")


def expand_aliases(path, tensors):
    """PyTorch readers see every state_dict name: tied names are stored once
    and listed in metadata `tessel.aliases` (alias -> stored name)."""
    with safe_open(str(path), framework="np") as f:
        meta = f.metadata() or {}
    aliases = json.loads(meta.get("tessel.aliases", "{}"))
    out = dict(tensors)
    for alias, stored in aliases.items():
        out[alias] = tensors[stored]
    return meta, aliases, out


def check_tessel_files_in_python(tool, d):
    """(a) safetensors.numpy reads tessel's checkpoints."""
    for fname, n_stored, n_aliases in [("mlp.safetensors", 4, 0), ("mlp_tied.safetensors", 6, 2)]:
        path = d / fname
        stored = np_load(str(path))
        meta, aliases, full = expand_aliases(path, stored)
        keys = json.loads(meta.get("tessel.keys", "null"))
        check(meta.get("tessel.kind") == "dict", f"{fname}: tessel.kind is dict ({meta.get('tessel.kind')})")
        check(len(stored) == n_stored and len(aliases) == n_aliases,
              f"{fname}: {len(stored)} stored tensors, {len(aliases)} aliases "
              f"(expected {n_stored}, {n_aliases})")
        check(all(a not in stored and s in stored for a, s in aliases.items()),
              f"{fname}: aliases name stored tensors and are not stored themselves")
        check(keys is not None and sorted(keys) == sorted(full),
              f"{fname}: tessel.keys {keys} cover the stored names and aliases {sorted(full)}")
        seen = tessel_read(tool, path)
        check(sorted(seen) == sorted(full), f"{fname}: same names in tessel and python")
        for name, arr in full.items():
            same_view(name, str(arr.dtype), arr.astype(np.float64), seen)
    io = np_load(str(d / "io.safetensors"))
    check(io["x"].shape == (4, 20) and io["x"].dtype == np.float32, "io.safetensors: x is f32 [4, 20]")
    same_view("y", "float32", io["y"].astype(np.float64), tessel_read(tool, d / "io.safetensors"))


def python_tensors():
    rng = np.random.default_rng(7)
    f = rng.standard_normal((2, 3, 4))
    return {
        "f32": (f * 3).astype(np.float32),
        "f64": f * 1e10,
        "i64": rng.integers(-2**62, 2**62, size=(5,), dtype=np.int64),
        "i32": rng.integers(-2**31, 2**31 - 1, size=(3, 2), dtype=np.int32),
        "bool": rng.integers(0, 2, size=(7,)).astype(np.bool_),
        "f16": np.array([[0.5, -1.25, 65504.0], [6e-8, -0.0, 3.140625]], dtype=np.float16),
        "scalar_f32": np.array(2.5, dtype=np.float32),
        "empty_f32": np.zeros((0, 3), dtype=np.float32),
    }


def check_python_files_in_tessel(tool, d):
    """(b) tessel reads files written by safetensors.numpy / safetensors.torch,
    and what it writes back is bit-identical."""
    arrays = python_tensors()
    np_path, np_back = d / "from_numpy.safetensors", d / "from_numpy.tessel.safetensors"
    np_save(arrays, str(np_path))
    seen = tessel_read(tool, np_path)
    check(sorted(seen) == sorted(arrays), f"from_numpy: tessel sees {sorted(seen)}")
    for name, arr in arrays.items():
        same_view(name, str(arr.dtype), arr.astype(np.float64), seen)
    run_tool(tool, "copy", np_path, np_back)
    back = np_load(str(np_back))
    for name, arr in arrays.items():
        b = back.get(name)
        check(b is not None and b.dtype == arr.dtype and b.shape == arr.shape
              and b.tobytes() == arr.tobytes(), f"from_numpy: '{name}' round-trips bit-exactly")

    g = torch.Generator().manual_seed(7)
    tensors = {
        "bf16": (torch.randn(3, 5, generator=g) * 100).to(torch.bfloat16),
        "bf16_special": torch.tensor([1.0, -0.0, 3.0e38, 1e-40, 0.0078125], dtype=torch.bfloat16),
        "f32": torch.randn(4, generator=g),
    }
    pt_path, pt_back = d / "from_torch.safetensors", d / "from_torch.tessel.safetensors"
    pt_save(tensors, str(pt_path))
    seen = tessel_read(tool, pt_path)
    for name, t in tensors.items():
        same_view(name, torch_dtype_name(t), t.double().numpy(), seen)
    run_tool(tool, "copy", pt_path, pt_back)
    back = pt_load(str(pt_back))
    for name, t in tensors.items():
        b = back.get(name)
        check(b is not None and b.dtype == t.dtype and b.shape == t.shape
              and torch.equal(b.view(torch.int16) if t.dtype == torch.bfloat16 else b,
                              t.view(torch.int16) if t.dtype == torch.bfloat16 else t),
              f"from_torch: '{name}' round-trips bit-exactly")


def check_torch_loads_tessel_mlp(d):
    """(c) PyTorch loads tessel's state dicts into the same nn.Sequential and
    reproduces tessel's outputs."""
    io = pt_load(str(d / "io.safetensors"))
    x = io["x"]

    mlp = torch.nn.Sequential(torch.nn.Linear(20, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    shared = torch.nn.Linear(32, 32)
    tied = torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.ReLU(), shared, torch.nn.ReLU(),
                               shared, torch.nn.ReLU(), torch.nn.Linear(32, 10))
    for fname, model, y_name in [("mlp.safetensors", mlp, "y"), ("mlp_tied.safetensors", tied, "y_tied")]:
        path = d / fname
        _, _, sd = expand_aliases(path, pt_load(str(path)))
        if not load_strict(model, sd, fname):
            continue
        with torch.no_grad():
            y = model(x)
        diff = float((y - io[y_name]).abs().max())
        check(y.shape == io[y_name].shape and diff <= 1e-6,
              f"{fname}: torch output matches tessel's {y_name} (max abs diff {diff:.3g})")
    check(tied[2].weight is tied[4].weight, "mlp_tied: torch module stays tied after loading")


def torch_lenet():
    """samples/lenet's relu-bn LeNet (lenet_model.h), as torch.nn spells it."""
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(1, 6, kernel_size=5, padding=2), nn.BatchNorm2d(6), nn.ReLU(), nn.MaxPool2d(2, stride=2),
        nn.Conv2d(6, 16, kernel_size=5), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2, stride=2),
        nn.Flatten(),
        nn.Linear(16 * 5 * 5, 120), nn.BatchNorm1d(120), nn.ReLU(),
        nn.Linear(120, 84), nn.BatchNorm1d(84), nn.ReLU(),
        nn.Linear(84, 10))


class TorchResidual(torch.nn.Module):
    """D2L's Residual, as samples/resnet's resnet_model.h registers it."""

    def __init__(self, input_channels, num_channels, use_1x1conv=False, strides=1):
        super().__init__()
        nn = torch.nn
        self.conv1 = nn.Conv2d(input_channels, num_channels, kernel_size=3, padding=1, stride=strides)
        self.conv2 = nn.Conv2d(num_channels, num_channels, kernel_size=3, padding=1)
        self.conv3 = nn.Conv2d(input_channels, num_channels, kernel_size=1, stride=strides) if use_1x1conv else None
        self.bn1 = nn.BatchNorm2d(num_channels)
        self.bn2 = nn.BatchNorm2d(num_channels)

    def forward(self, X):
        Y = torch.nn.functional.relu(self.bn1(self.conv1(X)))
        Y = self.bn2(self.conv2(Y))
        if self.conv3 is not None:
            X = self.conv3(X)
        return torch.nn.functional.relu(Y + X)


def torch_resnet():
    """samples/resnet's ResNet (resnet_model.h, one block per stage), as torch.nn spells it."""
    nn = torch.nn
    return nn.Sequential(
        nn.Sequential(nn.Conv2d(1, 32, kernel_size=3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                      nn.MaxPool2d(3, stride=2, padding=1)),
        nn.Sequential(TorchResidual(32, 32)),
        nn.Sequential(TorchResidual(32, 64, use_1x1conv=True, strides=2)),
        nn.Sequential(TorchResidual(64, 128, use_1x1conv=True, strides=2)),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 10))


def check_torch_loads_tessel_model(d, name, model, bn):
    """PyTorch loads tessel's NAME.safetensors (written by interop_tool
    write-NAME after 3 training steps) strictly into `model` and reproduces
    its logits in eval mode and, from the batch's statistics, in training
    mode, updating the running statistics as tessel did. `bn`: the key
    prefix of one of its batch norms."""
    io = pt_load(str(d / f"{name}_io.safetensors"))
    fname = f"{name}.safetensors"
    meta, _, sd = expand_aliases(d / fname, pt_load(str(d / fname)))
    keys = json.loads(meta.get("tessel.keys", "null"))
    check(keys == list(model.state_dict()),
          f"{fname}: tessel.keys are torch's state_dict keys in order ({keys})")
    if not load_strict(model, sd, fname):
        return
    nbt = sd[f"{bn}.num_batches_tracked"]
    check(nbt.dtype == torch.int64 and nbt.dim() == 0 and int(nbt) == 3,
          f"{fname}: {bn}.num_batches_tracked is an int64 scalar 3 ({nbt.dtype}, {nbt.shape}, {nbt})")
    ones = torch.ones_like(sd[f"{bn}.weight"])
    check(not torch.equal(sd[f"{bn}.running_var"], ones) and not torch.equal(sd[f"{bn}.weight"], ones),
          f"{fname}: batch norm statistics and affine parameters were trained")
    x = io["x"]
    for mode, y_name, tol in [("eval", "y", 1e-5), ("train", "y_train", 1e-5)]:
        model.train(mode == "train")
        with torch.no_grad():
            y = model(x)
        diff = float((y - io[y_name]).abs().max())
        check(y.shape == io[y_name].shape and diff <= tol,
              f"{name}: torch {mode}-mode logits match tessel's {y_name} (max abs diff {diff:.3g}, tolerance {tol:g})")
    # The training-mode pass updated the running statistics in both, as PyTorch does
    # (momentum 0.1, unbiased batch variance, num_batches_tracked + 1).
    after = pt_load(str(d / f"{name}_after_train_forward.safetensors"))
    for key, t in model.state_dict().items():
        if "running" not in key and "num_batches" not in key:
            continue
        a = after[key]
        if t.dtype == torch.int64:
            check(torch.equal(a, t), f"{name}: {key} after a training-mode pass: tessel {int(a)}, torch {int(t)}")
        else:
            diff = float((a - t).abs().max())
            check(diff <= 1e-5, f"{name}: {key} after a training-mode pass matches torch's (max abs diff {diff:.3g})")


def check_torch_loads_tessel_lenet(d):
    """(d) PyTorch loads tessel's LeNet (convolutions, batch norm with its
    running statistics, max pooling) and reproduces it."""
    check_torch_loads_tessel_model(d, "lenet", torch_lenet(), "1")


def check_torch_loads_tessel_resnet(d):
    """(e) PyTorch loads tessel's ResNet (residual blocks, 1x1-convolution
    shortcuts, nested batch norms, global average pooling) and reproduces it."""
    check_torch_loads_tessel_model(d, "resnet", torch_resnet(), "2.0.bn1")


def check_torch_loads_tessel_transformer(d):
    """(f) PyTorch loads tessel's TransformerEncoderLayer (gelu, norm_first,
    batch_first) and MultiheadAttention strictly into the torch.nn modules
    and reproduces their outputs, masks included."""
    nn = torch.nn
    io = pt_load(str(d / "transformer_io.safetensors"))
    layer = nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, dropout=0.1, activation="gelu",
                                       batch_first=True, norm_first=True)
    mha = nn.MultiheadAttention(16, 4, dropout=0.1)
    cases = [("encoder_layer", layer, "y",
              lambda m: m(io["x"], src_key_padding_mask=io["kpm"] > 0.5)),
             ("mha", mha, "y_mha",
              lambda m: m(io["q"], io["k"], io["v"], key_padding_mask=io["mha_kpm"] > 0.5,
                          attn_mask=io["mha_mask"] > 0.5, need_weights=False)[0])]
    for name, model, y_name, call in cases:
        fname = f"{name}.safetensors"
        meta, _, sd = expand_aliases(d / fname, pt_load(str(d / fname)))
        keys = json.loads(meta.get("tessel.keys", "null"))
        check(keys == list(model.state_dict()),
              f"{fname}: tessel.keys are torch's state_dict keys in order ({keys})")
        if not load_strict(model, sd, fname):
            continue
        model.eval()
        # With gradients on, torch takes its composite path; under no_grad
        # its fused fast path (the encoder layer's, in eval mode).
        for path, ctx in [("composite", torch.enable_grad), ("no_grad", torch.no_grad)]:
            with ctx():
                y = call(model)
            diff = float((y.detach() - io[y_name]).abs().max())
            check(y.shape == io[y_name].shape and diff <= 1e-5,
                  f"{name}: torch {path} output matches tessel's {y_name} (max abs diff {diff:.3g})")


# ---- GPT (samples/gpt) ------------------------------------------------------

class TorchCausalSelfAttention(torch.nn.Module):
    """samples/gpt's CausalSelfAttention (minGPT's), the attention written out:
    F.scaled_dot_product_attention is not in torch 1.13."""

    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.c_attn = torch.nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = torch.nn.Linear(n_embd, n_embd)
        self.n_head, self.n_embd = n_head, n_embd
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size, dtype=torch.bool)),
                             persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(~self.bias[:T, :T], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class TorchBlock(torch.nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        nn = torch.nn
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = TorchCausalSelfAttention(n_embd, n_head, block_size)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.ModuleDict(dict(c_fc=nn.Linear(n_embd, 4 * n_embd), c_proj=nn.Linear(4 * n_embd, n_embd)))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp.c_proj(torch.nn.functional.gelu(self.mlp.c_fc(self.ln_2(x))))


class TorchGPT(torch.nn.Module):
    """samples/gpt's GPT (gpt_model.h) as minGPT writes it in torch.nn, eval
    mode only (no dropout); lm_head's weight is the token embedding's."""

    def __init__(self, vocab_size, block_size, n_layer, n_head, n_embd):
        super().__init__()
        nn = torch.nn
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab_size, n_embd), wpe=nn.Embedding(block_size, n_embd),
            h=nn.ModuleList([TorchBlock(n_embd, n_head, block_size) for _ in range(n_layer)]),
            ln_f=nn.LayerNorm(n_embd)))
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # tied, as GPT-2

    def forward(self, idx):
        t = self.transformer
        x = t.wte(idx) + t.wpe(torch.arange(idx.size(1)))
        for block in t.h:
            x = block(x)
        return self.lm_head(t.ln_f(x))


def check_torch_loads_tessel_gpt(d):
    """(g) PyTorch loads tessel's GPT (samples/gpt: causal self-attention,
    GELU MLP, pre-norm blocks, lm_head tied to wte and stored once) strictly
    and reproduces its logits."""
    fname = "gpt.safetensors"
    io = pt_load(str(d / "gpt_io.safetensors"))
    model = TorchGPT(vocab_size=40, block_size=16, n_layer=2, n_head=2, n_embd=32)
    stored = pt_load(str(d / fname))
    meta, aliases, sd = expand_aliases(d / fname, stored)
    keys = json.loads(meta.get("tessel.keys", "null"))
    check(keys == list(model.state_dict()),
          f"{fname}: tessel.keys are torch's state_dict keys in order ({keys})")
    check(aliases == {"lm_head.weight": "transformer.wte.weight"} and "lm_head.weight" not in stored,
          f"{fname}: the tied lm_head.weight is stored once, as an alias of transformer.wte.weight ({aliases})")
    if not load_strict(model, sd, fname):
        return
    check(model.lm_head.weight is model.transformer.wte.weight, "gpt: torch's lm_head stays tied after loading")
    model.eval()
    with torch.no_grad():
        y = model(io["idx"])
    diff = float((y - io["logits"]).abs().max())
    check(y.shape == io["logits"].shape and diff <= 1e-5,
          f"gpt: torch logits match tessel's (max abs diff {diff:.3g}, tolerance 1e-05)")

# ---- end GPT -------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True, help="path to interop_tool")
    ap.add_argument("--dir", required=True, help="scratch folder")
    args = ap.parse_args()
    d = Path(args.dir)
    d.mkdir(parents=True, exist_ok=True)
    import safetensors
    print(f"python {sys.version.split()[0]} ({sys.executable}), numpy {np.__version__}, "
          f"torch {torch.__version__}, safetensors {safetensors.__version__}")

    run_tool(args.tool, "write-mlp", d)
    check_tessel_files_in_python(args.tool, d)
    check_python_files_in_tessel(args.tool, d)
    check_torch_loads_tessel_mlp(d)
    run_tool(args.tool, "write-lenet", d)
    check_torch_loads_tessel_lenet(d)
    run_tool(args.tool, "write-resnet", d)
    check_torch_loads_tessel_resnet(d)
    run_tool(args.tool, "write-transformer", d)
    check_torch_loads_tessel_transformer(d)
    run_tool(args.tool, "write-gpt", d)
    check_torch_loads_tessel_gpt(d)
    if failures:
        print(f"interop: {len(failures)} check(s) failed", file=sys.stderr)
        return 1
    print("interop: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
