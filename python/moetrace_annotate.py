"""Emit moetrace's MoE annotation convention from PyTorch code.

An annotation is a host-side range whose name is ``moetrace:<kind>`` followed
by zero or more `` key=value`` fields, e.g.
``moetrace:dispatch layer=3 iter=7 mb=0 chunk=1 phase=fwd``. moetrace turns
these ranges into MoE op ranges for its report when it imports an Nsight
Systems or PyTorch-profiler trace. The convention is described in
docs/annotations.md.

This module needs only the standard library. Where torch is importable, a
range is both an NVTX range (``torch.cuda.nvtx``, when CUDA is available) and
a ``torch.profiler.record_function`` (a ``user_annotation`` in Kineto traces);
without torch, the ranges validate their names and do nothing else.

Usage with Megatron-Core, DeepSpeed or any other MoE layer. Either wrap the
calls::

    from moetrace_annotate import moe_range, step

    for it, batch in enumerate(loader):
        with step(it):                                  # moetrace:iteration iter=<it>
            loss = model(batch)
            loss.backward()

    # inside the MoE layer's forward (layer_number: the layer's index)
    with moe_range("layer", layer=layer_number, phase="fwd"):
        with moe_range("gate"):
            probs, routing_map = self.router(hidden_states)
        with moe_range("dispatch"):
            tokens, tokens_per_expert = self.token_dispatcher.token_permutation(
                hidden_states, probs, routing_map)
        with moe_range("expert"):
            expert_output, bias = self.experts(tokens, tokens_per_expert)
        with moe_range("combine"):
            output, bias = self.token_dispatcher.token_unpermutation(expert_output, bias)

or, without editing the framework, put forward hooks on its modules::

    from moetrace_annotate import annotate_module

    # Megatron-Core: the MoELayer of each transformer layer that has one
    moe_layers = [l.mlp for l in model.decoder.layers if hasattr(l.mlp, "router")]
    # DeepSpeed: its deepspeed.moe.layer.MoE modules
    #   moe_layers = [m for m in model.modules() if isinstance(m, MoE)]
    for i, moe in enumerate(moe_layers):
        annotate_module(moe, "layer", layer=i)
        inner = getattr(moe, "deepspeed_moe", moe)   # DeepSpeed's MOELayer
        gate = inner.router if hasattr(inner, "router") else inner.gate
        annotate_module(gate, "gate", layer=i)
        annotate_module(inner.experts, "expert", layer=i)

Module hooks annotate the forward pass only (including a forward that
activation checkpointing repeats during the backward pass).

``moe_range`` also works as a decorator::

    @moe_range("combine")
    def combine(self, x): ...

Public API: ``KINDS``, ``OP_KINDS``, ``STRUCTURAL_KINDS``, ``PHASES``,
``format_name``, ``parse_name``, ``moe_range``, ``step``, ``annotate_module``.
"""

import contextlib
import importlib
import re
import threading

__all__ = [
    "PREFIX",
    "DOMAIN",
    "OP_KINDS",
    "STRUCTURAL_KINDS",
    "KINDS",
    "PHASES",
    "MAX_COORDINATE",
    "format_name",
    "parse_name",
    "moe_range",
    "step",
    "annotate_module",
]

PREFIX = "moetrace:"
# NVTX domain in which names may also appear without PREFIX.
DOMAIN = "moetrace"

# Op kinds: the GPU work launched inside the range is that op.
OP_KINDS = (
    "dispatch",
    "combine",
    "expert",
    "gate",
    "permute",
    "unpermute",
    "all_reduce",
    "offload",
    "prefetch",
    "recompute",
    "plan",
    "trans",
    "agg",
    "attention",
    "other",
)
# Structural kinds: they only set coordinates for what they enclose.
STRUCTURAL_KINDS = ("layer", "iteration", "microbatch")
KINDS = OP_KINDS + STRUCTURAL_KINDS

PHASES = ("fwd", "bwd", "wgrad")

# Coordinates are stored as 32-bit signed integers by the analyzer.
MAX_COORDINATE = 2**31 - 1

