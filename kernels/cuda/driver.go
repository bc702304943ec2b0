//go:build cuda

package cuda

// The CUDA driver API comes from gorgonia.org/cu (devices, contexts, memory,
// modules, streams, peer access), which links libcuda (-lcuda; its soname,
// libcuda.so.1, is the same for every driver) and initializes the driver in
// its package init. This file is the package's only cgo, for what cu lacks:
//
//   - the thread's stream (cw_stream) on which every copy, memset, launch
//     and GEMM of a rank's thread is ordered;
//   - kernel launches without per-launch allocations (cu's Launch mallocs
//     its parameter arrays on every call);
//   - stream capture and graph instantiate/launch, and page-locked host
//     memory (cuMemHostAlloc), which cu does not wrap;
//   - NVRTC and cuBLASLt, opened at run time through nccl/dynload because
//     their sonames differ between CUDA 11, 12 and 13.
//
// The CUDA 11.8 headers of Debian's nvidia-cuda-dev supply the types; the
// entry points used here kept their ABI through CUDA 13.

/*
#cgo LDFLAGS: -lcuda -ldl
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cuda.h>
#include <nvrtc.h>
#include <cublasLt.h>

// ---- libcuda (linked) ----

// cw_stream is the calling thread's stream: every copy, memset, launch and
// GEMM of the package is ordered on it. Each rank's backend runs on one OS
// thread and sets it when it binds its context (cw_set_stream).
static __thread CUstream cw_stream = NULL;
static void cw_set_stream(void *s) { cw_stream = (CUstream)s; }
static void *cw_get_stream(void) { return (void *)cw_stream; }

// cw_launch launches fn on the thread's stream. Every parameter is
// passed in an 8-byte slot of args; the driver reads as many bytes as the
// kernel's parameter has, so 4-byte ints and floats sit in the low half of
// their slot (x86-64 and arm64 are little-endian).
static CUresult cw_launch(void *fn, unsigned gx, unsigned gy, unsigned gz,
		unsigned bx, unsigned by, unsigned bz, unsigned shmem, uint64_t *args, int nargs) {
	void *ptrs[32];
	if (nargs > 32) return CUDA_ERROR_INVALID_VALUE;
	for (int i = 0; i < nargs; i++) ptrs[i] = &args[i];
	return cuLaunchKernel((CUfunction)fn, gx, gy, gz, bx, by, bz, shmem, cw_stream, ptrs, NULL);
}

// cw_launch_pdl is cw_launch with programmatic stream serialization: the
// kernel may start before the previous kernel in the stream has finished,
// and resolves that dependency itself (griddepcontrol.wait; see
// kernels/00_common.cu).
static CUresult cw_launch_pdl(void *fn, unsigned gx, unsigned gy, unsigned gz,
		unsigned bx, unsigned by, unsigned bz, unsigned shmem, uint64_t *args, int nargs) {
	void *ptrs[32];
	if (nargs > 32) return CUDA_ERROR_INVALID_VALUE;
	for (int i = 0; i < nargs; i++) ptrs[i] = &args[i];
	CUlaunchAttribute attr;
	memset(&attr, 0, sizeof attr);
	attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
	attr.value.programmaticStreamSerializationAllowed = 1;
	CUlaunchConfig cfg;
	memset(&cfg, 0, sizeof cfg);
	cfg.gridDimX = gx; cfg.gridDimY = gy; cfg.gridDimZ = gz;
	cfg.blockDimX = bx; cfg.blockDimY = by; cfg.blockDimZ = bz;
	cfg.sharedMemBytes = shmem;
	cfg.hStream = cw_stream;
	cfg.attrs = &attr;
	cfg.numAttrs = 1;
	return cuLaunchKernelEx(&cfg, (CUfunction)fn, ptrs, NULL);
}

// Capture is relaxed: other threads (other ranks) may call unsafe APIs such
// as cuMemAlloc while this one captures.
static CUresult cw_begin_capture(void) { return cuStreamBeginCapture(cw_stream, CU_STREAM_CAPTURE_MODE_RELAXED); }
static CUresult cw_end_capture(uintptr_t *exec, size_t *nodes) {
	CUgraph g = NULL;
	CUgraphExec e = NULL;
	*exec = 0; *nodes = 0;
	CUresult r = cuStreamEndCapture(cw_stream, &g);
	if (r != CUDA_SUCCESS) return r;
	cuGraphGetNodes(g, NULL, nodes);
	r = cuGraphInstantiateWithFlags(&e, g, 0);
	cuGraphDestroy(g);
	*exec = (uintptr_t)e;
	return r;
}
static CUresult cw_graph_launch(uintptr_t exec) { return cuGraphLaunch((CUgraphExec)exec, cw_stream); }
static CUresult cw_graph_destroy(uintptr_t exec) { return cuGraphExecDestroy((CUgraphExec)exec); }

static CUresult cw_host_alloc(void **p, size_t n) { return cuMemHostAlloc(p, n, 0); }
// cw_mapped_alloc allocates page-locked host memory mapped into every
// context (portable, device-mapped) and returns its device address.
static CUresult cw_mapped_alloc(void **host, uint64_t *dev, size_t n) {
	CUdeviceptr d = 0;
	CUresult r = cuMemHostAlloc(host, n, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP);
	if (r != CUDA_SUCCESS) return r;
	r = cuMemHostGetDevicePointer(&d, *host, 0);
	*dev = (uint64_t)d;
	return r;
}

static const char *cw_error_name(CUresult r) {
	const char *s = NULL;
	if (cuGetErrorName(r, &s) != CUDA_SUCCESS || s == NULL) return "CUDA_ERROR_UNKNOWN_CODE";
	return s;
}
static const char *cw_error_string(CUresult r) {
	const char *s = NULL;
	if (cuGetErrorString(r, &s) != CUDA_SUCCESS || s == NULL) return "";
	return s;
}

// COHORT_SYM resolves one entry point of a dlopen'ed library (the bind
// functions below, called by nccl/dynload); it returns the missing name.
#define COHORT_SYM(h, var, name) do { *(void **)(&var) = dlsym(h, name); if (!var) return name; } while (0)

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
static cublasStatus_t (*p_cublasLtMatmulAlgoCheck)(cublasLtHandle_t, cublasLtMatmulDesc_t,
	cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
	const cublasLtMatmulAlgo_t *, cublasLtMatmulHeuristicResult_t *);
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
	// Optional: only COHORT_CUDA_LT_TUNE's adoption uses it (cw_lt_plan_adopt).
	*(void **)(&p_cublasLtMatmulAlgoCheck) = dlsym(h, "cublasLtMatmulAlgoCheck");
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
#define CW_LT_ALGOS 32
typedef struct {
	cublasLtMatmulDesc_t op;
	cublasLtMatrixLayout_t la, lb, ld;
	cublasLtMatmulAlgo_t algo;
	size_t wsSize;
	int nAlgos;                             // the heuristic's candidates, best first
	cublasLtMatmulAlgo_t algos[CW_LT_ALGOS];
} cw_lt_plan;

static void cw_lt_plan_free(cw_lt_plan *p) {
	if (!p) return;
	if (p->ld) p_cublasLtMatrixLayoutDestroy(p->ld);
	if (p->lb) p_cublasLtMatrixLayoutDestroy(p->lb);
	if (p->la) p_cublasLtMatrixLayoutDestroy(p->la);
	if (p->op) p_cublasLtMatmulDescDestroy(p->op);
	free(p);
}

// cw_lt_plan_new prepares D[m, n] (of type dt, CUDA_R_32F or CUDA_R_16BF;
// column-major, ld ldd) = op(A)·op(B) with A and B of type ab (CUDA_R_32F
// or CUDA_R_16BF) and fp32 accumulation (CUBLAS_COMPUTE_32F: no TF32).
static int cw_lt_plan_new(uintptr_t handle, int ab, int dt, int transa, int transb, uint64_t m, uint64_t n, uint64_t k,
		int64_t lda, int64_t ldb, int64_t ldd, size_t wsSize, int algos, cw_lt_plan **out, const char **stage) {
	cublasLtHandle_t lt = (cublasLtHandle_t)handle;
	cw_lt_plan *p = (cw_lt_plan *)calloc(1, sizeof(cw_lt_plan));
	cublasLtMatmulPreference_t pref = NULL;
	cublasLtMatmulHeuristicResult_t heur[CW_LT_ALGOS];
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
	if ((r = p_cublasLtMatrixLayoutCreate(&p->ld, (cudaDataType_t)dt, m, n, ldd)) != CUBLAS_STATUS_SUCCESS) goto fail;
	*stage = "cublasLtMatmulPreferenceCreate";
	if ((r = p_cublasLtMatmulPreferenceCreate(&pref)) != CUBLAS_STATUS_SUCCESS) goto fail;
	*stage = "cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)";
	uint64_t wsBytes = wsSize;
	if ((r = p_cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsBytes, sizeof wsBytes)) != CUBLAS_STATUS_SUCCESS) goto fail;
	*stage = "cublasLtMatmulAlgoGetHeuristic";
	memset(heur, 0, sizeof heur);
	if (algos < 1 || algos > CW_LT_ALGOS) algos = CW_LT_ALGOS;
	if ((r = p_cublasLtMatmulAlgoGetHeuristic(lt, p->op, p->la, p->lb, p->ld, p->ld, pref, algos, heur, &found)) != CUBLAS_STATUS_SUCCESS) goto fail;
	if (found < 1) { r = CUBLAS_STATUS_NOT_SUPPORTED; goto fail; }
	p->algo = heur[0].algo;
	p->nAlgos = found;
	for (int i = 0; i < found; i++) p->algos[i] = heur[i].algo;
	p_cublasLtMatmulPreferenceDestroy(pref);
	*out = p;
	return CUBLAS_STATUS_SUCCESS;
fail:
	if (pref) p_cublasLtMatmulPreferenceDestroy(pref);
	cw_lt_plan_free(p);
	return r;
}

// cw_lt_plan_tune times each of the heuristic's candidates (reps runs
// after one untimed, between events on the thread's stream, which it
// synchronizes) on the given operands and keeps the fastest; *best is its
// index. A candidate that fails is skipped.
static int cw_lt_plan_tune(uintptr_t handle, cw_lt_plan *p, uint64_t A, uint64_t B, uint64_t D, uint64_t ws, int reps, int *best) {
	float alpha = 1.0f, beta = 0.0f, bestMs = -1.0f;
	CUevent e0, e1;
	CUresult cr;
	*best = 0;
	if ((cr = cuEventCreate(&e0, CU_EVENT_DEFAULT)) != CUDA_SUCCESS) return (int)cr;
	if ((cr = cuEventCreate(&e1, CU_EVENT_DEFAULT)) != CUDA_SUCCESS) { cuEventDestroy(e0); return (int)cr; }
	for (int i = 0; i < p->nAlgos; i++) {
		int ok = 1;
		for (int k = 0; k <= reps && ok; k++) {
			if (k == 1) cuEventRecord(e0, cw_stream);
			ok = p_cublasLtMatmul((cublasLtHandle_t)handle, p->op, &alpha, (const void *)A, p->la, (const void *)B, p->lb,
				&beta, (const void *)D, p->ld, (void *)D, p->ld, &p->algos[i], (void *)ws, p->wsSize, (cudaStream_t)cw_stream) == CUBLAS_STATUS_SUCCESS;
		}
		cuEventRecord(e1, cw_stream);
		float ms = 0.0f;
		if ((cr = cuEventSynchronize(e1)) != CUDA_SUCCESS) break;
		if (ok && cuEventElapsedTime(&ms, e0, e1) == CUDA_SUCCESS && (bestMs < 0 || ms < bestMs)) {
			bestMs = ms;
			*best = i;
		}
	}
	cuEventDestroy(e0);
	cuEventDestroy(e1);
	p->algo = p->algos[*best];
	return (int)cr;
}

// cw_lt_plan_adopt makes algo (which another plan's timing chose) this
// plan's algorithm if cuBLASLt accepts it for this plan's matrices within
// its workspace; it returns 1 if so.
static int cw_lt_plan_adopt(uintptr_t handle, cw_lt_plan *p, const cublasLtMatmulAlgo_t *algo) {
	cublasLtMatmulHeuristicResult_t r;
	memset(&r, 0, sizeof r);
	if (!p_cublasLtMatmulAlgoCheck) return 0;
	if (p_cublasLtMatmulAlgoCheck((cublasLtHandle_t)handle, p->op, p->la, p->lb, p->ld, p->ld, algo, &r) != CUBLAS_STATUS_SUCCESS) return 0;
	if (r.workspaceSize > p->wsSize) return 0;
	p->algo = *algo;
	return 1;
}

// cw_lt_plan_run runs a prepared matmul on the thread's stream (alpha 1,
// beta 0).
static int cw_lt_plan_run(uintptr_t handle, cw_lt_plan *p, uint64_t A, uint64_t B, uint64_t D, uint64_t ws) {
	float alpha = 1.0f, beta = 0.0f;
	return p_cublasLtMatmul((cublasLtHandle_t)handle, p->op, &alpha, (const void *)A, p->la, (const void *)B, p->lb,
		&beta, (const void *)D, p->ld, (void *)D, p->ld, &p->algo, (void *)ws, p->wsSize, (cudaStream_t)cw_stream);
}

// cw_lt_plan_run_add runs a prepared matmul that adds C (D's layout) to
// the product: D = A·B + C (alpha 1, beta 1).
static int cw_lt_plan_run_add(uintptr_t handle, cw_lt_plan *p, uint64_t A, uint64_t B, uint64_t Cm, uint64_t D, uint64_t ws) {
	float alpha = 1.0f, beta = 1.0f;
	return p_cublasLtMatmul((cublasLtHandle_t)handle, p->op, &alpha, (const void *)A, p->la, (const void *)B, p->lb,
		&beta, (const void *)Cm, p->ld, (void *)D, p->ld, &p->algo, (void *)ws, p->wsSize, (cudaStream_t)cw_stream);
}

*/
import "C"

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"gorgonia.org/cu"

	"cohort/nccl/dynload"
)

