//go:build cuda

package cuda

// This file is the package's only cgo: thin bindings to the CUDA driver API
// (libcuda), NVRTC and cuBLASLt. Every library is opened with dlopen at run
// time, so the binary links none of them, starts on hosts without a GPU, and
// works with whichever CUDA major version the host has (the sonames differ
// between CUDA 11, 12 and 13). The CUDA 11.8 headers of Debian's
// nvidia-cuda-dev supply the types; the entry points used here kept their
// ABI through CUDA 13.

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cuda.h>
#include <nvrtc.h>
#include <cublasLt.h>

// ---- libcuda ----
static CUresult (*p_cuInit)(unsigned int);
static CUresult (*p_cuDriverGetVersion)(int *);
static CUresult (*p_cuDeviceGetCount)(int *);
static CUresult (*p_cuDeviceGet)(CUdevice *, int);
static CUresult (*p_cuDeviceGetAttribute)(int *, CUdevice_attribute, CUdevice);
static CUresult (*p_cuDeviceGetName)(char *, int, CUdevice);
static CUresult (*p_cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
static CUresult (*p_cuDevicePrimaryCtxRelease)(CUdevice);
static CUresult (*p_cuCtxSetCurrent)(CUcontext);
static CUresult (*p_cuCtxSynchronize)(void);
static CUresult (*p_cuMemAlloc)(CUdeviceptr *, size_t);
static CUresult (*p_cuMemFree)(CUdeviceptr);
static CUresult (*p_cuMemGetInfo)(size_t *, size_t *);
static CUresult (*p_cuMemHostAlloc)(void **, size_t, unsigned int);
static CUresult (*p_cuMemFreeHost)(void *);
static CUresult (*p_cuMemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
static CUresult (*p_cuMemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
static CUresult (*p_cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
static CUresult (*p_cuMemsetD32Async)(CUdeviceptr, unsigned int, size_t, CUstream);
static CUresult (*p_cuStreamCreate)(CUstream *, unsigned int);
static CUresult (*p_cuStreamDestroy)(CUstream);
static CUresult (*p_cuStreamSynchronize)(CUstream);
static CUresult (*p_cuStreamBeginCapture)(CUstream, CUstreamCaptureMode);
static CUresult (*p_cuStreamEndCapture)(CUstream, CUgraph *);
static CUresult (*p_cuGraphInstantiateWithFlags)(CUgraphExec *, CUgraph, unsigned long long);
static CUresult (*p_cuGraphLaunch)(CUgraphExec, CUstream);
static CUresult (*p_cuGraphExecDestroy)(CUgraphExec);
static CUresult (*p_cuGraphDestroy)(CUgraph);
static CUresult (*p_cuGraphGetNodes)(CUgraph, CUgraphNode *, size_t *);

// cw_stream is the calling thread's stream: every copy, memset, launch and
// GEMM below is ordered on it. Each rank's backend runs on one OS thread
// and sets it when it binds its context (cw_set_stream).
static __thread CUstream cw_stream = NULL;
static void cw_set_stream(uintptr_t s) { cw_stream = (CUstream)s; }
static CUresult (*p_cuModuleLoadData)(CUmodule *, const void *);
static CUresult (*p_cuModuleUnload)(CUmodule);
static CUresult (*p_cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
static CUresult (*p_cuLaunchKernel)(CUfunction, unsigned int, unsigned int, unsigned int,
	unsigned int, unsigned int, unsigned int, unsigned int, CUstream, void **, void **);
static CUresult (*p_cuGetErrorName)(CUresult, const char **);
static CUresult (*p_cuGetErrorString)(CUresult, const char **);

#define COHORT_SYM(h, var, name) do { *(void **)(&var) = dlsym(h, name); if (!var) return name; } while (0)

// cw_load_cuda resolves the driver entry points; it returns the first
// missing symbol's name, or NULL.
static const char *cw_load_cuda(void *h) {
	COHORT_SYM(h, p_cuInit, "cuInit");
	COHORT_SYM(h, p_cuDriverGetVersion, "cuDriverGetVersion");
	COHORT_SYM(h, p_cuDeviceGetCount, "cuDeviceGetCount");
	COHORT_SYM(h, p_cuDeviceGet, "cuDeviceGet");
	COHORT_SYM(h, p_cuDeviceGetAttribute, "cuDeviceGetAttribute");
	COHORT_SYM(h, p_cuDeviceGetName, "cuDeviceGetName");
	COHORT_SYM(h, p_cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
	COHORT_SYM(h, p_cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
	COHORT_SYM(h, p_cuCtxSetCurrent, "cuCtxSetCurrent");
	COHORT_SYM(h, p_cuCtxSynchronize, "cuCtxSynchronize");
	COHORT_SYM(h, p_cuMemAlloc, "cuMemAlloc_v2");
	COHORT_SYM(h, p_cuMemFree, "cuMemFree_v2");
	COHORT_SYM(h, p_cuMemGetInfo, "cuMemGetInfo_v2");
	COHORT_SYM(h, p_cuMemHostAlloc, "cuMemHostAlloc");
	COHORT_SYM(h, p_cuMemFreeHost, "cuMemFreeHost");
	COHORT_SYM(h, p_cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
	COHORT_SYM(h, p_cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
	COHORT_SYM(h, p_cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2");
	COHORT_SYM(h, p_cuMemsetD32Async, "cuMemsetD32Async");
	COHORT_SYM(h, p_cuStreamCreate, "cuStreamCreate");
	COHORT_SYM(h, p_cuStreamDestroy, "cuStreamDestroy_v2");
	COHORT_SYM(h, p_cuStreamSynchronize, "cuStreamSynchronize");
	COHORT_SYM(h, p_cuStreamBeginCapture, "cuStreamBeginCapture_v2");
	COHORT_SYM(h, p_cuStreamEndCapture, "cuStreamEndCapture");
	COHORT_SYM(h, p_cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags");
	COHORT_SYM(h, p_cuGraphLaunch, "cuGraphLaunch");
	COHORT_SYM(h, p_cuGraphExecDestroy, "cuGraphExecDestroy");
	COHORT_SYM(h, p_cuGraphDestroy, "cuGraphDestroy");
	COHORT_SYM(h, p_cuGraphGetNodes, "cuGraphGetNodes");
	COHORT_SYM(h, p_cuModuleLoadData, "cuModuleLoadData");
	COHORT_SYM(h, p_cuModuleUnload, "cuModuleUnload");
	COHORT_SYM(h, p_cuModuleGetFunction, "cuModuleGetFunction");
	COHORT_SYM(h, p_cuLaunchKernel, "cuLaunchKernel");
	COHORT_SYM(h, p_cuGetErrorName, "cuGetErrorName");
	COHORT_SYM(h, p_cuGetErrorString, "cuGetErrorString");
	return NULL;
}

static int cw_cuInit(void) { return p_cuInit(0); }
static int cw_cuDriverGetVersion(int *v) { return p_cuDriverGetVersion(v); }
static int cw_cuDeviceGetCount(int *n) { return p_cuDeviceGetCount(n); }
static int cw_cuDeviceGet(int *dev, int ordinal) {
	CUdevice d;
	CUresult r = p_cuDeviceGet(&d, ordinal);
	*dev = (int)d;
	return r;
}
static int cw_cuDeviceGetAttribute(int *v, int attr, int dev) {
	return p_cuDeviceGetAttribute(v, (CUdevice_attribute)attr, (CUdevice)dev);
}
static int cw_cuDeviceGetName(char *name, int n, int dev) { return p_cuDeviceGetName(name, n, (CUdevice)dev); }
static int cw_cuDevicePrimaryCtxRetain(uintptr_t *ctx, int dev) {
	CUcontext c = NULL;
	CUresult r = p_cuDevicePrimaryCtxRetain(&c, (CUdevice)dev);
	*ctx = (uintptr_t)c;
	return r;
}
static int cw_cuDevicePrimaryCtxRelease(int dev) { return p_cuDevicePrimaryCtxRelease((CUdevice)dev); }
static int cw_cuCtxSetCurrent(uintptr_t ctx) { return p_cuCtxSetCurrent((CUcontext)ctx); }
static int cw_cuCtxSynchronize(void) { return p_cuCtxSynchronize(); }
static int cw_cuMemAlloc(uint64_t *ptr, size_t n) {
	CUdeviceptr p = 0;
	CUresult r = p_cuMemAlloc(&p, n);
	*ptr = (uint64_t)p;
	return r;
}
static int cw_cuMemFree(uint64_t ptr) { return p_cuMemFree((CUdeviceptr)ptr); }
static int cw_cuMemGetInfo(size_t *free, size_t *total) { return p_cuMemGetInfo(free, total); }
// The blocking copies are ordered on the thread's stream and wait for it.
static int cw_cuMemcpyHtoD(uint64_t dst, const void *src, size_t n) {
	CUresult r = p_cuMemcpyHtoDAsync((CUdeviceptr)dst, src, n, cw_stream);
	return r != CUDA_SUCCESS ? r : p_cuStreamSynchronize(cw_stream);
}
static int cw_cuMemcpyDtoH(void *dst, uint64_t src, size_t n) {
	CUresult r = p_cuMemcpyDtoHAsync(dst, (CUdeviceptr)src, n, cw_stream);
	return r != CUDA_SUCCESS ? r : p_cuStreamSynchronize(cw_stream);
}
static int cw_cuMemcpyDtoD(uint64_t dst, uint64_t src, size_t n) { return p_cuMemcpyDtoDAsync((CUdeviceptr)dst, (CUdeviceptr)src, n, cw_stream); }
static int cw_cuMemsetD32(uint64_t dst, unsigned int v, size_t n) { return p_cuMemsetD32Async((CUdeviceptr)dst, v, n, cw_stream); }
static int cw_cuStreamCreate(uintptr_t *s) {
	CUstream st = NULL;
	CUresult r = p_cuStreamCreate(&st, CU_STREAM_NON_BLOCKING);
	*s = (uintptr_t)st;
	return r;
}
static int cw_cuStreamDestroy(uintptr_t s) { return p_cuStreamDestroy((CUstream)s); }
static int cw_cuStreamSynchronize(void) { return p_cuStreamSynchronize(cw_stream); }
// Capture is relaxed: other threads (other ranks) may call unsafe APIs such
// as cuMemAlloc while this one captures.
static int cw_begin_capture(void) { return p_cuStreamBeginCapture(cw_stream, CU_STREAM_CAPTURE_MODE_RELAXED); }
static int cw_end_capture(uintptr_t *exec, size_t *nodes) {
	CUgraph g = NULL;
	CUgraphExec e = NULL;
	*exec = 0; *nodes = 0;
	CUresult r = p_cuStreamEndCapture(cw_stream, &g);
	if (r != CUDA_SUCCESS) return r;
	p_cuGraphGetNodes(g, NULL, nodes);
	r = p_cuGraphInstantiateWithFlags(&e, g, 0);
	p_cuGraphDestroy(g);
	*exec = (uintptr_t)e;
	return r;
}
static int cw_graph_launch(uintptr_t exec) { return p_cuGraphLaunch((CUgraphExec)exec, cw_stream); }
static int cw_graph_destroy(uintptr_t exec) { return p_cuGraphExecDestroy((CUgraphExec)exec); }
static int cw_cuMemHostAlloc(void **p, size_t n) { return p_cuMemHostAlloc(p, n, 0); }
static int cw_cuMemFreeHost(void *p) { return p_cuMemFreeHost(p); }
// cw_cuMemcpyHtoDAsync copies on the thread's stream (like cw_launch), so
// the copy is ordered with every kernel launch.
static int cw_cuMemcpyHtoDAsync(uint64_t dst, const void *src, size_t n) {
	return p_cuMemcpyHtoDAsync((CUdeviceptr)dst, src, n, cw_stream);
}
static int cw_cuModuleLoadData(uintptr_t *mod, const void *image) {
	CUmodule m = NULL;
	CUresult r = p_cuModuleLoadData(&m, image);
	*mod = (uintptr_t)m;
	return r;
}
static int cw_cuModuleUnload(uintptr_t mod) { return p_cuModuleUnload((CUmodule)mod); }
static int cw_cuModuleGetFunction(uintptr_t *fn, uintptr_t mod, const char *name) {
	CUfunction f = NULL;
	CUresult r = p_cuModuleGetFunction(&f, (CUmodule)mod, name);
	*fn = (uintptr_t)f;
	return r;
}

// cw_launch launches fn on the thread's stream. Every parameter is
// passed in an 8-byte slot of args; the driver reads as many bytes as the
// kernel's parameter has, so 4-byte ints and floats sit in the low half of
// their slot (x86-64 and arm64 are little-endian).
static int cw_launch(uintptr_t fn, unsigned gx, unsigned gy, unsigned gz,
		unsigned bx, unsigned by, unsigned bz, unsigned shmem, uint64_t *args, int nargs) {
	void *ptrs[32];
	if (nargs > 32) return CUDA_ERROR_INVALID_VALUE;
	for (int i = 0; i < nargs; i++) ptrs[i] = &args[i];
	return p_cuLaunchKernel((CUfunction)fn, gx, gy, gz, bx, by, bz, shmem, cw_stream, ptrs, NULL);
}

static const char *cw_cuErrorName(int r) {
	const char *s = NULL;
	if (p_cuGetErrorName == NULL || p_cuGetErrorName((CUresult)r, &s) != CUDA_SUCCESS || s == NULL) return "CUDA_ERROR_UNKNOWN_CODE";
	return s;
}
static const char *cw_cuErrorString(int r) {
	const char *s = NULL;
	if (p_cuGetErrorString == NULL || p_cuGetErrorString((CUresult)r, &s) != CUDA_SUCCESS || s == NULL) return "";
	return s;
}

// ---- NVRTC ----
static nvrtcResult (*p_nvrtcVersion)(int *, int *);
static nvrtcResult (*p_nvrtcCreateProgram)(nvrtcProgram *, const char *, const char *, int,
	const char *const *, const char *const *);
static nvrtcResult (*p_nvrtcDestroyProgram)(nvrtcProgram *);
static nvrtcResult (*p_nvrtcCompileProgram)(nvrtcProgram, int, const char *const *);
static nvrtcResult (*p_nvrtcGetProgramLogSize)(nvrtcProgram, size_t *);
static nvrtcResult (*p_nvrtcGetProgramLog)(nvrtcProgram, char *);
static nvrtcResult (*p_nvrtcGetPTXSize)(nvrtcProgram, size_t *);
static nvrtcResult (*p_nvrtcGetPTX)(nvrtcProgram, char *);
static nvrtcResult (*p_nvrtcGetCUBINSize)(nvrtcProgram, size_t *);
static nvrtcResult (*p_nvrtcGetCUBIN)(nvrtcProgram, char *);
static const char *(*p_nvrtcGetErrorString)(nvrtcResult);

static const char *cw_load_nvrtc(void *h) {
	COHORT_SYM(h, p_nvrtcVersion, "nvrtcVersion");
	COHORT_SYM(h, p_nvrtcCreateProgram, "nvrtcCreateProgram");
	COHORT_SYM(h, p_nvrtcDestroyProgram, "nvrtcDestroyProgram");
	COHORT_SYM(h, p_nvrtcCompileProgram, "nvrtcCompileProgram");
	COHORT_SYM(h, p_nvrtcGetProgramLogSize, "nvrtcGetProgramLogSize");
	COHORT_SYM(h, p_nvrtcGetProgramLog, "nvrtcGetProgramLog");
	COHORT_SYM(h, p_nvrtcGetPTXSize, "nvrtcGetPTXSize");
	COHORT_SYM(h, p_nvrtcGetPTX, "nvrtcGetPTX");
	COHORT_SYM(h, p_nvrtcGetCUBINSize, "nvrtcGetCUBINSize");
	COHORT_SYM(h, p_nvrtcGetCUBIN, "nvrtcGetCUBIN");
	COHORT_SYM(h, p_nvrtcGetErrorString, "nvrtcGetErrorString");
	return NULL;
}

static int cw_nvrtcVersion(int *major, int *minor) { return p_nvrtcVersion(major, minor); }
static const char *cw_nvrtcErrorString(int r) { return p_nvrtcGetErrorString((nvrtcResult)r); }

// cw_nvrtc_compile compiles src with opts. On return *log holds the
// compiler log (malloc'd, may be NULL) and, on success, *out the PTX (NUL
// included) or the cubin (malloc'd). *stage names the failing call.
static int cw_nvrtc_compile(const char *src, const char *name, int nopts, char **opts, int cubin,
		char **out, size_t *outLen, char **log, const char **stage) {
	nvrtcProgram prog;
	*out = NULL; *outLen = 0; *log = NULL;
	*stage = "nvrtcCreateProgram";
	nvrtcResult r = p_nvrtcCreateProgram(&prog, src, name, 0, NULL, NULL);
	if (r != NVRTC_SUCCESS) return r;
	*stage = "nvrtcCompileProgram";
	nvrtcResult cr = p_nvrtcCompileProgram(prog, nopts, (const char *const *)opts);
	size_t logSize = 0;
	if (p_nvrtcGetProgramLogSize(prog, &logSize) == NVRTC_SUCCESS && logSize > 1) {
		*log = (char *)malloc(logSize);
		if (*log && p_nvrtcGetProgramLog(prog, *log) != NVRTC_SUCCESS) { free(*log); *log = NULL; }
	}
	if (cr != NVRTC_SUCCESS) { p_nvrtcDestroyProgram(&prog); return cr; }
	size_t n = 0;
	if (cubin) {
		*stage = "nvrtcGetCUBINSize";
		r = p_nvrtcGetCUBINSize(prog, &n);
	} else {
		*stage = "nvrtcGetPTXSize";
		r = p_nvrtcGetPTXSize(prog, &n);
	}
	if (r != NVRTC_SUCCESS) { p_nvrtcDestroyProgram(&prog); return r; }
	*out = (char *)malloc(n ? n : 1);
	if (*out == NULL) { p_nvrtcDestroyProgram(&prog); return NVRTC_ERROR_OUT_OF_MEMORY; }
	if (cubin) {
		*stage = "nvrtcGetCUBIN";
		r = p_nvrtcGetCUBIN(prog, *out);
	} else {
		*stage = "nvrtcGetPTX";
		r = p_nvrtcGetPTX(prog, *out);
	}
	if (r != NVRTC_SUCCESS) { free(*out); *out = NULL; p_nvrtcDestroyProgram(&prog); return r; }
	*outLen = n;
	p_nvrtcDestroyProgram(&prog);
	return NVRTC_SUCCESS;
}

// ---- cuBLASLt ----
static cublasStatus_t (*p_cublasLtCreate)(cublasLtHandle_t *);
static cublasStatus_t (*p_cublasLtDestroy)(cublasLtHandle_t);
static size_t (*p_cublasLtGetVersion)(void);
static cublasStatus_t (*p_cublasLtMatmulDescCreate)(cublasLtMatmulDesc_t *, cublasComputeType_t, cudaDataType_t);
static cublasStatus_t (*p_cublasLtMatmulDescDestroy)(cublasLtMatmulDesc_t);
static cublasStatus_t (*p_cublasLtMatmulDescSetAttribute)(cublasLtMatmulDesc_t, cublasLtMatmulDescAttributes_t,
	const void *, size_t);
static cublasStatus_t (*p_cublasLtMatrixLayoutCreate)(cublasLtMatrixLayout_t *, cudaDataType, uint64_t, uint64_t, int64_t);
static cublasStatus_t (*p_cublasLtMatrixLayoutDestroy)(cublasLtMatrixLayout_t);
static cublasStatus_t (*p_cublasLtMatmulPreferenceCreate)(cublasLtMatmulPreference_t *);
static cublasStatus_t (*p_cublasLtMatmulPreferenceDestroy)(cublasLtMatmulPreference_t);
static cublasStatus_t (*p_cublasLtMatmulPreferenceSetAttribute)(cublasLtMatmulPreference_t,
	cublasLtMatmulPreferenceAttributes_t, const void *, size_t);
static cublasStatus_t (*p_cublasLtMatmulAlgoGetHeuristic)(cublasLtHandle_t, cublasLtMatmulDesc_t,
	cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
	cublasLtMatmulPreference_t, int, cublasLtMatmulHeuristicResult_t *, int *);
static cublasStatus_t (*p_cublasLtMatmul)(cublasLtHandle_t, cublasLtMatmulDesc_t, const void *,
	const void *, cublasLtMatrixLayout_t, const void *, cublasLtMatrixLayout_t, const void *,
	const void *, cublasLtMatrixLayout_t, void *, cublasLtMatrixLayout_t, const cublasLtMatmulAlgo_t *,
	void *, size_t, cudaStream_t);

static const char *cw_load_cublaslt(void *h) {
	COHORT_SYM(h, p_cublasLtCreate, "cublasLtCreate");
	COHORT_SYM(h, p_cublasLtDestroy, "cublasLtDestroy");
	COHORT_SYM(h, p_cublasLtGetVersion, "cublasLtGetVersion");
	COHORT_SYM(h, p_cublasLtMatmulDescCreate, "cublasLtMatmulDescCreate");
	COHORT_SYM(h, p_cublasLtMatmulDescDestroy, "cublasLtMatmulDescDestroy");
	COHORT_SYM(h, p_cublasLtMatmulDescSetAttribute, "cublasLtMatmulDescSetAttribute");
	COHORT_SYM(h, p_cublasLtMatrixLayoutCreate, "cublasLtMatrixLayoutCreate");
	COHORT_SYM(h, p_cublasLtMatrixLayoutDestroy, "cublasLtMatrixLayoutDestroy");
	COHORT_SYM(h, p_cublasLtMatmulPreferenceCreate, "cublasLtMatmulPreferenceCreate");
	COHORT_SYM(h, p_cublasLtMatmulPreferenceDestroy, "cublasLtMatmulPreferenceDestroy");
	COHORT_SYM(h, p_cublasLtMatmulPreferenceSetAttribute, "cublasLtMatmulPreferenceSetAttribute");
	COHORT_SYM(h, p_cublasLtMatmulAlgoGetHeuristic, "cublasLtMatmulAlgoGetHeuristic");
	COHORT_SYM(h, p_cublasLtMatmul, "cublasLtMatmul");
	return NULL;
}

static int cw_cublasLtCreate(uintptr_t *h) {
	cublasLtHandle_t lt = NULL;
	cublasStatus_t r = p_cublasLtCreate(&lt);
	*h = (uintptr_t)lt;
	return r;
}
static int cw_cublasLtDestroy(uintptr_t h) { return p_cublasLtDestroy((cublasLtHandle_t)h); }
static size_t cw_cublasLtGetVersion(void) { return p_cublasLtGetVersion(); }

// cw_lt_plan is a prepared cuBLASLt matmul: descriptors and the chosen
// algorithm, reused for every GEMM of one shape.
typedef struct {
	cublasLtMatmulDesc_t op;
	cublasLtMatrixLayout_t la, lb, ld;
	cublasLtMatmulAlgo_t algo;
	size_t wsSize;
} cw_lt_plan;

static void cw_lt_plan_free(cw_lt_plan *p) {
	if (!p) return;
	if (p->ld) p_cublasLtMatrixLayoutDestroy(p->ld);
	if (p->lb) p_cublasLtMatrixLayoutDestroy(p->lb);
	if (p->la) p_cublasLtMatrixLayoutDestroy(p->la);
	if (p->op) p_cublasLtMatmulDescDestroy(p->op);
	free(p);
}

// cw_lt_plan_new prepares D[m, n] (fp32, column-major, ld ldd) = op(A)·op(B)
// with A and B of type ab (CUDA_R_32F or CUDA_R_16BF) and fp32
// accumulation (CUBLAS_COMPUTE_32F: no TF32).
static int cw_lt_plan_new(uintptr_t handle, int ab, int transa, int transb, uint64_t m, uint64_t n, uint64_t k,
		int64_t lda, int64_t ldb, int64_t ldd, size_t wsSize, cw_lt_plan **out, const char **stage) {
	cublasLtHandle_t lt = (cublasLtHandle_t)handle;
	cw_lt_plan *p = (cw_lt_plan *)calloc(1, sizeof(cw_lt_plan));
	cublasLtMatmulPreference_t pref = NULL;
	cublasLtMatmulHeuristicResult_t heur;
	int found = 0;
	cublasOperation_t ta = transa ? CUBLAS_OP_T : CUBLAS_OP_N, tb = transb ? CUBLAS_OP_T : CUBLAS_OP_N;
	cudaDataType_t abType = (cudaDataType_t)ab;
	cublasStatus_t r;
	*out = NULL;
	*stage = "calloc";
	if (!p) return CUBLAS_STATUS_ALLOC_FAILED;
	p->wsSize = wsSize;
	*stage = "cublasLtMatmulDescCreate";
	if ((r = p_cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F)) != CUBLAS_STATUS_SUCCESS) goto fail;
	*stage = "cublasLtMatmulDescSetAttribute(TRANSA)";
	if ((r = p_cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta)) != CUBLAS_STATUS_SUCCESS) goto fail;
	*stage = "cublasLtMatmulDescSetAttribute(TRANSB)";
	if ((r = p_cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb)) != CUBLAS_STATUS_SUCCESS) goto fail;
	*stage = "cublasLtMatrixLayoutCreate(A)";
	if ((r = p_cublasLtMatrixLayoutCreate(&p->la, abType, transa ? k : m, transa ? m : k, lda)) != CUBLAS_STATUS_SUCCESS) goto fail;
	*stage = "cublasLtMatrixLayoutCreate(B)";
	if ((r = p_cublasLtMatrixLayoutCreate(&p->lb, abType, transb ? n : k, transb ? k : n, ldb)) != CUBLAS_STATUS_SUCCESS) goto fail;
	*stage = "cublasLtMatrixLayoutCreate(D)";
	if ((r = p_cublasLtMatrixLayoutCreate(&p->ld, CUDA_R_32F, m, n, ldd)) != CUBLAS_STATUS_SUCCESS) goto fail;
	*stage = "cublasLtMatmulPreferenceCreate";
	if ((r = p_cublasLtMatmulPreferenceCreate(&pref)) != CUBLAS_STATUS_SUCCESS) goto fail;
	*stage = "cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)";
	uint64_t wsBytes = wsSize;
	if ((r = p_cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsBytes, sizeof wsBytes)) != CUBLAS_STATUS_SUCCESS) goto fail;
	*stage = "cublasLtMatmulAlgoGetHeuristic";
	memset(&heur, 0, sizeof heur);
	if ((r = p_cublasLtMatmulAlgoGetHeuristic(lt, p->op, p->la, p->lb, p->ld, p->ld, pref, 1, &heur, &found)) != CUBLAS_STATUS_SUCCESS) goto fail;
	if (found < 1) { r = CUBLAS_STATUS_NOT_SUPPORTED; goto fail; }
	p->algo = heur.algo;
	p_cublasLtMatmulPreferenceDestroy(pref);
	*out = p;
	return CUBLAS_STATUS_SUCCESS;
fail:
	if (pref) p_cublasLtMatmulPreferenceDestroy(pref);
	cw_lt_plan_free(p);
	return r;
}

// cw_lt_plan_run runs a prepared matmul on the thread's stream (alpha 1,
// beta 0).
static int cw_lt_plan_run(uintptr_t handle, cw_lt_plan *p, uint64_t A, uint64_t B, uint64_t D, uint64_t ws) {
	float alpha = 1.0f, beta = 0.0f;
	return p_cublasLtMatmul((cublasLtHandle_t)handle, p->op, &alpha, (const void *)A, p->la, (const void *)B, p->lb,
		&beta, (const void *)D, p->ld, (void *)D, p->ld, &p->algo, (void *)ws, p->wsSize, (cudaStream_t)cw_stream);
}

// ---- dlopen ----
static void *cw_dlopen(const char *path) { return dlopen(path, RTLD_NOW | RTLD_LOCAL); }
static const char *cw_dlerror(void) { const char *e = dlerror(); return e ? e : "unknown dlopen error"; }
*/
import "C"

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"unsafe"
)

// devptr is a device address (CUdeviceptr).
type devptr uint64

// cuError is a failed CUDA driver call.
type cuError struct {
	call string
	code int
}

func (e *cuError) Error() string {
	name := C.GoString(C.cw_cuErrorName(C.int(e.code)))
	msg := C.GoString(C.cw_cuErrorString(C.int(e.code)))
	return fmt.Sprintf("%s: %s (%d): %s", e.call, name, e.code, msg)
}

func cuCheck(call string, r C.int) error {
	if r == 0 {
		return nil
	}
	return &cuError{call: call, code: int(r)}
}

// library is one dlopen'ed shared library.
type library struct {
	handle unsafe.Pointer
	path   string
}

// openLibrary dlopens the first loadable of env's value (if set) and the
// candidates, then resolves its symbols with load. The error names every
// path tried and why it failed.
func openLibrary(what, env string, candidates []string, load func(unsafe.Pointer) *C.char) (*library, error) {
	var paths []string
	if v := os.Getenv(env); v != "" {
		paths = append(paths, v)
	}
	paths = append(paths, candidates...)
	var tried []string
	for _, p := range paths {
		cp := C.CString(p)
		h := C.cw_dlopen(cp)
		C.free(unsafe.Pointer(cp))
		if h == nil {
			tried = append(tried, fmt.Sprintf("%s (%s)", p, C.GoString(C.cw_dlerror())))
			continue
		}
		if missing := load(h); missing != nil {
			tried = append(tried, fmt.Sprintf("%s (lacks symbol %s)", p, C.GoString(missing)))
			continue
		}
		return &library{handle: h, path: p}, nil
	}
	return nil, fmt.Errorf("cuda: cannot load %s; set %s to its path; tried: %s", what, env, strings.Join(tried, "; "))
}

var (
	libcudaOnce sync.Once
	libcuda     *library
	libcudaErr  error

	nvrtcOnce sync.Once
	libnvrtc  *library
	nvrtcErr  error

	ltOnce sync.Once
	libLt  *library
	ltErr  error
)

// Library search lists. The environment variable, when set, is tried first.
var (
	cudaCandidates     = []string{"libcuda.so.1", "libcuda.so"}
	nvrtcCandidates    = []string{"/usr/local/cuda/lib64/libnvrtc.so.13", "/usr/local/cuda/lib64/libnvrtc.so.12", "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"}
	cublasLtCandidates = []string{"/usr/local/cuda/lib64/libcublasLt.so.13", "/usr/local/cuda/lib64/libcublasLt.so.12", "libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"}
)

// loadDriver opens libcuda and initializes the driver (once per process).
func loadDriver() error {
	libcudaOnce.Do(func() {
		libcuda, libcudaErr = openLibrary("the CUDA driver (libcuda)", "COHORT_LIBCUDA_PATH", cudaCandidates,
			func(h unsafe.Pointer) *C.char { return C.cw_load_cuda(h) })
		if libcudaErr != nil {
			return
		}
		if err := cuCheck("cuInit", C.cw_cuInit()); err != nil {
			libcudaErr = fmt.Errorf("cuda: %w (driver %s)", err, libcuda.path)
		}
	})
	return libcudaErr
}

func loadNVRTC() error {
	nvrtcOnce.Do(func() {
		libnvrtc, nvrtcErr = openLibrary("NVRTC (libnvrtc)", "COHORT_NVRTC_PATH", nvrtcCandidates,
			func(h unsafe.Pointer) *C.char { return C.cw_load_nvrtc(h) })
	})
	return nvrtcErr
}

func loadCublasLt() error {
	ltOnce.Do(func() {
		libLt, ltErr = openLibrary("cuBLASLt (libcublasLt)", "COHORT_CUBLASLT_PATH", cublasLtCandidates,
			func(h unsafe.Pointer) *C.char { return C.cw_load_cublaslt(h) })
	})
	return ltErr
}

// ---- driver wrappers ----

func driverVersion() int {
	var v C.int
	if C.cw_cuDriverGetVersion(&v) != 0 {
		return -1
	}
	return int(v)
}

func deviceCount() (int, error) {
	var n C.int
	err := cuCheck("cuDeviceGetCount", C.cw_cuDeviceGetCount(&n))
	return int(n), err
}

func deviceGet(ordinal int) (int, error) {
	var d C.int
	err := cuCheck("cuDeviceGet", C.cw_cuDeviceGet(&d, C.int(ordinal)))
	return int(d), err
}

const (
	attrComputeCapabilityMajor = C.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
	attrComputeCapabilityMinor = C.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR
	attrMultiprocessorCount    = C.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
)

func deviceAttribute(dev int, attr int) (int, error) {
	var v C.int
	err := cuCheck("cuDeviceGetAttribute", C.cw_cuDeviceGetAttribute(&v, C.int(attr), C.int(dev)))
	return int(v), err
}

func deviceName(dev int) string {
	buf := make([]byte, 256)
	if C.cw_cuDeviceGetName((*C.char)(unsafe.Pointer(&buf[0])), C.int(len(buf)), C.int(dev)) != 0 {
		return "?"
	}
	return C.GoString((*C.char)(unsafe.Pointer(&buf[0])))
}

// cuContext is a CUcontext handle.
type cuContext uintptr

func primaryCtxRetain(dev int) (cuContext, error) {
	var c C.uintptr_t
	err := cuCheck("cuDevicePrimaryCtxRetain", C.cw_cuDevicePrimaryCtxRetain(&c, C.int(dev)))
	return cuContext(c), err
}

func primaryCtxRelease(dev int) error {
	return cuCheck("cuDevicePrimaryCtxRelease", C.cw_cuDevicePrimaryCtxRelease(C.int(dev)))
}

func ctxSetCurrent(c cuContext) error {
	return cuCheck("cuCtxSetCurrent", C.cw_cuCtxSetCurrent(C.uintptr_t(c)))
}

func ctxSynchronize() error { return cuCheck("cuCtxSynchronize", C.cw_cuCtxSynchronize()) }

func memAlloc(bytes int64) (devptr, error) {
	var p C.uint64_t
	err := cuCheck(fmt.Sprintf("cuMemAlloc(%d bytes)", bytes), C.cw_cuMemAlloc(&p, C.size_t(bytes)))
	return devptr(p), err
}

func memFree(p devptr) error { return cuCheck("cuMemFree", C.cw_cuMemFree(C.uint64_t(p))) }

func memInfo() (free, total int64, err error) {
	var f, t C.size_t
	err = cuCheck("cuMemGetInfo", C.cw_cuMemGetInfo(&f, &t))
	return int64(f), int64(t), err
}

// memcpyHtoD copies bytes from host memory src (which holds no Go
// pointers) to dst.
func memcpyHtoD(dst devptr, src unsafe.Pointer, bytes int64) error {
	if bytes == 0 {
		return nil
	}
	return cuCheck("cuMemcpyHtoD", C.cw_cuMemcpyHtoD(C.uint64_t(dst), src, C.size_t(bytes)))
}

func memcpyDtoH(dst unsafe.Pointer, src devptr, bytes int64) error {
	if bytes == 0 {
		return nil
	}
	return cuCheck("cuMemcpyDtoH", C.cw_cuMemcpyDtoH(dst, C.uint64_t(src), C.size_t(bytes)))
}

func memcpyDtoD(dst, src devptr, bytes int64) error {
	if bytes == 0 {
		return nil
	}
	return cuCheck("cuMemcpyDtoD", C.cw_cuMemcpyDtoD(C.uint64_t(dst), C.uint64_t(src), C.size_t(bytes)))
}

// memHostAlloc allocates bytes of page-locked host memory (outside the Go
// heap).
func memHostAlloc(bytes int64) (unsafe.Pointer, error) {
	var p unsafe.Pointer
	err := cuCheck(fmt.Sprintf("cuMemHostAlloc(%d bytes)", bytes), C.cw_cuMemHostAlloc(&p, C.size_t(bytes)))
	return p, err
}

func memFreeHost(p unsafe.Pointer) error { return cuCheck("cuMemFreeHost", C.cw_cuMemFreeHost(p)) }

// memcpyHtoDAsync enqueues a copy of bytes from page-locked host memory src
// to dst on the thread's stream and returns without waiting; src must
// not change until the copy has executed.
func memcpyHtoDAsync(dst devptr, src unsafe.Pointer, bytes int64) error {
	if bytes == 0 {
		return nil
	}
	return cuCheck("cuMemcpyHtoDAsync", C.cw_cuMemcpyHtoDAsync(C.uint64_t(dst), src, C.size_t(bytes)))
}

func memsetD32(dst devptr, v uint32, n int64) error {
	if n == 0 {
		return nil
	}
	return cuCheck("cuMemsetD32", C.cw_cuMemsetD32(C.uint64_t(dst), C.uint(v), C.size_t(n)))
}

// module is a loaded CUmodule; function a CUfunction.
type (
	module   uintptr
	function uintptr
)

// moduleLoadData loads a PTX (NUL-terminated) or cubin image.
func moduleLoadData(image []byte) (module, error) {
	if len(image) == 0 {
		return 0, fmt.Errorf("cuda: empty module image")
	}
	cimg := C.CBytes(image)
	defer C.free(cimg)
	var m C.uintptr_t
	err := cuCheck("cuModuleLoadData", C.cw_cuModuleLoadData(&m, cimg))
	return module(m), err
}

func moduleUnload(m module) error {
	return cuCheck("cuModuleUnload", C.cw_cuModuleUnload(C.uintptr_t(m)))
}

func moduleGetFunction(m module, name string) (function, error) {
	cn := C.CString(name)
	defer C.free(unsafe.Pointer(cn))
	var f C.uintptr_t
	err := cuCheck("cuModuleGetFunction("+name+")", C.cw_cuModuleGetFunction(&f, C.uintptr_t(m), cn))
	return function(f), err
}

// launchKernel launches f with its parameters packed one per 8-byte slot.
func launchKernel(f function, grid, block [3]int, shmem int, args []uint64) error {
	var p *C.uint64_t
	if len(args) > 0 {
		p = (*C.uint64_t)(unsafe.Pointer(&args[0]))
	}
	return cuCheck("cuLaunchKernel", C.cw_launch(C.uintptr_t(f),
		C.uint(grid[0]), C.uint(grid[1]), C.uint(grid[2]),
		C.uint(block[0]), C.uint(block[1]), C.uint(block[2]),
		C.uint(shmem), p, C.int(len(args))))
}

// ---- NVRTC wrappers ----

type nvrtcError struct {
	call string
	code int
	log  string
}

func (e *nvrtcError) Error() string {
	s := fmt.Sprintf("%s: %s (%d)", e.call, C.GoString(C.cw_nvrtcErrorString(C.int(e.code))), e.code)
	if e.log != "" {
		s += "\n" + e.log
	}
	return s
}

func nvrtcVersion() (major, minor int, err error) {
	var ma, mi C.int
	if r := C.cw_nvrtcVersion(&ma, &mi); r != 0 {
		return 0, 0, &nvrtcError{call: "nvrtcVersion", code: int(r)}
	}
	return int(ma), int(mi), nil
}

// nvrtcCompile compiles src and returns the PTX (NUL-terminated) or, when
// cubin is set, the cubin, together with the compiler log.
func nvrtcCompile(src, name string, opts []string, cubin bool) (image []byte, log string, err error) {
	csrc := C.CString(src)
	defer C.free(unsafe.Pointer(csrc))
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	copts := (**C.char)(C.malloc(C.size_t(len(opts)+1) * C.size_t(unsafe.Sizeof(uintptr(0)))))
	defer C.free(unsafe.Pointer(copts))
	optSlice := unsafe.Slice(copts, len(opts)+1)
	for i, o := range opts {
		optSlice[i] = C.CString(o)
	}
	defer func() {
		for i := range opts {
			C.free(unsafe.Pointer(optSlice[i]))
		}
	}()
	var out, clog *C.char
	var outLen C.size_t
	var stage *C.char
	wantCubin := C.int(0)
	if cubin {
		wantCubin = 1
	}
	r := C.cw_nvrtc_compile(csrc, cname, C.int(len(opts)), copts, wantCubin, &out, &outLen, &clog, &stage)
	if clog != nil {
		log = strings.TrimRight(C.GoString(clog), "\x00\n ")
		C.free(unsafe.Pointer(clog))
	}
	if r != 0 {
		return nil, log, &nvrtcError{call: C.GoString(stage), code: int(r), log: log}
	}
	image = C.GoBytes(unsafe.Pointer(out), C.int(outLen))
	C.free(unsafe.Pointer(out))
	return image, log, nil
}

// ---- cuBLASLt wrappers ----

type cublasError struct {
	call string
	code int
}

func (e *cublasError) Error() string {
	return fmt.Sprintf("%s: cublasStatus %d", e.call, e.code)
}

// ltHandle is a cublasLtHandle_t.
type ltHandle uintptr

func cublasLtCreate() (ltHandle, error) {
	var h C.uintptr_t
	if r := C.cw_cublasLtCreate(&h); r != 0 {
		return 0, &cublasError{call: "cublasLtCreate", code: int(r)}
	}
	return ltHandle(h), nil
}

func cublasLtDestroy(h ltHandle) { C.cw_cublasLtDestroy(C.uintptr_t(h)) }

func cublasLtVersion() int { return int(C.cw_cublasLtGetVersion()) }

// ---- streams and graphs ----

// cuStream is a CUstream.
type cuStream uintptr

// streamCreate makes a non-blocking stream (not ordered with the legacy
// default stream).
func streamCreate() (cuStream, error) {
	var st C.uintptr_t
	err := cuCheck("cuStreamCreate", C.cw_cuStreamCreate(&st))
	return cuStream(st), err
}

func streamDestroy(s cuStream) error {
	return cuCheck("cuStreamDestroy", C.cw_cuStreamDestroy(C.uintptr_t(s)))
}

// setThreadStream makes s the calling OS thread's stream for every later
// copy, memset, launch and GEMM of this package on that thread.
func setThreadStream(s cuStream) { C.cw_set_stream(C.uintptr_t(s)) }

// streamSynchronize waits for the thread's stream.
func streamSynchronize() error {
	return cuCheck("cuStreamSynchronize", C.cw_cuStreamSynchronize())
}

// graphExec is an instantiated CUDA graph (CUgraphExec).
type graphExec uintptr

func beginCapture() error { return cuCheck("cuStreamBeginCapture", C.cw_begin_capture()) }

// endCapture ends the thread stream's capture and instantiates the graph;
// it also returns the graph's node count.
func endCapture() (graphExec, int, error) {
	var e C.uintptr_t
	var n C.size_t
	err := cuCheck("cuStreamEndCapture/cuGraphInstantiate", C.cw_end_capture(&e, &n))
	return graphExec(e), int(n), err
}

func graphLaunch(g graphExec) error {
	return cuCheck("cuGraphLaunch", C.cw_graph_launch(C.uintptr_t(g)))
}

func graphDestroy(g graphExec) error {
	return cuCheck("cuGraphExecDestroy", C.cw_graph_destroy(C.uintptr_t(g)))
}

// ltPlan is a prepared cuBLASLt matmul of one shape (see cw_lt_plan_new).
type ltPlan struct{ p *C.cw_lt_plan }

// ltKey identifies a GEMM shape for the plan cache.
type ltKey struct {
	bf16           bool
	transA, transB bool
	m, n, k        int
	lda, ldb, ldd  int
}

func cbool(v bool) C.int {
	if v {
		return 1
	}
	return 0
}

// newLtPlan prepares D[m,n] = op(A)·op(B) (column-major, fp32 output, fp32
// accumulation; A and B fp32 or, if key.bf16, bf16).
func newLtPlan(h ltHandle, key ltKey, wsSize int64) (ltPlan, error) {
	ab := C.int(C.CUDA_R_32F)
	if key.bf16 {
		ab = C.int(C.CUDA_R_16BF)
	}
	var p *C.cw_lt_plan
	var stage *C.char
	r := C.cw_lt_plan_new(C.uintptr_t(h), ab, cbool(key.transA), cbool(key.transB),
		C.uint64_t(key.m), C.uint64_t(key.n), C.uint64_t(key.k),
		C.int64_t(key.lda), C.int64_t(key.ldb), C.int64_t(key.ldd), C.size_t(wsSize), &p, &stage)
	if r != 0 {
		return ltPlan{}, &cublasError{call: C.GoString(stage), code: int(r)}
	}
	return ltPlan{p: p}, nil
}

func (p ltPlan) run(h ltHandle, a, b, d, ws devptr) error {
	if r := C.cw_lt_plan_run(C.uintptr_t(h), p.p, C.uint64_t(a), C.uint64_t(b), C.uint64_t(d), C.uint64_t(ws)); r != 0 {
		return &cublasError{call: "cublasLtMatmul", code: int(r)}
	}
	return nil
}

func (p ltPlan) free() { C.cw_lt_plan_free(p.p) }
