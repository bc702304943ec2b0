#!/usr/bin/env python3
"""Compile kernels/cuda/kernels/*.cu with NVRTC on a machine without a GPU.

nvrtc-check.py [ARCH [-DNAME=VALUE ...]]   (default sm_90; run from the repository root)

Needs libnvrtc and libnvrtc-builtins (Debian's libnvrtc11.2 and
libnvrtc-builtins11.8 .debs unpack with `dpkg-deb -x`; NVRTC 11.8 leaves out
the sm_90 bulk-copy GEMV, whose PTX needs NVRTC 12: Debian trixie's
libnvrtc12 and libnvrtc-builtins12.4 .debs, checked with ARCH sm_90a);
further arguments are passed to NVRTC as options; NVRTC_LIB names the
libnvrtc.so to load and LD_LIBRARY_PATH must reach the builtins. Prints
NVRTC's log with ptxas's registers, shared memory and spills per entry; the
backend's TestCompileKernels wants an empty log of warnings.

CU names the sources to compile (paths, space-separated; default all, in
order: a kernel's file needs 00_common.cu and the files it builds on), and
CUBIN a file to write the compiled image to, for cuobjdump -sass (from
trixie's nvidia-cuda-toolkit .deb, unpacked with dpkg-deb -x).
"""
import ctypes, glob, os, sys

lib = ctypes.CDLL(os.environ.get("NVRTC_LIB", "libnvrtc.so.11.2"))
files = os.environ["CU"].split() if os.environ.get("CU") else sorted(glob.glob("kernels/cuda/kernels/*.cu"))
src = "".join(open(f).read() + "\n" for f in files).encode()
prog = ctypes.c_void_p()
assert lib.nvrtcCreateProgram(ctypes.byref(prog), src, b"k.cu", 0, None, None) == 0
arch = sys.argv[1] if len(sys.argv) > 1 else "sm_90"
opts = [("--gpu-architecture=" + arch).encode(), b"-default-device", b"-std=c++17", b"--ptxas-options=-v"] + [d.encode() for d in sys.argv[2:]]
rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
n = ctypes.c_size_t()
lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
buf = ctypes.create_string_buffer(n.value)
lib.nvrtcGetProgramLog(prog, buf)
print("rc", rc)
print(buf.value.decode())
if rc == 0 and os.environ.get("CUBIN"):
    lib.nvrtcGetCUBINSize(prog, ctypes.byref(n))
    image = ctypes.create_string_buffer(n.value)
    lib.nvrtcGetCUBIN(prog, image)
    open(os.environ["CUBIN"], "wb").write(image.raw)
sys.exit(1 if rc else 0)
