"""Tests of moetrace_annotate: python3 -m unittest -v test_moetrace_annotate
(run in this directory). The shared test vectors are read from
$MOETRACE_SOURCE_DIR/tests/data/annotation_names.json, else from the
checkout this file lies in."""

import importlib.util
import json
import os
import subprocess
import sys
import types
import unittest
from pathlib import Path
from unittest import mock

import moetrace_annotate as ma
from moetrace_annotate import annotate_module, format_name, moe_range, parse_name, step

HAVE_TORCH = importlib.util.find_spec("torch") is not None

COORDS = ("layer", "iteration", "micro_batch", "chunk", "phase")


def vectors_path():
    root = os.environ.get("MOETRACE_SOURCE_DIR")
    base = Path(root) if root else Path(__file__).resolve().parent.parent
    return base / "tests" / "data" / "annotation_names.json"


class SharedVectorsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(vectors_path(), encoding="utf-8") as f:
            cls.vectors = json.load(f)

    def test_shape(self):
        self.assertEqual(set(self.vectors), {"valid", "malformed", "not_annotations"})
        self.assertGreaterEqual(len(self.vectors["valid"]), 12)
        self.assertGreaterEqual(len(self.vectors["malformed"]), 10)
        self.assertGreater(len(self.vectors["not_annotations"]), 0)
        for entry in self.vectors["valid"]:
            self.assertLessEqual(set(entry), {"name", "kind", "canonical"} | set(COORDS), entry)

    def test_cover_every_kind_key_and_phase(self):
        valid = self.vectors["valid"]
        self.assertEqual({e["kind"] for e in valid}, set(ma.KINDS))
        for key in COORDS:
            self.assertTrue(any(key in e for e in valid), key)
        self.assertEqual({e["phase"] for e in valid if "phase" in e}, set(ma.PHASES))
        self.assertTrue(any(not set(COORDS) & set(e) for e in valid), "an entry without fields")
        self.assertTrue(any(set(COORDS) <= set(e) for e in valid), "an entry with every field")

    def test_valid_parse(self):
        for entry in self.vectors["valid"]:
            with self.subTest(name=entry["name"]):
                expected = {k: v for k, v in entry.items() if k not in ("name", "canonical")}
                self.assertEqual(parse_name(entry["name"]), expected)
                # The prefixed form works in any domain, "moetrace" included.
                self.assertEqual(parse_name(entry["name"], domain="moetrace"), expected)
                self.assertEqual(parse_name(entry["name"], domain="other"), expected)

    def test_valid_format(self):
        for entry in self.vectors["valid"]:
            with self.subTest(name=entry["name"]):
                coords = {k: v for k, v in entry.items() if k in COORDS}
                canonical = entry.get("canonical", entry["name"])
                self.assertEqual(format_name(entry["kind"], **coords), canonical)
                self.assertEqual(format_name(**parse_name(entry["name"])), canonical)
                if "canonical" in entry:
                    self.assertNotEqual(canonical, entry["name"])

    def test_valid_unprefixed_in_moetrace_domain(self):
        for entry in self.vectors["valid"]:
            with self.subTest(name=entry["name"]):
                bare = entry["name"][len("moetrace:"):]
                expected = {k: v for k, v in entry.items() if k not in ("name", "canonical")}
                self.assertEqual(parse_name(bare, domain="moetrace"), expected)
                self.assertIsNone(parse_name(bare))
                self.assertIsNone(parse_name(bare, domain="other"))

    def test_malformed(self):
        for name in self.vectors["malformed"]:
            with self.subTest(name=name):
                self.assertTrue(name.startswith("moetrace:"))
                with self.assertRaises(ValueError) as cm:
                    parse_name(name)
                self.assertIn(repr(name), str(cm.exception))
                with self.assertRaises(ValueError):
                    parse_name(name[len("moetrace:"):], domain="moetrace")

    def test_not_annotations(self):
        for name in self.vectors["not_annotations"]:
            with self.subTest(name=name):
                self.assertIsNone(parse_name(name))
                self.assertIsNone(parse_name(name, domain="other"))