# (keyword of format_name / key of parse_name's dict, key in the name), in
# the canonical order.
_FIELDS = (
    ("layer", "layer"),
    ("iteration", "iter"),
    ("micro_batch", "mb"),
    ("chunk", "chunk"),
    ("phase", "phase"),
)
_KEY_TO_ARG = {key: arg for arg, key in _FIELDS}
_KIND_SET = frozenset(KINDS)
_PHASE_SET = frozenset(PHASES)
# A non-negative decimal integer: ASCII digits, no sign, no leading zero.
_INTEGER = re.compile(r"(?:0|[1-9][0-9]*)\Z", re.ASCII)


def _check_kind(kind):
    if not isinstance(kind, str) or kind not in _KIND_SET:
        raise ValueError(
            "unknown moetrace annotation kind %r (expected one of: %s)" % (kind, ", ".join(KINDS))
        )


def _check_coordinate(arg, value):
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(
            "moetrace annotation coordinate %s must be a non-negative int, got %r (%s)"
            % (arg, value, type(value).__name__)
        )
    if value < 0 or value > MAX_COORDINATE:
        raise ValueError(
            "moetrace annotation coordinate %s must be in [0, %d], got %d"
            % (arg, MAX_COORDINATE, value)
        )


def _check_phase(value):
    if not isinstance(value, str) or value not in _PHASE_SET:
        raise ValueError(
            "unknown moetrace annotation phase %r (expected one of: %s)" % (value, ", ".join(PHASES))
        )


def format_name(kind, *, layer=None, iteration=None, micro_batch=None, chunk=None, phase=None):
    """The canonical annotation name, e.g. ``format_name("dispatch", layer=3,
    phase="fwd") == "moetrace:dispatch layer=3 phase=fwd"``.

    Fields come in the fixed order layer, iter, mb, chunk, phase; a None
    argument is left out. Raises ValueError on an unknown kind or phase and
    on a coordinate that is not an int (bool is not) in [0, 2**31 - 1].
    """
    _check_kind(kind)
    values = {
        "layer": layer,
        "iteration": iteration,
        "micro_batch": micro_batch,
        "chunk": chunk,
        "phase": phase,
    }
    parts = [PREFIX + kind]
    for arg, key in _FIELDS:
        value = values[arg]
        if value is None:
            continue
        if arg == "phase":
            _check_phase(value)
            parts.append("phase=" + value)
        else:
            _check_coordinate(arg, value)
            parts.append("%s=%d" % (key, value))
    return " ".join(parts)


def parse_name(name, domain=None):
    """Parses a range name.

    Returns None where ``name`` is not an annotation (it does not start with
    ``moetrace:``, and ``domain`` is not the NVTX domain ``"moetrace"``, in
    which the prefix may be left out). Otherwise returns a dict with ``kind``
    and those of ``layer``, ``iteration``, ``micro_batch``, ``chunk`` (ints)
    and ``phase`` (str) that the name sets; it can be passed back to
    ``format_name(**d)``. Raises ValueError for a malformed annotation.
    """
    if not isinstance(name, str):
        raise TypeError("range name must be a str, got %s" % type(name).__name__)
    if name.startswith(PREFIX):
        body = name[len(PREFIX):]
    elif domain == DOMAIN:
        body = name
    else:
        return None

    def malformed(why):
        return ValueError("malformed moetrace annotation %r: %s" % (name, why))

    tokens = body.split(" ")
    kind = tokens[0]
    if kind == "":
        raise malformed("empty kind" if len(tokens) == 1 else "empty kind or extra space")
    if kind not in _KIND_SET:
        raise malformed("unknown kind %r (expected one of: %s)" % (kind, ", ".join(KINDS)))
    result = {"kind": kind}
    for token in tokens[1:]:
        if token == "":
            raise malformed("fields must be separated by single spaces")
        key, sep, value = token.partition("=")
        if not sep:
            raise malformed("field %r is not key=value" % token)
        arg = _KEY_TO_ARG.get(key)
        if arg is None:
            raise malformed(
                "unknown key %r (expected one of: %s)" % (key, ", ".join(k for _, k in _FIELDS))
            )
        if arg in result:
            raise malformed("key %r repeated" % key)
        if arg == "phase":
            if value not in _PHASE_SET:
                raise malformed("unknown phase %r (expected one of: %s)" % (value, ", ".join(PHASES)))
            result[arg] = value
        else:
            if not _INTEGER.match(value):
                raise malformed("%s=%r is not a non-negative decimal integer" % (key, value))
            number = int(value)
            if number > MAX_COORDINATE:
                raise malformed("%s=%s is larger than %d" % (key, value, MAX_COORDINATE))
            result[arg] = number
    # Canonical key order in the dict, whatever the order in the name.
    return {k: result[k] for k in ("kind",) + tuple(a for a, _ in _FIELDS) if k in result}