// devptr is a device address (CUdeviceptr).
type devptr uint64

// cuError is a failed CUDA driver call: code is set for this file's own
// calls, err for gorgonia.org/cu's.
type cuError struct {
	call string
	code C.CUresult
	err  error
}

func (e *cuError) Error() string {
	if e.err != nil {
		return e.call + ": " + e.err.Error()
	}
	return fmt.Sprintf("%s: %s (%d): %s", e.call, C.GoString(C.cw_error_name(e.code)), int(e.code),
		C.GoString(C.cw_error_string(e.code)))
}

func (e *cuError) Unwrap() error { return e.err }

// cuCheck turns the result of one of this file's driver calls into an error.
func cuCheck(call string, r C.CUresult) error {
	if r == C.CUDA_SUCCESS {
		return nil
	}
	return &cuError{call: call, code: r}
}

// cuWrap names the call of a failed gorgonia.org/cu function.
func cuWrap(call string, err error) error {
	if err == nil {
		return nil
	}
	return &cuError{call: call, err: err}
}

// cu's handles (Stream, Function) are structs holding one C pointer. The
// thread's stream lives in C and a kernel launch needs the raw CUfunction,
// which cu v0.9.6 does not export, so they are converted here. These
// constants stop compiling (a negative uintptr) if a handle's size changes.
const (
	_ = unsafe.Sizeof(cu.Stream{}) - unsafe.Sizeof(uintptr(0))
	_ = unsafe.Sizeof(uintptr(0)) - unsafe.Sizeof(cu.Stream{})
	_ = unsafe.Sizeof(cu.Function{}) - unsafe.Sizeof(uintptr(0))
	_ = unsafe.Sizeof(uintptr(0)) - unsafe.Sizeof(cu.Function{})
)

