#!/usr/bin/env python3
"""Compile check of the CUDA programs without a GPU, as the plugin compiles them: NVRTC to CUBIN.

The plugin compiles kernels/cuda-fmha/cuda/*.cu with NVRTC at run time on the user's machine, so without this
check a change to the CUDA sources is first compiled on the device. It compiles the programs the
engine crate itself hands NVRTC: the spliced sources and the plugin's option list per architecture,
written by `cargo run -p ragged-engine-cuda --example cuda_programs -- DIR sm_90a sm_80` (so there is no
second copy of either here), plus `--ptxas-options=-v` for NVRTC's built-in ptxas to report
registers, spills and serialization. It prints registers and spills per entry point and fails on:
  - any NVRTC or ptxas error (a static_assert of a configuration included: e.g. a persistent entry
    over sm_90's 227 KB of shared memory, which would otherwise be refused only at load);
  - any "Potential Performance Loss" (C75xx) report on an sm_90a program: ptxas serialized the
    warpgroup MMAs of that entry (too few registers, or commit groups it could not match), which
    costs far more than any change it came with;
  - a spill in the plugin's persistent forward bodies (ragged_fmha_fwd_{bf16,f16}_d{64,96,128,256,192v128}
    and ragged_fmha_fwd_e4m3_d{64,128,256} on sm_90a), whose measured configurations have none;
  - more spill than measured in the warp-specialized fused backward (ragged_fmha_bwd_{ordered,
    fused_ws}_{bf16,f16}_d{64,96,128} on sm_90a: none at D 64, 56 bytes at D 96 and 128 with the
    producer warps at 40 registers), so that a change adding spill there is measured before it
    lands.

With --cubin-dir it also writes each program's CUBIN there (ragged_fmha_fwd_sm_90a.cubin, ...), so
that a change meant to keep the machine code can be checked against the CUBINs of the commit before
it (cuobjdump -sass per function).

  python3 kernels/cuda-fmha/cuda/ci/compile_check.py --nvrtc LIBNVRTC.so --programs DIR [--jobs N] [--cubin-dir DIR]
"""

import argparse
import concurrent.futures
import ctypes
import os
import re
import sys
import tempfile

FWD = "ragged_fmha_fwd.cu"
BWD = "ragged_fmha_bwd.cu"
PAGED = "ragged_paged_decode.cu"
# (source, target, label): the plugin's programs.
PROGRAMS = [
    (FWD, "sm_90a", "forward, plugin set"),
    (FWD, "sm_80", "forward, portable set"),
    (BWD, "sm_90a", "backward, plugin set"),
    (BWD, "sm_80", "backward, portable set"),
    (PAGED, "sm_90a", "paged split-KV, plugin set"),
    (PAGED, "sm_80", "paged split-KV, portable set"),
]
NO_SPILL = re.compile(r"^ragged_fmha_fwd_((bf16|f16)_d(64|96|128|256|192v128)|e4m3_d(64|128|256))$")
# (entry pattern, spill bytes at most) on sm_90a: the measured build's report (NVRTC 12.9).
SPILL_BUDGET = [
    (re.compile(r"^ragged_fmha_bwd_(ordered|fused_ws)_(bf16|f16)_d64$"), 0),
    (re.compile(r"^ragged_fmha_bwd_(ordered|fused_ws)_(bf16|f16)_d(96|128)$"), 64),
    (re.compile(r"^ragged_fmha_bwd_(ordered|fused_ws)_(bf16|f16)_d256$"), 0),
    (re.compile(r"^ragged_fmha_bwd_(ordered|fused_ws)_(bf16|f16)_d192v128$"), 16),
]


def plugin_options(programs, arch):
    """The plugin's NVRTC options for a CUBIN of arch, as the cuda_programs example wrote them."""
    path = os.path.join(programs, f"nvrtc-options-{arch}.txt")
    with open(path, encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip()]


def _with_process_output(call):
    """(call(), what it wrote to this process's stdout and stderr). NVRTC's built-in ptxas writes
    its "Potential Performance Loss" (C75xx) reports there, not into the program log; they are
    captured at the file descriptors, since they come from C, not from Python's streams. Each
    compile runs in a worker process of its own, so nothing else writes there meanwhile."""
    with tempfile.TemporaryFile() as capture:
        sys.stdout.flush()
        sys.stderr.flush()
        saved = [os.dup(1), os.dup(2)]
        try:
            os.dup2(capture.fileno(), 1)
            os.dup2(capture.fileno(), 2)
            result = call()
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
        capture.seek(0)
        return result, capture.read().decode(errors="replace")


