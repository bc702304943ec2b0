import ctypes, sys, glob
lib = ctypes.CDLL('/tmp/nvrtc/root/usr/lib/x86_64-linux-gnu/libnvrtc.so.11.2')
src = ''.join(open(f).read()+'\n' for f in sorted(glob.glob('kernels/cuda/kernels/*.cu'))).encode()
prog = ctypes.c_void_p()
assert lib.nvrtcCreateProgram(ctypes.byref(prog), src, b'k.cu', 0, None, None) == 0
opts = [('--gpu-architecture='+(sys.argv[1] if len(sys.argv)>1 else 'sm_80')).encode(), b'-default-device', b'-std=c++17', b'--ptxas-options=-v']
arr = (ctypes.c_char_p*len(opts))(*opts)
r = lib.nvrtcCompileProgram(prog, len(opts), arr)
n = ctypes.c_size_t(); lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
buf = ctypes.create_string_buffer(n.value); lib.nvrtcGetProgramLog(prog, buf)
print('rc', r); print(buf.value.decode())