func rawStream(s cu.Stream) unsafe.Pointer { return unsafe.Pointer(s.C()) }

func streamOf(p unsafe.Pointer) cu.Stream { return *(*cu.Stream)(unsafe.Pointer(&p)) }

func rawFunction(f cu.Function) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&f)) }

// Library search lists (nccl/dynload: $Env first when set, then Paths).
var (
	nvrtcSpec = dynload.Spec{What: "NVRTC (libnvrtc)", Env: "COHORT_NVRTC_PATH", Paths: []string{
		"/usr/local/cuda/lib64/libnvrtc.so.13", "/usr/local/cuda/lib64/libnvrtc.so.12",
		"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"}}
	cublasLtSpec = dynload.Spec{What: "cuBLASLt (libcublasLt)", Env: "COHORT_CUBLASLT_PATH", Paths: []string{
		"/usr/local/cuda/lib64/libcublasLt.so.13", "/usr/local/cuda/lib64/libcublasLt.so.12",
		"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"}}
)

// lazyLib is a library opened on first use; lib and err are set once.
type lazyLib struct {
	once sync.Once
	lib  *dynload.Library
	err  error
}

// open loads spec's library once, resolving its symbols with resolve
// (which names a missing one, or returns "").
func (l *lazyLib) open(spec dynload.Spec, resolve func(h unsafe.Pointer) string) error {
	l.once.Do(func() {
		if l.lib, l.err = dynload.Open(spec, resolve); l.err != nil {
			l.err = fmt.Errorf("cuda: %w", l.err)
		}
	})
	return l.err
}

