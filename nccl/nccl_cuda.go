//go:build cuda

package nccl

// Thin bindings to NCCL (libnccl.so.2), opened at run time through
// nccl/dynload: the binary does not link it, and the error says which paths
// were tried when it is missing. NCCL's header is not needed: the handful of
// types used here are declared below with NCCL's ABI (enums are ints,
// ncclUniqueId is 128 bytes, ncclConfig_t starts with size, magic and
// version, and NCCL copies only `size` bytes of it, keeping its defaults for
// the fields after ours). The few CUDA driver calls the device
// communicators need come from gorgonia.org/cu, which links libcuda.

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

*/
import "C"

import (
	"fmt"
	"os"
	"sync"
	"unsafe"

	"gorgonia.org/cu"

	"cohort/nccl/dynload"
)

// ncclSpec is where NCCL is looked for ($COHORT_NCCL_PATH first, when set).
// On the H200 machines libnccl.so.2 exists only in the torch virtualenv.
var ncclSpec = dynload.Spec{What: "NCCL (libnccl.so.2)", Env: "COHORT_NCCL_PATH", Paths: []string{
	"libnccl.so.2",
	"/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2",
	"/usr/local/cuda/lib64/libnccl.so.2",
}}

var (
	ncclOnce sync.Once
	ncclPath string
	ncclErr  error
)

// loadNCCL sets NCCL_NVLS_ENABLE=0 (NVLink multicast must stay off on the
// GPU machines; NCCL reads its environment at its first call) and opens
// libnccl.so.2, once per process.
func loadNCCL() error {
	ncclOnce.Do(func() {
		if err := os.Setenv("NCCL_NVLS_ENABLE", "0"); err != nil {
			ncclErr = fmt.Errorf("nccl: setting NCCL_NVLS_ENABLE=0: %w", err)
			return
		}
		lib, err := dynload.Open(ncclSpec, func(h unsafe.Pointer) string { return C.GoString(C.cn_load_nccl(h)) })
		if err != nil {
			ncclErr = fmt.Errorf("nccl: %w", err)
			return
		}
		ncclPath = lib.Path
	})
	return ncclErr
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
	n, err := cu.NumDevices()
	if err != nil {
		return 0, fmt.Errorf("nccl: %w", cuErr("cuDeviceGetCount", err))
	}
	return n, nil
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
	Err  error // gorgonia.org/cu's error (its CUresult)
}

func (e *CUDAError) Error() string { return e.Call + ": " + e.Err.Error() }

func (e *CUDAError) Unwrap() error { return e.Err }

func cuErr(call string, err error) error {
	if err == nil {
		return nil
	}
	return &CUDAError{Call: call, Err: err}
}

// ---- small CUDA helpers (device thread; context current) ----

// Streams are kept as raw CUstream values (uintptr), the form NCCL and
// kernels/cuda's Backend.Stream use; cu.Stream is a struct holding only
// that pointer (the constants stop compiling if that changes).
const (
	_ = unsafe.Sizeof(cu.Stream{}) - unsafe.Sizeof(uintptr(0))
	_ = unsafe.Sizeof(uintptr(0)) - unsafe.Sizeof(cu.Stream{})
)

func streamOf(s uintptr) cu.Stream { return *(*cu.Stream)(unsafe.Pointer(&s)) }

// setDevice makes device's primary context current on the calling thread,
// which must be locked to its OS thread. The context is retained (it is
// shared with NCCL's CUDA runtime and with kernels/cuda).
func setDevice(device int) error {
	call := fmt.Sprintf("setting device %d current", device)
	d, err := cu.GetDevice(device)
	if err != nil {
		return cuErr(call+": cuDeviceGet", err)
	}
	ctx, err := d.RetainPrimaryCtx()
	if err != nil {
		return cuErr(call+": cuDevicePrimaryCtxRetain", err)
	}
	return cuErr(call+": cuCtxSetCurrent", cu.SetCurrentContext(ctx))
}

// currentDevice returns the device of the calling thread's current
// context, or -1 if none is current.
func currentDevice() (int, error) {
	ctx, err := cu.CurrentContext()
	if err != nil {
		return -1, cuErr("cuCtxGetCurrent", err)
	}
	if ctx == (cu.CUContext{}) {
		return -1, nil
	}
	d, err := cu.CurrentDevice()
	if err != nil {
		return -1, cuErr("cuCtxGetDevice", err)
	}
	return int(d), nil
}

func devAlloc(bytes int) (uint64, error) {
	p, err := cu.MemAlloc(int64(bytes))
	return uint64(p), cuErr(fmt.Sprintf("cuMemAlloc(%d bytes)", bytes), err)
}

func devFree(p uint64) error { return cuErr("cuMemFree", cu.MemFree(cu.DevicePtr(p))) }

// htodAsync enqueues a copy of src (host memory; pageable memory is staged
// before the call returns) to dst on stream.
func htodAsync(dst uint64, src []float32, stream uintptr) error {
	if len(src) == 0 {
		return nil
	}
	return cuErr("cuMemcpyHtoDAsync", cu.MemcpyHtoDAsync(cu.DevicePtr(dst), unsafe.Pointer(&src[0]), int64(len(src)*4), streamOf(stream)))
}

// dtoh copies device memory to dst (synchronous on the legacy stream: the
// caller has waited for the stream that wrote src).
func dtoh(dst []float32, src uint64) error {
	if len(dst) == 0 {
		return nil
	}
	return cuErr("cuMemcpyDtoH", cu.MemcpyDtoH(unsafe.Pointer(&dst[0]), cu.DevicePtr(src), int64(len(dst)*4)))
}

// streamCreate makes a non-blocking stream in the current context.
func streamCreate() (uintptr, error) {
	s, err := cu.MakeStream(cu.NonBlocking)
	if err != nil {
		return 0, cuErr("cuStreamCreate", err)
	}
	return uintptr(unsafe.Pointer(s.C())), nil
}

func streamDestroy(s uintptr) error {
	st := streamOf(s)
	return cuErr("cuStreamDestroy", st.Destroy())
}

// streamDone reports whether every operation queued on s has completed.
func streamDone(s uintptr) (bool, error) {
	switch err := streamOf(s).Query(); err {
	case nil:
		return true, nil
	case cu.NotReady:
		return false, nil
	default:
		return false, cuErr("cuStreamQuery", err)
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