def _torch():
    """torch, or None where it cannot be imported (imported on first use)."""
    try:
        import torch
    except ImportError:
        return None
    return torch


class moe_range(contextlib.ContextDecorator):
    """A range named ``format_name(kind, **coords)``, as a context manager or
    a decorator.

    On entry, where torch is importable: ``torch.cuda.nvtx.range_push(name)``
    if ``torch.cuda.is_available()``, then ``torch.profiler.record_function
    (name)`` is entered; on exit, the reverse. Without torch it does nothing.
    The name is validated on construction (ValueError, as format_name; an
    unknown keyword is a TypeError). Nested use of one instance is allowed;
    use one instance per thread (as a decorator, every call gets its own).
    """

    def __init__(self, kind, **coords):
        self.name = format_name(kind, **coords)
        self._open = []

    @classmethod
    def _from_name(cls, name):
        r = cls.__new__(cls)
        r.name = name
        r._open = []
        return r

    def _recreate_cm(self):
        return self._from_name(self.name)

    def __enter__(self):
        torch = _torch()
        nvtx = None
        record = None
        if torch is not None:
            if torch.cuda.is_available():
                nvtx = torch.cuda.nvtx
                nvtx.range_push(self.name)
            try:
                profiler = getattr(torch, "profiler", None)
                if profiler is None:
                    profiler = importlib.import_module("torch.profiler")
                record = profiler.record_function(self.name)
                record.__enter__()
            except BaseException:
                if nvtx is not None:
                    nvtx.range_pop()
                raise
        self._open.append((nvtx, record))
        return self

    def __exit__(self, exc_type, exc_value, traceback):
        nvtx, record = self._open.pop()
        try:
            if record is not None:
                record.__exit__(exc_type, exc_value, traceback)
        finally:
            if nvtx is not None:
                nvtx.range_pop()
        return False

    def __repr__(self):
        return "moe_range(%r)" % self.name


def step(iteration):
    """``moe_range("iteration", iteration=iteration)``: wrap one training step.

    It applies to all work of the process during its span, like PyTorch's
    ``ProfilerStep#N``.
    """
    return moe_range("iteration", iteration=iteration)


class _HookHandles:
    """What annotate_module returns: ``remove()`` takes both hooks off."""

    def __init__(self, name, handles):
        self.name = name
        self._handles = handles

    def remove(self):
        for h in self._handles:
            h.remove()
        self._handles = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()
        return False


def annotate_module(module, kind, **coords):
    """Registers forward pre/post hooks on ``module`` (a torch.nn.Module) that
    open a ``moe_range(kind, **coords)`` before its forward and close it
    after. Returns a handle whose ``remove()`` takes the hooks off (also a
    context manager that removes them on exit).

    The post hook is registered with ``always_call=True`` where torch
    supports it (2.1 and later), so that a forward that raises still closes
    its range. Recursive and multi-threaded forwards are handled (one stack
    of open ranges per thread).
    """
    name = format_name(kind, **coords)
    local = threading.local()

    def pre_hook(mod, args):
        stack = local.__dict__.setdefault("stack", [])
        r = moe_range._from_name(name)
        r.__enter__()
        stack.append(r)

    def post_hook(mod, args, output):
        stack = getattr(local, "stack", None)
        if stack:
            stack.pop().__exit__(None, None, None)

    pre = module.register_forward_pre_hook(pre_hook)
    try:
        try:
            post = module.register_forward_hook(post_hook, always_call=True)
        except TypeError:  # torch before 2.1: no always_call
            post = module.register_forward_hook(post_hook)
    except BaseException:
        pre.remove()
        raise
    return _HookHandles(name, [pre, post])