var nvrtcLib, ltLib lazyLib

func loadNVRTC() error {
	return nvrtcLib.open(nvrtcSpec, func(h unsafe.Pointer) string { return C.GoString(C.cw_load_nvrtc(h)) })
}

func loadCublasLt() error {
	return ltLib.open(cublasLtSpec, func(h unsafe.Pointer) string { return C.GoString(C.cw_load_cublaslt(h)) })
}

// ---- driver wrappers ----

func driverVersion() int { return cu.Version() }

func deviceCount() (int, error) {
	n, err := cu.NumDevices()
	return n, cuWrap("cuDeviceGetCount", err)
}

func deviceGet(ordinal int) (int, error) {
	d, err := cu.GetDevice(ordinal)
	return int(d), cuWrap("cuDeviceGet", err)
}

const (
	attrComputeCapabilityMajor = cu.ComputeCapabilityMajor
	attrComputeCapabilityMinor = cu.ComputeCapabilityMinor
	attrMultiprocessorCount    = cu.MultiprocessorCount
)

func deviceAttribute(dev int, attr cu.DeviceAttribute) (int, error) {
	v, err := cu.Device(dev).Attribute(attr)
	return v, cuWrap("cuDeviceGetAttribute", err)
}

func deviceName(dev int) string {
	name, err := cu.Device(dev).Name()
	if err != nil {
		return "?"
	}
	return name
}