class FormatTest(unittest.TestCase):
    def test_kind_only(self):
        for kind in ma.KINDS:
            self.assertEqual(format_name(kind), "moetrace:" + kind)

    def test_fixed_order_and_omitted_none(self):
        self.assertEqual(
            format_name("dispatch", phase="fwd", chunk=1, micro_batch=0, iteration=7, layer=3),
            "moetrace:dispatch layer=3 iter=7 mb=0 chunk=1 phase=fwd",
        )
        self.assertEqual(format_name("expert", layer=None, chunk=2), "moetrace:expert chunk=2")
        self.assertEqual(format_name("combine", micro_batch=0), "moetrace:combine mb=0")
        self.assertEqual(format_name("gate", phase="wgrad"), "moetrace:gate phase=wgrad")
        self.assertEqual(format_name("layer", layer=2**31 - 1), "moetrace:layer layer=2147483647")

    def test_kinds(self):
        self.assertEqual(len(ma.KINDS), 18)
        self.assertEqual(set(ma.OP_KINDS) & set(ma.STRUCTURAL_KINDS), set())
        self.assertEqual(ma.STRUCTURAL_KINDS, ("layer", "iteration", "microbatch"))

    def test_unknown_kind(self):
        for kind in ("unknownkind", "Dispatch", "expert_ffn", "", " dispatch", "dispatch layer=1", None, 3):
            with self.subTest(kind=kind):
                with self.assertRaisesRegex(ValueError, "unknown moetrace annotation kind"):
                    format_name(kind)

    def test_bad_coordinates(self):
        for arg in ("layer", "iteration", "micro_batch", "chunk"):
            for value in (-1, True, False, 1.0, "1", 2**31, 10**30, [1]):
                with self.subTest(arg=arg, value=value):
                    with self.assertRaisesRegex(ValueError, arg):
                        format_name("dispatch", **{arg: value})

    def test_error_messages(self):
        with self.assertRaisesRegex(ValueError, r"layer must be in \[0, 2147483647\], got -1"):
            format_name("dispatch", layer=-1)
        with self.assertRaisesRegex(ValueError, r"iteration must be a non-negative int, got True \(bool\)"):
            format_name("dispatch", iteration=True)
        with self.assertRaisesRegex(ValueError, r"unknown moetrace annotation phase 'sideways'"):
            format_name("dispatch", phase="sideways")

    def test_bad_phase(self):
        for phase in ("sideways", "FWD", "forward", "", "fwd ", 0, True):
            with self.subTest(phase=phase):
                with self.assertRaisesRegex(ValueError, "phase"):
                    format_name("dispatch", phase=phase)

    def test_keywords_only(self):
        with self.assertRaises(TypeError):
            format_name("dispatch", 3)
        with self.assertRaises(TypeError):
            format_name("dispatch", iter=3)
        with self.assertRaises(TypeError):
            format_name("dispatch", mb=3)


class ParseTest(unittest.TestCase):
    def test_parse(self):
        self.assertEqual(parse_name("moetrace:gate"), {"kind": "gate"})
        self.assertEqual(
            parse_name("moetrace:dispatch layer=3 iter=7 mb=0 chunk=1 phase=fwd"),
            {"kind": "dispatch", "layer": 3, "iteration": 7, "micro_batch": 0, "chunk": 1, "phase": "fwd"},
        )
        # Any field order; the dict comes in the canonical order.
        parsed = parse_name("moetrace:combine phase=bwd layer=2")
        self.assertEqual(list(parsed.items()), [("kind", "combine"), ("layer", 2), ("phase", "bwd")])

    def test_domain(self):
        self.assertEqual(parse_name("expert layer=1", domain="moetrace"), {"kind": "expert", "layer": 1})
        self.assertEqual(parse_name("moetrace:expert layer=1", domain="moetrace"), {"kind": "expert", "layer": 1})
        self.assertIsNone(parse_name("expert layer=1", domain="Moetrace"))
        self.assertIsNone(parse_name("expert layer=1", domain=""))
        with self.assertRaises(ValueError):
            parse_name("my range", domain="moetrace")
        with self.assertRaises(ValueError):
            parse_name("", domain="moetrace")

    def test_not_annotations(self):
        for name in ("aten::mm", "ProfilerStep#3", "dispatch", "", "moetrace", "MOETRACE:gate"):
            self.assertIsNone(parse_name(name))

    def test_malformed_reasons(self):
        cases = {
            "moetrace:": "empty kind",
            "moetrace:unknownkind": "unknown kind 'unknownkind'",
            "moetrace:dispatch  layer=1": "single spaces",
            "moetrace:dispatch ": "single spaces",
            "moetrace:dispatch layer": "not key=value",
            "moetrace:dispatch foo=1": "unknown key 'foo'",
            "moetrace:dispatch layer=1 layer=2": "key 'layer' repeated",
            "moetrace:dispatch phase=sideways": "unknown phase 'sideways'",
            "moetrace:dispatch layer=-1": "not a non-negative decimal integer",
            "moetrace:dispatch layer=01": "not a non-negative decimal integer",
            "moetrace:dispatch layer=\u0663": "not a non-negative decimal integer",
            "moetrace:dispatch layer=2147483648": "larger than 2147483647",
        }
        for name, why in cases.items():
            with self.subTest(name=name):
                with self.assertRaises(ValueError) as cm:
                    parse_name(name)
                self.assertIn("malformed moetrace annotation", str(cm.exception))
                self.assertIn(why, str(cm.exception))

    def test_type(self):
        with self.assertRaises(TypeError):
            parse_name(b"moetrace:gate")
        with self.assertRaises(TypeError):
            parse_name(None)


