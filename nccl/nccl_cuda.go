//go:build cuda

package nccl

// Thin bindings to NCCL (libnccl.so.2) and the few CUDA driver calls the
// device communicators need, both opened with dlopen at run time: the binary
// links neither, starts on hosts without them, and says which paths it tried
// when one is missing. NCCL's header is not needed: the handful of types used
// here are declared below with NCCL's ABI (enums are ints, ncclUniqueId is
// 128 bytes, ncclConfig_t starts with size, magic and version, and NCCL copies
// only `size` bytes of it, keeping its defaults for the fields after ours).
// The CUDA 11.8 headers of Debian's nvidia-cuda-dev supply the driver types.

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cuda.h>

typedef struct { char internal[128]; } cn_uniqueId;

// cn_config mirrors the head of ncclConfig_t (NCCL 2.17 layout: size,
// magic, version, blocking, cgaClusterSize, minCTAs, maxCTAs, netName).
typedef struct {
	size_t size;
	unsigned int magic;
	unsigned int version;
	int blocking;
	int cgaClusterSize;
	int minCTAs;
	int maxCTAs;
	const char *netName;
} cn_config;

typedef void *cn_comm;

static int (*n_ncclGetVersion)(int *);
static int (*n_ncclGetUniqueId)(cn_uniqueId *);
static int (*n_ncclCommInitRankConfig)(cn_comm *, int, cn_uniqueId, int, cn_config *);
static int (*n_ncclCommGetAsyncError)(cn_comm, int *);
static int (*n_ncclCommAbort)(cn_comm);
static int (*n_ncclAllReduce)(const void *, void *, size_t, int, int, cn_comm, void *);
static int (*n_ncclAllGather)(const void *, void *, size_t, int, cn_comm, void *);
static int (*n_ncclBroadcast)(const void *, void *, size_t, int, int, cn_comm, void *);
static const char *(*n_ncclGetErrorString)(int);
static const char *(*n_ncclGetLastError)(cn_comm);

#define CN_SYM(h, var, name) do { *(void **)(&var) = dlsym(h, name); if (!var) return name; } while (0)

static const char *cn_load_nccl(void *h) {
	CN_SYM(h, n_ncclGetVersion, "ncclGetVersion");
	CN_SYM(h, n_ncclGetUniqueId, "ncclGetUniqueId");
	CN_SYM(h, n_ncclCommInitRankConfig, "ncclCommInitRankConfig");
	CN_SYM(h, n_ncclCommGetAsyncError, "ncclCommGetAsyncError");
	CN_SYM(h, n_ncclCommAbort, "ncclCommAbort");
	CN_SYM(h, n_ncclAllReduce, "ncclAllReduce");
	CN_SYM(h, n_ncclAllGather, "ncclAllGather");
	CN_SYM(h, n_ncclBroadcast, "ncclBroadcast");
	CN_SYM(h, n_ncclGetErrorString, "ncclGetErrorString");
	CN_SYM(h, n_ncclGetLastError, "ncclGetLastError");
	return NULL;
}

enum { cn_ncclFloat32 = 7, cn_ncclSum = 0, cn_ncclInProgress = 7 };

static int cn_version(int *v) { return n_ncclGetVersion(v); }
static int cn_uniqueid(cn_uniqueId *id) { return n_ncclGetUniqueId(id); }