// cuContext is a CUcontext handle.
type cuContext = cu.CUContext

func primaryCtxRetain(dev int) (cuContext, error) {
	c, err := cu.Device(dev).RetainPrimaryCtx()
	return c, cuWrap("cuDevicePrimaryCtxRetain", err)
}

func primaryCtxRelease(dev int) error {
	return cuWrap("cuDevicePrimaryCtxRelease", cu.Device(dev).ReleasePrimaryCtx())
}

func ctxSetCurrent(c cuContext) error { return cuWrap("cuCtxSetCurrent", cu.SetCurrentContext(c)) }

func ctxSynchronize() error { return cuWrap("cuCtxSynchronize", cu.Synchronize()) }

// canAccessPeer reports whether device dev can map peer's memory.
func canAccessPeer(dev, peer int) (bool, error) {
	can, err := cu.Device(dev).CanAccessPeer(cu.Device(peer))
	return can != 0, cuWrap("cuDeviceCanAccessPeer", err)
}

// enablePeerAccess maps peer context's memory into the current context;
// "already enabled" (NCCL may have done it) counts as success.
func enablePeerAccess(peer cuContext) error {
	if err := peer.EnablePeerAccess(0); err != nil && err != cu.PeerAccessAlreadyEnabled {
		return cuWrap("cuCtxEnablePeerAccess", err)
	}
	return nil
}