class RoundTripTest(unittest.TestCase):
    def test_all_kinds_and_field_subsets(self):
        values = {"layer": 3, "iteration": 70, "micro_batch": 0, "chunk": 12, "phase": "wgrad"}
        for kind in ma.KINDS:
            for mask in range(32):
                coords = {k: v for i, (k, v) in enumerate(values.items()) if mask >> i & 1}
                name = format_name(kind, **coords)
                with self.subTest(name=name):
                    parsed = parse_name(name)
                    self.assertEqual(parsed, dict(kind=kind, **coords))
                    self.assertEqual(format_name(**parsed), name)
                    self.assertEqual(parse_name(name[len("moetrace:"):], domain="moetrace"), parsed)

    def test_phases(self):
        for phase in ma.PHASES:
            self.assertEqual(parse_name(format_name("layer", phase=phase)), {"kind": "layer", "phase": phase})


class NoTorchTest(unittest.TestCase):
    """moe_range and annotate_module where torch cannot be imported."""

    def setUp(self):
        patcher = mock.patch.dict(sys.modules, {"torch": None})
        patcher.start()
        self.addCleanup(patcher.stop)

    def test_torch_absent(self):
        with self.assertRaises(ImportError):
            import torch  # noqa: F401
        self.assertIsNone(ma._torch())

    def test_context_manager(self):
        r = moe_range("dispatch", layer=3, phase="fwd")
        self.assertEqual(r.name, "moetrace:dispatch layer=3 phase=fwd")
        with r as entered:
            self.assertIs(entered, r)
            with r:  # nested use of one instance
                pass
        with moe_range("gate"):
            pass

    def test_validates(self):
        with self.assertRaises(ValueError):
            moe_range("unknownkind")
        with self.assertRaises(ValueError):
            moe_range("dispatch", layer=-1)
        with self.assertRaises(ValueError):
            moe_range("dispatch", phase="sideways")
        with self.assertRaises(TypeError):
            moe_range("dispatch", mb=1)
        with self.assertRaises(ValueError):
            step(-1)
        with self.assertRaises(ValueError):
            step("3")
        with self.assertRaises(ValueError):
            step(True)

    def test_exception_propagates(self):
        with self.assertRaisesRegex(RuntimeError, "boom"):
            with moe_range("combine"):
                raise RuntimeError("boom")

    def test_decorator(self):
        @moe_range("expert", layer=1)
        def f(n):
            return n if n == 0 else f(n - 1) + 1

        self.assertEqual(f(3), 3)
        self.assertEqual(f(0), 0)

    def test_step(self):
        s = step(7)
        self.assertIsInstance(s, moe_range)
        self.assertEqual(s.name, "moetrace:iteration iter=7")
        with s:
            pass

    def test_annotate_module_fake(self):
        module = _FakeModule()
        handle = annotate_module(module, "expert", layer=2)
        self.assertEqual(handle.name, "moetrace:expert layer=2")
        self.assertEqual(module(5), 5)
        handle.remove()
        self.assertEqual(module.pre_hooks, [])
        self.assertEqual(module.post_hooks, [])
        with self.assertRaises(ValueError):
            annotate_module(_FakeModule(), "expert", layer=-2)

    def test_import_does_not_import_torch(self):
        here = Path(__file__).resolve().parent
        code = "import sys, moetrace_annotate; print('torch' in sys.modules)"
        out = subprocess.run([sys.executable, "-c", code], cwd=here, capture_output=True, text=True, check=True)
        self.assertEqual(out.stdout.strip(), "False")