// cn_init starts a non-blocking communicator (config.blocking = 0): it
// returns ncclInProgress while the ranks connect, and the caller polls
// ncclCommGetAsyncError.
static int cn_init(uintptr_t *comm, int nranks, const void *id, int rank) {
	cn_config cfg;
	cn_uniqueId uid;
	cn_comm c = NULL;
	memset(&cfg, 0, sizeof cfg);
	cfg.size = sizeof cfg;
	cfg.magic = 0xcafebeef;
	cfg.version = 21700; // NCCL_VERSION(2, 17, 0): the fields above are all meaningful
	cfg.blocking = 0;
	cfg.cgaClusterSize = INT_MIN; // NCCL_CONFIG_UNDEF_INT: NCCL's default
	cfg.minCTAs = INT_MIN;
	cfg.maxCTAs = INT_MIN;
	cfg.netName = NULL;
	memcpy(&uid, id, sizeof uid);
	int r = n_ncclCommInitRankConfig(&c, nranks, uid, rank, &cfg);
	*comm = (uintptr_t)c;
	return r;
}
static int cn_async_error(uintptr_t comm, int *state) { return n_ncclCommGetAsyncError((cn_comm)comm, state); }
static int cn_abort(uintptr_t comm) { return n_ncclCommAbort((cn_comm)comm); }
static int cn_allreduce_sum_f32(uint64_t send, uint64_t recv, size_t count, uintptr_t comm, uintptr_t stream) {
	return n_ncclAllReduce((const void *)send, (void *)recv, count, cn_ncclFloat32, cn_ncclSum, (cn_comm)comm, (void *)stream);
}
static int cn_allgather_f32(uint64_t send, uint64_t recv, size_t count, uintptr_t comm, uintptr_t stream) {
	return n_ncclAllGather((const void *)send, (void *)recv, count, cn_ncclFloat32, (cn_comm)comm, (void *)stream);
}
static int cn_broadcast_f32(uint64_t send, uint64_t recv, size_t count, int root, uintptr_t comm, uintptr_t stream) {
	return n_ncclBroadcast((const void *)send, (void *)recv, count, cn_ncclFloat32, root, (cn_comm)comm, (void *)stream);
}
static const char *cn_error_string(int r) {
	const char *s = n_ncclGetErrorString ? n_ncclGetErrorString(r) : NULL;
	return s ? s : "";
}
static const char *cn_last_error(uintptr_t comm) {
	const char *s = n_ncclGetLastError ? n_ncclGetLastError((cn_comm)comm) : NULL;
	return s ? s : "";
}

