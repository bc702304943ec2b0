#!/usr/bin/env python3
"""Compare the PTX of every kernel entry between two source trees.

ptx-compare.py OLD_DIR [NEW_DIR]   (NEW_DIR default kernels/cuda/kernels)

Compiles both trees' *.cu with NVRTC (compute_90) and reports the entries
whose instructions differ once register numbers, labels, call-sequence
counters, shared-variable manglings, local depots and register-count
declarations are normalized (so a refactor that moves code into a device
function, or a change that only adds entries, reports none). Same
environment as nvrtc-check.py (NVRTC_LIB, LD_LIBRARY_PATH). To compare with
a commit: mkdir /tmp/old && for f in kernels/cuda/kernels/*.cu; do git show
REV:$f > /tmp/old/$(basename $f); done.
"""
import collections, ctypes, glob, os, re, sys

lib = ctypes.CDLL(os.environ.get("NVRTC_LIB", "libnvrtc.so.11.2"))


def ptx(d):
    src = "".join(open(f, encoding="utf-8").read() + "\n" for f in sorted(glob.glob(d + "/*.cu"))).encode()
    prog = ctypes.c_void_p()
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), src, b"k.cu", 0, None, None) == 0
    opts = [b"--gpu-architecture=compute_90", b"-default-device", b"-std=c++17"]
    if lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts)) != 0:
        sys.exit(f"{d}: NVRTC failed (run nvrtc-check.py for the log)")
    n = ctypes.c_size_t()
    lib.nvrtcGetPTXSize(prog, ctypes.byref(n))
    buf = ctypes.create_string_buffer(n.value)
    lib.nvrtcGetPTX(prog, buf)
    return buf.value.decode()


def entries(p):
    out = {}
    for m in re.finditer(r"\.entry (\w+)\(.*?\n}\n", p, re.S):
        body = re.sub(r"%(f|r|rd|p|fd|rs|h|hh)\d+", r"%\1", m.group(0))
        body = re.sub(r"\$L__\w+", "L", body)
        body = re.sub(r"callseq \d+", "callseq", body)
        body = re.sub(r"_ZZ\w+?E(\d+\w+)", r"SH_\1", body)  # shared names carry template arguments
        body = re.sub(r"__local_depot\d+", "DEPOT", body)
        body = re.sub(r"(\.reg \.\w+ \t%\w+)<\d+>", r"\1<N>", body)
        out[m.group(1)] = collections.Counter(body.splitlines())
    return out


old = entries(ptx(sys.argv[1]))
new = entries(ptx(sys.argv[2] if len(sys.argv) > 2 else "kernels/cuda/kernels"))
changed = sorted(n for n in old if n in new and old[n] != new[n])
print("entries: %d old, %d new; removed %s; added %s" % (len(old), len(new), sorted(set(old) - set(new)), sorted(set(new) - set(old))))
print("changed:", changed or "none")