class _FakeHandle:
    def __init__(self, hooks, hook):
        self.hooks, self.hook = hooks, hook

    def remove(self):
        if self.hook in self.hooks:
            self.hooks.remove(self.hook)


class _FakeModule:
    """The hook registration API of torch.nn.Module, enough for annotate_module."""

    def __init__(self, always_call_supported=True, forward=None):
        self.pre_hooks, self.post_hooks = [], []
        self.always_call_supported = always_call_supported
        self.always_call = []
        self.forward = forward or (lambda x: x)

    def register_forward_pre_hook(self, hook):
        self.pre_hooks.append(hook)
        return _FakeHandle(self.pre_hooks, hook)

    def register_forward_hook(self, hook, **kwargs):
        if kwargs and not self.always_call_supported:
            raise TypeError("unexpected keyword argument %r" % next(iter(kwargs)))
        self.always_call.append(kwargs.get("always_call", False))
        self.post_hooks.append(hook)
        return _FakeHandle(self.post_hooks, hook)

    def __call__(self, *args):
        for h in list(self.pre_hooks):
            h(self, args)
        try:
            out = self.forward(*args)
        except Exception:
            for h, always in zip(list(self.post_hooks), self.always_call):
                if always:
                    h(self, args, None)
            raise
        for h in list(self.post_hooks):
            h(self, args, out)
        return out


class _FakeTorch:
    """A stand-in for torch that logs what moe_range does with it."""

    def __init__(self, cuda_available):
        self.log = []
        log = self.log

        class RecordFunction:
            fail = False

            def __init__(self, name):
                self.name = name

            def __enter__(self):
                if RecordFunction.fail:
                    raise RuntimeError("record_function failed")
                log.append(("enter", self.name))

            def __exit__(self, *exc):
                log.append(("exit", self.name, exc[0]))

        self.RecordFunction = RecordFunction
        nvtx = types.SimpleNamespace(
            range_push=lambda name: log.append(("push", name)),
            range_pop=lambda: log.append(("pop",)),
        )
        self.module = types.ModuleType("torch")
        self.module.cuda = types.SimpleNamespace(is_available=lambda: cuda_available, nvtx=nvtx)
        self.module.profiler = types.SimpleNamespace(record_function=RecordFunction)


class FakeTorchTest(unittest.TestCase):
    """What moe_range calls in torch (a stand-in, so that it runs everywhere)."""

    def use(self, cuda_available):
        fake = _FakeTorch(cuda_available)
        patcher = mock.patch.dict(sys.modules, {"torch": fake.module})
        patcher.start()
        self.addCleanup(patcher.stop)
        return fake

    def test_cuda_available(self):
        fake = self.use(True)
        with moe_range("dispatch", layer=3):
            fake.log.append("body")
        n = "moetrace:dispatch layer=3"
        self.assertEqual(fake.log, [("push", n), ("enter", n), "body", ("exit", n, None), ("pop",)])

    def test_no_cuda(self):
        fake = self.use(False)
        with step(4):
            pass
        n = "moetrace:iteration iter=4"
        self.assertEqual(fake.log, [("enter", n), ("exit", n, None)])

    def test_nested_and_exception(self):
        fake = self.use(True)
        outer = moe_range("layer", layer=1, phase="bwd")
        with self.assertRaises(KeyError):
            with outer:
                with moe_range("combine", micro_batch=2):
                    raise KeyError("x")
        o, i = "moetrace:layer layer=1 phase=bwd", "moetrace:combine mb=2"
        self.assertEqual(
            fake.log,
            [("push", o), ("enter", o), ("push", i), ("enter", i),
             ("exit", i, KeyError), ("pop",), ("exit", o, KeyError), ("pop",)],
        )

    def test_record_function_failure_pops_nvtx(self):
        fake = self.use(True)
        fake.RecordFunction.fail = True
        with self.assertRaisesRegex(RuntimeError, "record_function failed"):
            with moe_range("gate"):
                pass
        self.assertEqual(fake.log, [("push", "moetrace:gate"), ("pop",)])

    def test_decorator_fresh_per_call(self):
        fake = self.use(False)

        @moe_range("expert")
        def f(n):
            return 0 if n == 0 else f(n - 1) + 1

        self.assertEqual(f(2), 2)
        n = "moetrace:expert"
        self.assertEqual(fake.log, [("enter", n)] * 3 + [("exit", n, None)] * 3)

    def test_annotate_module(self):
        fake = self.use(True)
        module = _FakeModule(forward=lambda x: fake.log.append("forward") or x)
        handle = annotate_module(module, "gate", layer=0)
        self.assertEqual(module.always_call, [True])
        module(1)
        n = "moetrace:gate layer=0"
        self.assertEqual(fake.log, [("push", n), ("enter", n), "forward", ("exit", n, None), ("pop",)])
        fake.log.clear()
        handle.remove()
        module(1)
        self.assertEqual(fake.log, ["forward"])

    def test_annotate_module_exception_closes_range(self):
        fake = self.use(False)

        def forward(x):
            raise ValueError("bad input")

        module = _FakeModule(forward=forward)
        with annotate_module(module, "expert"):
            with self.assertRaisesRegex(ValueError, "bad input"):
                module(1)
        self.assertEqual(module.pre_hooks, [])
        n = "moetrace:expert"
        self.assertEqual(fake.log, [("enter", n), ("exit", n, None)])

    def test_annotate_module_old_torch(self):
        fake = self.use(False)
        module = _FakeModule(always_call_supported=False)
        annotate_module(module, "combine", chunk=1)
        self.assertEqual(module.always_call, [False])
        module(1)
        n = "moetrace:combine chunk=1"
        self.assertEqual(fake.log, [("enter", n), ("exit", n, None)])

    def test_annotate_module_reentrant(self):
        fake = self.use(False)
        calls = []
        module = _FakeModule()
        module.forward = lambda n: calls.append(n) or (module(n - 1) if n else 0)
        annotate_module(module, "other")
        module(2)
        n = "moetrace:other"
        self.assertEqual(fake.log, [("enter", n)] * 3 + [("exit", n, None)] * 3)