// ---- CUDA driver ----
static CUresult (*d_cuInit)(unsigned int);
static CUresult (*d_cuDeviceGetCount)(int *);
static CUresult (*d_cuDeviceGet)(CUdevice *, int);
static CUresult (*d_cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
static CUresult (*d_cuCtxSetCurrent)(CUcontext);
static CUresult (*d_cuCtxGetCurrent)(CUcontext *);
static CUresult (*d_cuCtxGetDevice)(CUdevice *);
static CUresult (*d_cuMemAlloc)(CUdeviceptr *, size_t);
static CUresult (*d_cuMemFree)(CUdeviceptr);
static CUresult (*d_cuMemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
static CUresult (*d_cuMemcpyDtoH)(void *, CUdeviceptr, size_t);
static CUresult (*d_cuStreamCreate)(CUstream *, unsigned int);
static CUresult (*d_cuStreamDestroy)(CUstream);
static CUresult (*d_cuStreamQuery)(CUstream);
static CUresult (*d_cuGetErrorName)(CUresult, const char **);

static const char *cn_load_cuda(void *h) {
	CN_SYM(h, d_cuInit, "cuInit");
	CN_SYM(h, d_cuDeviceGetCount, "cuDeviceGetCount");
	CN_SYM(h, d_cuDeviceGet, "cuDeviceGet");
	CN_SYM(h, d_cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
	CN_SYM(h, d_cuCtxSetCurrent, "cuCtxSetCurrent");
	CN_SYM(h, d_cuCtxGetCurrent, "cuCtxGetCurrent");
	CN_SYM(h, d_cuCtxGetDevice, "cuCtxGetDevice");
	CN_SYM(h, d_cuMemAlloc, "cuMemAlloc_v2");
	CN_SYM(h, d_cuMemFree, "cuMemFree_v2");
	CN_SYM(h, d_cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
	CN_SYM(h, d_cuMemcpyDtoH, "cuMemcpyDtoH_v2");
	CN_SYM(h, d_cuStreamCreate, "cuStreamCreate");
	CN_SYM(h, d_cuStreamDestroy, "cuStreamDestroy_v2");
	CN_SYM(h, d_cuStreamQuery, "cuStreamQuery");
	CN_SYM(h, d_cuGetErrorName, "cuGetErrorName");
	return NULL;
}

static int cd_init(void) { return d_cuInit(0); }
static int cd_device_count(int *n) { return d_cuDeviceGetCount(n); }
// cd_set_device makes device ordinal's primary context current on the
// calling thread (retaining it; the primary context is shared with NCCL's
// CUDA runtime and with kernels/cuda).
static int cd_set_device(int ordinal) {
	CUdevice d;
	CUcontext c = NULL;
	CUresult r = d_cuDeviceGet(&d, ordinal);
	if (r != CUDA_SUCCESS) return r;
	r = d_cuDevicePrimaryCtxRetain(&c, d);
	if (r != CUDA_SUCCESS) return r;
	return d_cuCtxSetCurrent(c);
}
// cd_current_device returns the ordinal of the current context's device,
// or -1 when no context is current.
static int cd_current_device(int *ordinal) {
	CUcontext c = NULL;
	CUdevice d = -1;
	*ordinal = -1;
	CUresult r = d_cuCtxGetCurrent(&c);
	if (r != CUDA_SUCCESS || c == NULL) return r;
	r = d_cuCtxGetDevice(&d);
	*ordinal = (int)d;
	return r;
}
static int cd_alloc(uint64_t *p, size_t n) {
	CUdeviceptr d = 0;
	CUresult r = d_cuMemAlloc(&d, n);
	*p = (uint64_t)d;
	return r;
}
static int cd_free(uint64_t p) { return d_cuMemFree((CUdeviceptr)p); }
static int cd_htod_async(uint64_t dst, const void *src, size_t n, uintptr_t stream) {
	return d_cuMemcpyHtoDAsync((CUdeviceptr)dst, src, n, (CUstream)stream);
}
static int cd_dtoh(void *dst, uint64_t src, size_t n) { return d_cuMemcpyDtoH(dst, (CUdeviceptr)src, n); }
static int cd_stream_create(uintptr_t *s) {
	CUstream st = NULL;
	CUresult r = d_cuStreamCreate(&st, CU_STREAM_NON_BLOCKING);
	*s = (uintptr_t)st;
	return r;
}
static int cd_stream_destroy(uintptr_t s) { return d_cuStreamDestroy((CUstream)s); }
static int cd_stream_query(uintptr_t s) { return d_cuStreamQuery((CUstream)s); }
static const char *cd_error_name(int r) {
	const char *s = NULL;
	if (d_cuGetErrorName == NULL || d_cuGetErrorName((CUresult)r, &s) != CUDA_SUCCESS || s == NULL) return "CUDA_ERROR_UNKNOWN_CODE";
	return s;
}

static void *cn_dlopen(const char *path) { return dlopen(path, RTLD_NOW | RTLD_LOCAL); }
static const char *cn_dlerror(void) { const char *e = dlerror(); return e ? e : "unknown dlopen error"; }
*/
import "C"

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"unsafe"
)

// Library search lists (the environment variable, when set, comes first).
// On the H200 machines libnccl.so.2 exists only in the torch virtualenv.
var (
	ncclCandidates = []string{
		"libnccl.so.2",
		"/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2",
		"/usr/local/cuda/lib64/libnccl.so.2",
	}
	cudaCandidates = []string{"libcuda.so.1", "libcuda.so"}
)

var (
	ncclOnce sync.Once
	ncclPath string
	ncclErr  error

	cudaOnce sync.Once
	cudaErr  error
)

// openLibrary dlopens the first loadable of env's value and candidates and
// resolves its symbols with load; the error names every path tried.
func openLibrary(what, env string, candidates []string, load func(unsafe.Pointer) *C.char) (string, error) {
	var paths []string
	if v := os.Getenv(env); v != "" {
		paths = append(paths, v)
	}
	paths = append(paths, candidates...)
	var tried []string
	for _, p := range paths {
		cp := C.CString(p)
		h := C.cn_dlopen(cp)
		C.free(unsafe.Pointer(cp))
		if h == nil {
			tried = append(tried, fmt.Sprintf("%s (%s)", p, C.GoString(C.cn_dlerror())))
			continue
		}
		if missing := load(h); missing != nil {
			tried = append(tried, fmt.Sprintf("%s (lacks symbol %s)", p, C.GoString(missing)))
			continue
		}
		return p, nil
	}
	return "", fmt.Errorf("nccl: cannot load %s; set %s to its path; tried: %s", what, env, strings.Join(tried, "; "))
}

// loadNCCL sets NCCL_NVLS_ENABLE=0 (NVLink multicast must stay off on the
// GPU machines; NCCL reads its environment at its first call) and opens
// libnccl.so.2, once per process.
func loadNCCL() error {
	ncclOnce.Do(func() {
		if err := os.Setenv("NCCL_NVLS_ENABLE", "0"); err != nil {
			ncclErr = fmt.Errorf("nccl: setting NCCL_NVLS_ENABLE=0: %w", err)
			return
		}
		ncclPath, ncclErr = openLibrary("NCCL (libnccl.so.2)", "COHORT_NCCL_PATH", ncclCandidates,
			func(h unsafe.Pointer) *C.char { return C.cn_load_nccl(h) })
	})
	return ncclErr
}

// loadCUDA opens libcuda and initializes the driver, once per process.
func loadCUDA() error {
	cudaOnce.Do(func() {
		var path string
		path, cudaErr = openLibrary("the CUDA driver (libcuda)", "COHORT_LIBCUDA_PATH", cudaCandidates,
			func(h unsafe.Pointer) *C.char { return C.cn_load_cuda(h) })
		if cudaErr != nil {
			return
		}
		if r := C.cd_init(); r != 0 {
			cudaErr = fmt.Errorf("nccl: cuInit (%s): %w", path, cuErr("cuInit", r))
		}
	})
	return cudaErr
}

// Version returns the NCCL version code (e.g. 22809 for 2.28.9) and the
// path the library was loaded from.
func Version() (int, string, error) {
	if err := loadNCCL(); err != nil {
		return 0, "", err
	}
	var v C.int
	if r := C.cn_version(&v); r != 0 {
		return 0, ncclPath, ncclResultErr(-1, "ncclGetVersion", ncclRes(r), "")
	}
	return int(v), ncclPath, nil
}

// CUDADeviceCount returns the number of CUDA devices of this host.
func CUDADeviceCount() (int, error) {
	if err := loadCUDA(); err != nil {
		return 0, err
	}
	var n C.int
	if r := C.cd_device_count(&n); r != 0 {
		return 0, fmt.Errorf("nccl: %w", cuErr("cuDeviceGetCount", r))
	}
	return int(n), nil
}

// ncclRes is an ncclResult_t.
type ncclRes = int32

// NCCL result codes used here.
const (
	ncclSuccess    = 0
	ncclInProgress = 7
)

var ncclResultNames = []string{"ncclSuccess", "ncclUnhandledCudaError", "ncclSystemError", "ncclInternalError",
	"ncclInvalidArgument", "ncclInvalidUsage", "ncclRemoteError", "ncclInProgress", "ncclTimeout"}

// Error is a failed NCCL call (or an asynchronous error) of a device
// communicator.
type Error struct {
	Rank   int    // the rank, -1 when not rank-specific
	Call   string // the NCCL function
	Code   int    // ncclResult_t
	Detail string // ncclGetLastError, if any
}

func (e *Error) Error() string {
	name := fmt.Sprintf("ncclResult %d", e.Code)
	if e.Code >= 0 && e.Code < len(ncclResultNames) {
		name = ncclResultNames[e.Code]
	}
	s := fmt.Sprintf("nccl: %s: %s", e.Call, name)
	if e.Rank >= 0 {
		s = fmt.Sprintf("nccl: rank %d: %s: %s", e.Rank, e.Call, name)
	}
	if msg := C.GoString(C.cn_error_string(C.int(e.Code))); msg != "" {
		s += " (" + msg + ")"
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

func ncclResultErr(rank int, call string, r ncclRes, detail string) error {
	return &Error{Rank: rank, Call: call, Code: int(r), Detail: detail}
}

// CUDAError is a failed CUDA driver call of the nccl package.
type CUDAError struct {
	Call string
	Code int
}

func (e *CUDAError) Error() string {
	return fmt.Sprintf("%s: %s (%d)", e.Call, C.GoString(C.cd_error_name(C.int(e.Code))), e.Code)
}

func cuErr(call string, r C.int) error {
	if r == 0 {
		return nil
	}
	return &CUDAError{Call: call, Code: int(r)}
}

// cudaNotReady is CUDA_ERROR_NOT_READY (cuStreamQuery of a busy stream).
const cudaNotReady = 600

// ---- small CUDA helpers (device thread; context current) ----

// setDevice makes device's primary context current on the calling thread,
// which must be locked to its OS thread.
func setDevice(device int) error {
	if err := loadCUDA(); err != nil {
		return err
	}
	return cuErr(fmt.Sprintf("setting device %d current", device), C.cd_set_device(C.int(device)))
}

// currentDevice returns the device of the calling thread's current
// context, or -1 if none is current.
func currentDevice() (int, error) {
	if err := loadCUDA(); err != nil {
		return -1, err
	}
	var d C.int
	if r := C.cd_current_device(&d); r != 0 {
		return -1, cuErr("cuCtxGetCurrent/cuCtxGetDevice", r)
	}
	return int(d), nil
}

func devAlloc(bytes int) (uint64, error) {
	var p C.uint64_t
	err := cuErr(fmt.Sprintf("cuMemAlloc(%d bytes)", bytes), C.cd_alloc(&p, C.size_t(bytes)))
	return uint64(p), err
}

func devFree(p uint64) error { return cuErr("cuMemFree", C.cd_free(C.uint64_t(p))) }

// htodAsync enqueues a copy of src (host memory; pageable memory is staged
// before the call returns) to dst on stream.
func htodAsync(dst uint64, src []float32, stream uintptr) error {
	if len(src) == 0 {
		return nil
	}
	return cuErr("cuMemcpyHtoDAsync", C.cd_htod_async(C.uint64_t(dst), unsafe.Pointer(&src[0]), C.size_t(len(src)*4), C.uintptr_t(stream)))
}

// dtoh copies device memory to dst (synchronous on the legacy stream: the
// caller has waited for the stream that wrote src).
func dtoh(dst []float32, src uint64) error {
	if len(dst) == 0 {
		return nil
	}
	return cuErr("cuMemcpyDtoH", C.cd_dtoh(unsafe.Pointer(&dst[0]), C.uint64_t(src), C.size_t(len(dst)*4)))
}

func streamCreate() (uintptr, error) {
	var s C.uintptr_t
	err := cuErr("cuStreamCreate", C.cd_stream_create(&s))
	return uintptr(s), err
}

func streamDestroy(s uintptr) error {
	return cuErr("cuStreamDestroy", C.cd_stream_destroy(C.uintptr_t(s)))
}

// streamDone reports whether every operation queued on s has completed.
func streamDone(s uintptr) (bool, error) {
	switch r := C.cd_stream_query(C.uintptr_t(s)); r {
	case 0:
		return true, nil
	case cudaNotReady:
		return false, nil
	default:
		return false, cuErr("cuStreamQuery", r)
	}
}

// ---- NCCL call shims (device_cuda.go) ----

func uniqueID(id *[128]byte) error {
	if r := C.cn_uniqueid((*C.cn_uniqueId)(unsafe.Pointer(id))); r != 0 {
		return ncclResultErr(-1, "ncclGetUniqueId", ncclRes(r), "")
	}
	return nil
}

func cInit(nranks int, id *[128]byte, rank int) (uintptr, ncclRes) {
	var comm C.uintptr_t
	r := C.cn_init(&comm, C.int(nranks), unsafe.Pointer(id), C.int(rank))
	return uintptr(comm), ncclRes(r)
}

func cAsyncError(comm uintptr, st *ncclRes) ncclRes {
	var s C.int
	r := C.cn_async_error(C.uintptr_t(comm), &s)
	*st = ncclRes(s)
	return ncclRes(r)
}

func cAbort(comm uintptr) ncclRes { return ncclRes(C.cn_abort(C.uintptr_t(comm))) }

func cLastError(comm uintptr) string { return C.GoString(C.cn_last_error(C.uintptr_t(comm))) }

func cAllReduce(send, recv uint64, count int, comm, stream uintptr) ncclRes {
	return ncclRes(C.cn_allreduce_sum_f32(C.uint64_t(send), C.uint64_t(recv), C.size_t(count), C.uintptr_t(comm), C.uintptr_t(stream)))
}

func cAllGather(send, recv uint64, count int, comm, stream uintptr) ncclRes {
	return ncclRes(C.cn_allgather_f32(C.uint64_t(send), C.uint64_t(recv), C.size_t(count), C.uintptr_t(comm), C.uintptr_t(stream)))
}

func cBroadcast(send, recv uint64, count, root int, comm, stream uintptr) ncclRes {
	return ncclRes(C.cn_broadcast_f32(C.uint64_t(send), C.uint64_t(recv), C.size_t(count), C.int(root), C.uintptr_t(comm), C.uintptr_t(stream)))
}