def nvrtc_compile(lib, programs, source, arch, cubin_path=None):
    """NVRTC's log of one program compiled to CUBIN with ptxas's -v report, or raises with it; the
    CUBIN goes to cubin_path if given."""
    with open(os.path.join(programs, source), encoding="utf-8") as f:
        text = f.read()
    opts = plugin_options(programs, arch) + ["--ptxas-options=-v"]
    prog = ctypes.c_void_p()
    if lib.nvrtcCreateProgram(ctypes.byref(prog), text.encode(), source.encode(), 0, None, None) != 0:
        raise RuntimeError("nvrtcCreateProgram failed")
    try:
        arr = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
        rc, printed = _with_process_output(lambda: lib.nvrtcCompileProgram(prog, len(opts), arr))
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, log)
        out = log.value.decode(errors="replace") + printed
        if rc != 0:
            raise RuntimeError(f"NVRTC failed ({' '.join(opts)}):\n{out[-4000:]}")
        if cubin_path is not None:
            lib.nvrtcGetCUBINSize(prog, ctypes.byref(size))
            cubin = ctypes.create_string_buffer(size.value)
            lib.nvrtcGetCUBIN(prog, cubin)
            with open(cubin_path, "wb") as f:
                f.write(cubin.raw)
        return out
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


def ptxas_report(out):
    """{entry: {"regs", "spill", "loss"}} from the ptxas -v lines of an NVRTC log. A spill line counts
    for the function whose "Function properties for NAME" line precedes it: after an entry's own
    lines ptxas lists the properties of each non-inlined function it calls, and reading those as the
    entry's once hid an entry's 180-288 bytes of spills behind its callee's 0."""
    entries, cur, props = {}, None, None
    for line in out.splitlines():
        m = re.search(r"Compiling entry function '([^']+)'", line)
        if m:
            cur = entries.setdefault(m.group(1), {"regs": 0, "spill": 0, "loss": []})
            props = None
            continue
        m = re.search(r"Function properties for (\S+)", line)
        if m:
            props = m.group(1)
            continue
        m = re.search(r"\((C75\d\d)\) Potential Performance Loss.*function '([^']+)'", line)
        if m:
            entries.setdefault(m.group(2), {"regs": 0, "spill": 0, "loss": []})["loss"].append(m.group(1))
            continue
        if cur is None:
            continue
        m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            spill = int(m.group(1)) + int(m.group(2))
            # A callee's spills run inside the entry too: they add to it, never replace it.
            cur["spill"] = cur["spill"] + spill if props not in entries else spill
        m = re.search(r"Used (\d+) registers", line)
        if m:
            cur["regs"] = int(m.group(1))
    return entries


def check(lib_path, programs, program, cubin_dir=None):
    source, arch, label = program
    lib = ctypes.CDLL(lib_path)
    cubin_path = None
    if cubin_dir is not None:
        cubin_path = os.path.join(cubin_dir, f"{os.path.splitext(source)[0]}_{arch}.cubin")
    entries = ptxas_report(nvrtc_compile(lib, programs, source, arch, cubin_path))
    problems = []
    for name, e in sorted(entries.items()):
        if e["loss"] and arch == "sm_90a":
            problems.append(
                f"{name}: ptxas serialized its warpgroup MMAs ({', '.join(e['loss'])})")
        if e["spill"] and arch == "sm_90a" and NO_SPILL.match(name):
            problems.append(f"{name}: {e['spill']} bytes of spill traffic in a persistent plugin body")
        for pattern, budget in SPILL_BUDGET:
            if arch == "sm_90a" and pattern.match(name) and e["spill"] > budget:
                problems.append(f"{name}: {e['spill']} bytes of spill traffic, over the measured {budget}")
    spilled = sum(1 for e in entries.values() if e["spill"])
    summary = (f"{label} ({source}, {arch}): {len(entries)} entry "
               f"points, max {max((e['regs'] for e in entries.values()), default=0)} registers, "
               f"{spilled} with spills")
    return summary, problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nvrtc", required=True, help="path to libnvrtc.so")
    ap.add_argument("--programs", required=True,
                    help="directory written by `cargo run -p ragged-engine-cuda --example cuda_programs -- DIR sm_90a sm_80`")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--cubin-dir", help="directory to write each program's CUBIN to")
    args = ap.parse_args()
    if args.cubin_dir:
        os.makedirs(args.cubin_dir, exist_ok=True)
    failed = False
    with concurrent.futures.ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(check, args.nvrtc, args.programs, p, args.cubin_dir) for p in PROGRAMS]
        for program, fut in zip(PROGRAMS, futures):
            try:
                summary, problems = fut.result()
            except RuntimeError as e:
                print(f"FAIL {program[2]}: {e}")
                failed = True
                continue
            print(("FAIL " if problems else "ok   ") + summary)
            for p in problems:
                print(f"     {p}")
            failed |= bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