@unittest.skipUnless(HAVE_TORCH, "torch is not installed")
class TorchTest(unittest.TestCase):
    """The hooks on a real torch.nn.Linear."""

    def setUp(self):
        import torch

        self.torch = torch
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(4, 3)
        self.x = torch.randn(2, 4)

    def profiled_names(self, fn):
        torch = self.torch
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            fn()
        return [e.name for e in prof.events()]

    def test_hooks_record_function(self):
        handle = annotate_module(self.linear, "expert", layer=2, phase="fwd")
        name = "moetrace:expert layer=2 phase=fwd"
        expected = self.linear.weight.detach().clone()
        names = self.profiled_names(lambda: self.linear(self.x))
        self.assertEqual(names.count(name), 1)
        self.assertEqual(parse_name(name), {"kind": "expert", "layer": 2, "phase": "fwd"})
        self.assertTrue(self.torch.equal(self.linear.weight, expected))
        handle.remove()
        names = self.profiled_names(lambda: self.linear(self.x))
        self.assertNotIn(name, names)

    def test_hooks_nvtx(self):
        torch = self.torch
        handle = annotate_module(self.linear, "gate", layer=0)
        with mock.patch.object(torch.cuda, "is_available", return_value=True), \
                mock.patch.object(torch.cuda.nvtx, "range_push") as push, \
                mock.patch.object(torch.cuda.nvtx, "range_pop") as pop:
            out = self.linear(self.x)
            out.sum().backward()
        push.assert_called_once_with("moetrace:gate layer=0")
        pop.assert_called_once_with()
        handle.remove()

    def test_output_unchanged(self):
        reference = self.linear(self.x)
        with annotate_module(self.linear, "expert"):
            annotated = self.linear(self.x)
        self.assertTrue(self.torch.equal(reference, annotated))

    def test_moe_range_and_step(self):
        def run():
            with step(3):
                with moe_range("layer", layer=1, phase="fwd"):
                    with moe_range("dispatch", micro_batch=0):
                        self.linear(self.x)

        names = self.profiled_names(run)
        for n in ("moetrace:iteration iter=3", "moetrace:layer layer=1 phase=fwd", "moetrace:dispatch mb=0"):
            self.assertEqual(names.count(n), 1, n)

    def test_module_exception(self):
        handle = annotate_module(self.linear, "combine")
        with self.assertRaises(RuntimeError):
            self.linear(self.torch.randn(2, 5))  # wrong shape
        handle.remove()


if __name__ == "__main__":
    unittest.main()