func memAlloc(bytes int64) (devptr, error) {
	p, err := cu.MemAlloc(bytes)
	if err != nil {
		return 0, cuWrap(fmt.Sprintf("cuMemAlloc(%d bytes)", bytes), err)
	}
	return devptr(p), nil
}

func memFree(p devptr) error { return cuWrap("cuMemFree", cu.MemFree(cu.DevicePtr(p))) }

func memInfo() (free, total int64, err error) {
	free, total, err = cu.MemInfo()
	return free, total, cuWrap("cuMemGetInfo", err)
}

// threadStream is the calling thread's stream (see setThreadStream).
func threadStream() cu.Stream { return streamOf(C.cw_get_stream()) }

// memcpyHtoD copies bytes from host memory src (which holds no Go
// pointers) to dst, ordered on the thread's stream, and waits for it.
func memcpyHtoD(dst devptr, src unsafe.Pointer, bytes int64) error {
	if bytes == 0 {
		return nil
	}
	s := threadStream()
	if err := cu.MemcpyHtoDAsync(cu.DevicePtr(dst), src, bytes, s); err != nil {
		return cuWrap("cuMemcpyHtoD", err)
	}
	return cuWrap("cuMemcpyHtoD: cuStreamSynchronize", s.Synchronize())
}

// memcpyDtoH copies bytes from src to host memory dst, ordered on the
// thread's stream, and waits for it.
func memcpyDtoH(dst unsafe.Pointer, src devptr, bytes int64) error {
	if bytes == 0 {
		return nil
	}
	s := threadStream()
	if err := cu.MemcpyDtoHAsync(dst, cu.DevicePtr(src), bytes, s); err != nil {
		return cuWrap("cuMemcpyDtoH", err)
	}
	return cuWrap("cuMemcpyDtoH: cuStreamSynchronize", s.Synchronize())
}

// memcpyDtoD enqueues a device-to-device copy on the thread's stream.
func memcpyDtoD(dst, src devptr, bytes int64) error {
	if bytes == 0 {
		return nil
	}
	return cuWrap("cuMemcpyDtoD", cu.MemcpyDtoDAsync(cu.DevicePtr(dst), cu.DevicePtr(src), bytes, threadStream()))
}

// memHostAlloc allocates bytes of page-locked host memory (outside the Go
// heap).
func memHostAlloc(bytes int64) (unsafe.Pointer, error) {
	var p unsafe.Pointer
	err := cuCheck(fmt.Sprintf("cuMemHostAlloc(%d bytes)", bytes), C.cw_host_alloc(&p, C.size_t(bytes)))
	return p, err
}

// memMappedAlloc allocates bytes of page-locked host memory mapped into
// every context and returns its host and device addresses.
func memMappedAlloc(bytes int64) (unsafe.Pointer, devptr, error) {
	var host unsafe.Pointer
	var dev C.uint64_t
	err := cuCheck("cuMemHostAlloc(mapped)", C.cw_mapped_alloc(&host, &dev, C.size_t(bytes)))
	return host, devptr(dev), err
}

