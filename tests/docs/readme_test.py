#!/usr/bin/env python3
"""Runs the code blocks of README.md as written, in order, in one folder.

The folder holds what a reader of the README has: `prof/` with one
PyTorch-profiler trace per rank (the real H200 trace of a PyTorch MoE layer,
tests/data/gpu/torch_moe_peer.json.gz) and the model's `config.json` (the
layer's shapes as that trace records them). `moetrace` and `moetrace-gui`
are the build's, on PATH.

- ```sh blocks: every command runs with bash and must exit 0, except the
  two set-up commands (`bash tools/...`), which are what CI itself runs.
  `moetrace-gui FILE` opens a window: it runs without a display
  (QT_QPA_PLATFORM=offscreen) and with `--screenshot`, so that it exits
  after drawing; where the build has no GUI the line is skipped, said so.
- ```python blocks must compile (torch is not installed where the tests
  run; the recipe is PyTorch's own API, see docs/profiling.md).

Exit status: 0 when every block ran, 1 otherwise (the failing command, its
exit status and its output are printed).
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

# Mixtral's field names (Hugging Face transformers, MixtralConfig), with the
# shapes the trace's GEMMs record: M = 4096, H = 14336, E = 8, top-2, bf16.
CONFIG_JSON = """{
  "architectures": ["MixtralForCausalLM"],
  "model_type": "mixtral",
  "hidden_size": 4096,
  "intermediate_size": 14336,
  "num_local_experts": 8,
  "num_experts_per_tok": 2,
  "num_hidden_layers": 1,
  "torch_dtype": "bfloat16"
}
"""


def blocks(text):
    """(language, body, first line number) of each fenced block."""
    out = []
    for m in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.M | re.S):
        out.append((m.group(1), m.group(2), text.count("\n", 0, m.start()) + 2))
    return out


def commands(body):
    """The shell commands of a block: a line each, with its comment, joined
    where a line ends with a backslash."""
    cmds, current = [], ""
    for line in body.splitlines():
        current += line
        if line.endswith("\\"):
            current = current[:-1] + " "
            continue
        if current.strip() and not current.lstrip().startswith("#"):
            cmds.append(current)
        current = ""
    return cmds


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--readme", required=True)
    ap.add_argument("--bin", required=True, help="folder of moetrace (and moetrace-gui)")
    ap.add_argument("--trace", required=True, help="a PyTorch-profiler trace for prof/")
    args = ap.parse_args()

    text = open(args.readme, encoding="utf-8").read()
    work = tempfile.mkdtemp(prefix="readme_test.")
    os.makedirs(os.path.join(work, "prof"))
    shutil.copy(args.trace, os.path.join(work, "prof", "rank0.pt.trace.json.gz"))
    with open(os.path.join(work, "config.json"), "w", encoding="utf-8") as f:
        f.write(CONFIG_JSON)
    env = dict(os.environ)
    env["PATH"] = os.path.abspath(args.bin) + os.pathsep + env.get("PATH", "")
    env["QT_QPA_PLATFORM"] = "offscreen"
    has_gui = os.path.exists(os.path.join(args.bin, "moetrace-gui"))

    ran = 0
    try:
        for lang, body, line in blocks(text):
            if lang == "python":
                compile(body, f"README.md:{line}", "exec")
                print(f"README.md:{line}: python block compiles")
                continue
            if lang != "sh":
                continue
            for cmd in commands(body):
                if cmd.startswith("bash tools/"):
                    print(f"README.md:{line}: set-up command, run by CI itself: {cmd.split('#')[0].strip()}")
                    continue
                if cmd.startswith("moetrace-gui "):
                    if not has_gui:
                        print(f"README.md:{line}: skipped, this build has no GUI: {cmd}")
                        continue
                    cmd = cmd.split("#")[0].strip() + " --screenshot gui.png"
                print(f"README.md:{line}: $ {cmd}", flush=True)
                p = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=work, env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                if p.returncode != 0:
                    print(p.stdout)
                    print(f"README.md:{line}: exit status {p.returncode}: {cmd}")
                    return 1
                ran += 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if ran == 0:
        print("README.md: no command found")
        return 1
    print(f"{ran} commands of README.md ran")
    return 0


if __name__ == "__main__":
    sys.exit(main())