func memFreeHost(p unsafe.Pointer) error { return cuWrap("cuMemFreeHost", cu.MemFreeHost(p)) }

// memcpyHtoDAsync enqueues a copy of bytes from page-locked host memory src
// to dst on the thread's stream and returns without waiting; src must
// not change until the copy has executed.
func memcpyHtoDAsync(dst devptr, src unsafe.Pointer, bytes int64) error {
	if bytes == 0 {
		return nil
	}
	return cuWrap("cuMemcpyHtoDAsync", cu.MemcpyHtoDAsync(cu.DevicePtr(dst), src, bytes, threadStream()))
}

// memsetD32 enqueues setting n 32-bit words at dst to v on the thread's
// stream.
func memsetD32(dst devptr, v uint32, n int64) error {
	if n == 0 {
		return nil
	}
	return cuWrap("cuMemsetD32", cu.MemsetD32Async(cu.DevicePtr(dst), uint(v), n, threadStream()))
}

// module is a loaded CUmodule; function a CUfunction.
type (
	module   = cu.Module
	function = cu.Function
)

// moduleLoadData loads a PTX (NUL-terminated) or cubin image.
func moduleLoadData(image []byte) (module, error) {
	if len(image) == 0 {
		return module{}, fmt.Errorf("cuda: empty module image")
	}
	m, err := cu.LoadData(string(image))
	return m, cuWrap("cuModuleLoadData", err)
}

func moduleUnload(m module) error { return cuWrap("cuModuleUnload", m.Unload()) }

func moduleGetFunction(m module, name string) (function, error) {
	f, err := m.Function(name)
	return f, cuWrap("cuModuleGetFunction("+name+")", err)
}

// launchKernel launches f on the thread's stream with its parameters packed
// one per 8-byte slot (at most 32).
func launchKernel(f function, grid, block [3]int, shmem int, args []uint64) error {
	var p *C.uint64_t
	if len(args) > 0 {
		p = (*C.uint64_t)(unsafe.Pointer(&args[0]))
	}
	return cuCheck("cuLaunchKernel", C.cw_launch(rawFunction(f),
		C.uint(grid[0]), C.uint(grid[1]), C.uint(grid[2]),
		C.uint(block[0]), C.uint(block[1]), C.uint(block[2]),
		C.uint(shmem), p, C.int(len(args))))
}

// launchKernelPDL is launchKernel with programmatic dependent launch
// (cw_launch_pdl): the kernel must wait for its predecessor itself.
func launchKernelPDL(f function, grid, block [3]int, shmem int, args []uint64) error {
	var p *C.uint64_t
	if len(args) > 0 {
		p = (*C.uint64_t)(unsafe.Pointer(&args[0]))
	}
	return cuCheck("cuLaunchKernelEx", C.cw_launch_pdl(rawFunction(f),
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
type cuStream = cu.Stream

// streamCreate makes a non-blocking stream (not ordered with the legacy
// default stream).
func streamCreate() (cuStream, error) {
	s, err := cu.MakeStream(cu.NonBlocking)
	return s, cuWrap("cuStreamCreate", err)
}

func streamDestroy(s cuStream) error { return cuWrap("cuStreamDestroy", s.Destroy()) }

// setThreadStream makes s the calling OS thread's stream for every later
// copy, memset, launch and GEMM of this package on that thread.
func setThreadStream(s cuStream) { C.cw_set_stream(rawStream(s)) }

// streamSynchronize waits for the thread's stream.
func streamSynchronize() error {
	return cuWrap("cuStreamSynchronize", threadStream().Synchronize())
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

// ltAlgos is how many of cuBLASLt's heuristic candidates a plan keeps (and
// ltTune times): COHORT_CUDA_LT_ALGOS, 1 to 32, default 8 (New refuses
// any other value: ltAlgosErr).
var ltAlgos, ltAlgosErr = ltAlgosFromEnv(os.Getenv("COHORT_CUDA_LT_ALGOS"))

func ltAlgosFromEnv(v string) (int, error) {
	if v == "" {
		return 8, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > C.CW_LT_ALGOS {
		return 8, fmt.Errorf("cuda: COHORT_CUDA_LT_ALGOS=%q: want an integer in [1, %d]", v, C.CW_LT_ALGOS)
	}
	return n, nil
}

// ltPlan is a prepared cuBLASLt matmul of one shape (see cw_lt_plan_new).
type ltPlan struct{ p *C.cw_lt_plan }

// ltKey identifies a GEMM shape for the plan cache: bf16 inputs, and
// outBF16 a bf16 output (else float32).
type ltKey struct {
	bf16, outBF16  bool
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

// newLtPlan prepares D[m,n] = op(A)·op(B) (column-major, fp32 output
// unless key.outBF16, fp32 accumulation; A and B fp32 or, if key.bf16,
// bf16).
func newLtPlan(h ltHandle, key ltKey, wsSize int64) (ltPlan, error) {
	ab, dt := C.int(C.CUDA_R_32F), C.int(C.CUDA_R_32F)
	if key.bf16 {
		ab = C.int(C.CUDA_R_16BF)
	}
	if key.outBF16 {
		dt = C.int(C.CUDA_R_16BF)
	}
	var p *C.cw_lt_plan
	var stage *C.char
	r := C.cw_lt_plan_new(C.uintptr_t(h), ab, dt, cbool(key.transA), cbool(key.transB),
		C.uint64_t(key.m), C.uint64_t(key.n), C.uint64_t(key.k),
		C.int64_t(key.lda), C.int64_t(key.ldb), C.int64_t(key.ldd), C.size_t(wsSize), C.int(ltAlgos), &p, &stage)
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

// runAdd is run with c added to the product: d = a·b + c (c in d's
// layout; cw_lt_plan_run_add).
func (p ltPlan) runAdd(h ltHandle, a, b, c, d, ws devptr) error {
	if r := C.cw_lt_plan_run_add(C.uintptr_t(h), p.p, C.uint64_t(a), C.uint64_t(b), C.uint64_t(c), C.uint64_t(d), C.uint64_t(ws)); r != 0 {
		return &cublasError{call: "cublasLtMatmul", code: int(r)}
	}
	return nil
}

// tune runs and times the plan's candidate algorithms on these operands
// and keeps the fastest (cw_lt_plan_tune); it synchronizes the stream. It
// returns the chosen candidate's rank in the heuristic's order and how
// many there were.
func (p ltPlan) tune(h ltHandle, a, b, d, ws devptr, reps int) (best, of int, err error) {
	var cb C.int
	if r := C.cw_lt_plan_tune(C.uintptr_t(h), p.p, C.uint64_t(a), C.uint64_t(b), C.uint64_t(d), C.uint64_t(ws), C.int(reps), &cb); r != 0 {
		return 0, int(p.p.nAlgos), cuCheck("cuBLASLt algorithm timing", C.CUresult(r))
	}
	return int(cb), int(p.p.nAlgos), nil
}

// ltAlgo is a cuBLASLt algorithm, kept to be adopted by other plans.
type ltAlgo struct{ a C.cublasLtMatmulAlgo_t }

// algo returns the plan's algorithm.
func (p ltPlan) algo() ltAlgo { return ltAlgo{p.p.algo} }

// adopt makes a the plan's algorithm if cuBLASLt accepts it for the plan's
// matrices (cw_lt_plan_adopt), and reports whether it did.
func (p ltPlan) adopt(h ltHandle, a ltAlgo) bool {
	return C.cw_lt_plan_adopt(C.uintptr_t(h), p.p, &a.a) == 1
}

func (p ltPlan) free() { C.cw_lt_plan_free(p.p) }
