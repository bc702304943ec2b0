//go:build cuda

// Package cuda is the GPU implementation of kernels.Backend (build tag
// cuda). It is the only cgo in kernels.
//
// Phase 1 aims at correctness: every tensor is float32 on the device, the
// kernels (kernels/*.cu, compiled at start with NVRTC for the device's exact
// architecture and cached on disk) are simple, GEMMs go through cuBLASLt in
// pure fp32 (CUBLAS_COMPUTE_32F), and collectives copy through the host to
// the rank's nccl.Communicator.
//
// The CUDA driver API comes from gorgonia.org/cu, which links libcuda.so.1
// and initializes the driver in its package init: a binary built with
// -tags cuda needs the NVIDIA driver to start, and exits at start-up if
// cuInit fails. NVRTC and cuBLASLt, whose sonames differ between CUDA 11, 12
// and 13, are opened at run time through nccl/dynload; search order (first
// loadable wins; the error lists every path tried):
//
//	NVRTC:    $COHORT_NVRTC_PATH, /usr/local/cuda/lib64/libnvrtc.so.13,
//	          /usr/local/cuda/lib64/libnvrtc.so.12, libnvrtc.so.13,
//	          libnvrtc.so.12, libnvrtc.so
//	cuBLASLt: $COHORT_CUBLASLT_PATH, /usr/local/cuda/lib64/libcublasLt.so.13,
//	          /usr/local/cuda/lib64/libcublasLt.so.12, libcublasLt.so.13,
//	          libcublasLt.so.12, libcublasLt.so
//
// COHORT_CUDA_GEMM selects the GEMM: "auto" (default: cuBLASLt if it loads,
// else the built-in tiled kernel), "cublaslt" (required) or "tiled".
// COHORT_CUDA_SYNC=1 synchronizes after every kernel launch so that an
// asynchronous fault is reported by the op that caused it.
//
// Threading: CUDA contexts are current per OS thread. New, and every later
// call on the Backend, must come from one goroutine locked to its OS thread
// (runtime.LockOSThread), the rank's device executor. A goroutine that takes
// over a Backend must lock itself and call Bind first.
//
// Memory: Upload (weights), NewKVCache and NewStatePool make permanent
// allocations. Every op output (and the per-call metadata the ops upload)
// comes from a scratch arena that is only reclaimed by ResetScratch: the
// model executor must call ResetScratch between steps, once it has
// downloaded what it needs. Using a scratch tensor after ResetScratch
// panics.
//
// Errors: ops whose signature has no error panic with a message naming the
// op, the shapes and the failing CUDA call (the executor recovers panics into
// step errors); AllReduce and AllGatherCols return errors.
package cuda

import (
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"unsafe"

	"cohort/kernels"
	"cohort/nccl"
)

// Options configures a Backend.
type Options struct {
	// Device is the CUDA device ordinal.
	Device int
	// Comm is the rank's communicator; nil means a single rank.
	Comm nccl.Communicator
	// Weights is how UploadWeight stores matrix weights: "bf16" (the
	// default: bfloat16, float32 activations and accumulation) or "f32".
	// Empty means $COHORT_CUDA_WEIGHTS, else "bf16".
	Weights string
	// Deterministic makes every token's numbers independent of its batch
	// and of how its prompt was chunked (deterministic.go); false means
	// $COHORT_CUDA_DETERMINISTIC=1 decides.
	Deterministic bool
	// KV is the KV cache's element type: "bf16" or "f32" (kvtype.go).
	// Empty means $COHORT_CUDA_KV, else bf16 with bf16 weights and f32 with
	// f32 weights.
	KV string
}

// Backend is the CUDA implementation of kernels.Backend.
type Backend struct {
	comm   nccl.Communicator
	device int
	ctx    cuContext
	stream cuStream // every op is ordered on it (see setThreadStream)
	name   string
	ccMaj  int
	ccMin  int
	sms    int

	mod   module
	funcs map[string]function
	smem  map[string]int // dynamic shared memory a kernel was opted in to (allowSmem)
	image string         // what was loaded: arch and whether it came from the cache

	gemm     string // "cublaslt" or "tiled"
	gemmNote string // why the tiled GEMM is used, if it is
	lt       ltHandle
	ws       devptr
	wsSize   int64

	scratch    arena
	layers     layerArenas      // the layers' scratch when reused (layerscratch.go)
	staging    staging          // pinned host ring for per-call metadata uploads
	permanent  map[devptr]int64 // live permanent allocations and their sizes
	invFreq    map[ropeKey]devptr
	syncLaunch bool
	closed     bool

	weights     string             // "bf16" or "f32" (Options.Weights)
	mmaRows     int                // most rows of the tensor-core GEMV (bf16.go)
	gemvTune    gemvTuning         // its variant (bf16.go)
	ltTuned     map[ltKey]ltAlgo   // timed cuBLASLt algorithms by row bucket (ltTune)
	ltAdopted   int                // plans that took their bucket's timed algorithm
	occ         map[string]int     // blocks per SM of a kernel at a block size (occupancy)
	mmaCnt      devptr             // its tile counters (zero between launches)
	pdl         pdlMode            // which launches use programmatic dependent launch (sm_90+, COHORT_CUDA_PDL)
	profile     profileWindow      // steps a profiler collects (COHORT_CUDA_PROFILE_ROWS)
	lastLaunch  string             // the kernel launched last (for pdlGEMV)
	bulkCopies  bool               // the module's gemv_bulk_nt1 runs (sm_90, NVRTC 12+)
	wgmma       bool               // the module is an sm_90a image: the *_wg flash entries have bodies
	fuse        bool               // fused decode kernels (COHORT_CUDA_FUSE=0 turns them off)
	kvBF16      bool               // NewKVCache makes bf16 caches (kvType: the default with bf16 weights)
	det         bool               // deterministic mode (deterministic.go)
	plans       map[ltKey]ltPlan   // prepared cuBLASLt matmuls by shape
	graph       graphs             // CUDA graphs of decode steps (graph.go)
	collectives collectives        // device collectives (collective.go)
	meta        map[metaKey]devptr // shared metadata of the step in progress
	inStep      bool               // between BeginStep and EndStep
	stepIn      kernels.StepInputs // the inputs of the step in progress
}

// metaKey names per-step metadata that several ops of a step share (the
// batch's positions, its page lists, its sequences), so it is uploaded
// once per step rather than once per layer.
type metaKey struct {
	kind string
	src  unsafe.Pointer // the batch, or the slice's first element
	n    int
}

var _ kernels.Backend = (*Backend)(nil)

type ropeKey struct {
	rotaryDim int
	theta     float64
}

// ltWorkspace is the cuBLASLt workspace (32 MiB is NVIDIA's recommendation
// for Hopper).
const ltWorkspace = 32 << 20

// New opens the device, compiles (or loads from the cache) the kernels and
// prepares the GEMM library. It must be called from a goroutine locked to
// its OS thread (runtime.LockOSThread): the device context is made current
// on that thread, and every later call on the Backend must come from it.
func New(o Options) (*Backend, error) {
	n, err := deviceCount()
	if err != nil {
		return nil, fmt.Errorf("cuda: %w", err)
	}
	if o.Device < 0 || o.Device >= n {
		return nil, fmt.Errorf("cuda: device %d out of range: %d devices", o.Device, n)
	}
	dev, err := deviceGet(o.Device)
	if err != nil {
		return nil, fmt.Errorf("cuda: device %d: %w", o.Device, err)
	}
	b := &Backend{comm: o.Comm, device: dev, name: deviceName(dev),
		permanent: map[devptr]int64{}, invFreq: map[ropeKey]devptr{}, plans: map[ltKey]ltPlan{},
		syncLaunch: os.Getenv("COHORT_CUDA_SYNC") == "1"}
	if b.weights, err = weightType(o.Weights); err != nil {
		return nil, err
	}
	if ltAlgosErr != nil {
		return nil, ltAlgosErr
	}
	if b.mmaRows, err = mmaRowsFromEnv(); err != nil {
		return nil, err
	}
	if b.ccMaj, err = deviceAttribute(dev, attrComputeCapabilityMajor); err != nil {
		return nil, fmt.Errorf("cuda: device %d: %w", o.Device, err)
	}
	if b.ccMin, err = deviceAttribute(dev, attrComputeCapabilityMinor); err != nil {
		return nil, fmt.Errorf("cuda: device %d: %w", o.Device, err)
	}
	if b.sms, err = deviceAttribute(dev, attrMultiprocessorCount); err != nil {
		return nil, fmt.Errorf("cuda: device %d: %w", o.Device, err)
	}
	// Programmatic dependent launch (sm_90+): by default every tensor-core
	// GEMV is launched so, whatever precedes it, so that its blocks load
	// their first weights while the kernel before it (which lets it launch
	// at its own start) runs and drains. Measured on the H200 (2026-12-03,
	// cohort bench, 4b-shape, two side-by-side pairs): batch 1 3.321
	// against 3.403 and 3.298 against 3.332 ms/token, batch 8 4.022
	// against 4.056 and 3.967 against 3.980 (runs spread about 2 %).
	// The GDN decode kernels, which load their state before they wait, are
	// launched so too (=gemvs: the GEMVs only).
	// COHORT_CUDA_PDL=0 turns it off; =gemv launches so only a GEMV that
	// follows a GEMV; =1 every kernel, which measured slower (batch 1
	// 3.524 against 3.284 ms/token for the GEMVs only the same day, both
	// with the since-dropped p6_ GEMV entries; 4.40 against 3.90 on
	// 2026-12-01, when the GEMVs still let their successors launch at
	// their start).
	if b.ccMaj >= 9 {
		switch os.Getenv("COHORT_CUDA_PDL") {
		case "0":
		case "1":
			b.pdl = pdlAll
		case "gemv":
			b.pdl = pdlGEMV
		case "gemvs":
			b.pdl = pdlGEMVs
		default:
			b.pdl = pdlWeights
		}
	}
	b.fuse = os.Getenv("COHORT_CUDA_FUSE") != "0"
	b.det = o.Deterministic || deterministicFromEnv()
	b.profile = newProfileWindow()
	if b.gemvTune, err = gemvTuningFromEnv(); err != nil {
		return nil, err
	}
	if b.kvBF16, err = kvType(o); err != nil {
		return nil, err
	}
	if b.ctx, err = primaryCtxRetain(dev); err != nil {
		return nil, fmt.Errorf("cuda: device %d: %w", o.Device, err)
	}
	if err := ctxSetCurrent(b.ctx); err != nil {
		primaryCtxRelease(dev)
		return nil, fmt.Errorf("cuda: device %d: %w", o.Device, err)
	}
	if b.stream, err = streamCreate(); err != nil {
		primaryCtxRelease(dev)
		return nil, fmt.Errorf("cuda: device %d: %w", o.Device, err)
	}
	setThreadStream(b.stream)
	if err := b.init(); err != nil {
		b.Close()
		return nil, err
	}
	if err := b.initMMA(); err != nil {
		b.Close()
		return nil, err
	}
	b.graph.init(b)
	b.meta = map[metaKey]devptr{}
	return b, nil
}

func (b *Backend) init() error {
	desc, err := loadKernels(b.ccMaj, b.ccMin, func(image []byte) error {
		mod, err := moduleLoadData(image)
		if err != nil {
			return err
		}
		funcs := map[string]function{}
		for _, name := range kernelNames {
			f, err := moduleGetFunction(mod, name)
			if err != nil {
				moduleUnload(mod)
				return err
			}
			funcs[name] = f
		}
		b.mod, b.funcs = mod, funcs
		return nil
	})
	if err != nil {
		return err
	}
	b.image = desc
	b.wgmma = strings.HasPrefix(desc, "sm_90a ")
	if vmaj, _, err := nvrtcVersion(); err == nil {
		b.bulkCopies = b.ccMaj >= 9 && vmaj >= 12 // gemv_bulk_nt1's bulk copies
	}

	mode := os.Getenv("COHORT_CUDA_GEMM")
	switch mode {
	case "", "auto", "cublaslt":
		err := b.initCublasLt()
		if err == nil {
			b.gemm = "cublaslt"
			break
		}
		if mode == "cublaslt" {
			return err
		}
		b.gemm, b.gemmNote = "tiled", err.Error()
	case "tiled":
		b.gemm, b.gemmNote = "tiled", "COHORT_CUDA_GEMM=tiled"
	default:
		return fmt.Errorf("cuda: COHORT_CUDA_GEMM=%q: want auto, cublaslt or tiled", mode)
	}
	return nil
}

func (b *Backend) initCublasLt() error {
	if err := loadCublasLt(); err != nil {
		return err
	}
	h, err := cublasLtCreate()
	if err != nil {
		return fmt.Errorf("cuda: %w", err)
	}
	ws, err := memAlloc(ltWorkspace)
	if err != nil {
		cublasLtDestroy(h)
		return fmt.Errorf("cuda: cuBLASLt workspace: %w", err)
	}
	b.lt, b.ws, b.wsSize = h, ws, ltWorkspace
	return nil
}

// Name identifies the backend.
func (b *Backend) Name() string { return "cuda" }

// Info describes the device, the kernel image and the GEMM path, for logs.
func (b *Backend) Info() string {
	s := fmt.Sprintf("cuda: device %d %q sm_%d%d, %d SMs, driver %d, kernels %s, %s weights, gemm %s",
		b.device, b.name, b.ccMaj, b.ccMin, b.sms, driverVersion(), b.image, b.weights, b.gemm)
	if b.gemm == "cublaslt" {
		s += fmt.Sprintf(" (cuBLASLt %d from %s)", cublasLtVersion(), ltLib.lib.Path)
	} else if b.gemmNote != "" {
		s += " (" + b.gemmNote + ")"
	}
	return s
}

// Bind makes the backend's context current on the calling thread. The
// caller must have locked its goroutine to the OS thread.
func (b *Backend) Bind() error {
	if err := ctxSetCurrent(b.ctx); err != nil {
		return fmt.Errorf("cuda: Bind: %w", err)
	}
	setThreadStream(b.stream)
	return nil
}

// Synchronize waits for all queued device work and reports an asynchronous
// fault, if any.
func (b *Backend) Synchronize() error {
	if err := ctxSynchronize(); err != nil {
		return fmt.Errorf("cuda: %w", err)
	}
	return nil
}

// MemInfo returns the device's free and total memory in bytes.
func (b *Backend) MemInfo() (free, total int64, err error) { return memInfo() }

// ResetScratch reclaims every op output and per-call buffer made since the
// last reset. Weights, KV caches and state pools are not affected. Tensors
// from before the reset must not be used again (ops panic if they are).
func (b *Backend) ResetScratch() {
	b.profile.end()
	b.abandonGraph()
	b.inStep = false
	clear(b.meta)
	if err := b.staging.reset(); err != nil {
		panic(fmt.Sprintf("cuda: ResetScratch: %v", err))
	}
	b.destroyRetired()
	gen := b.scratchGen()
	if err := b.scratch.reset(); err != nil {
		panic(fmt.Sprintf("cuda: ResetScratch: %v", err))
	}
	if err := b.resetLayers(); err != nil {
		panic(fmt.Sprintf("cuda: ResetScratch: %v", err))
	}
	if b.scratchGen() != gen {
		b.dropGraphs()
	}
}

// ScratchBytes returns the bytes in use in the scratch arena and its
// capacity; the layer arenas (layerscratch.go) add the most each held in
// use at once this step, and their capacity.
func (b *Backend) ScratchBytes() (used, capacity int64) {
	used, capacity = b.scratch.usage()
	peak, lc := b.layerBytes()
	return used + peak, capacity + lc
}

var _ kernels.ScratchArena = (*Backend)(nil)

// ReserveScratch makes the scratch arena one chunk of exactly bytes
// (rounded up to its alignment), between steps: a step whose scratch fits
// then allocates nothing, and the arena grows only by arenaMinChunk at a
// time past it. It drops the recorded CUDA graphs, as any move of the arena
// does.
func (b *Backend) ReserveScratch(bytes int64) error {
	if used, _ := b.scratch.usage(); used != 0 || b.inStep {
		return fmt.Errorf("cuda: ReserveScratch: %d bytes of scratch in use (call it after ResetScratch)", used)
	}
	// The layer arenas get what the measured step held in them at most
	// (ScratchBytes counted it); the step arena the rest.
	layers, err := b.reserveLayers()
	if err != nil {
		return fmt.Errorf("cuda: ReserveScratch of %d bytes: %w", bytes, err)
	}
	if err := b.scratch.reserve(max(0, bytes-layers)); err != nil {
		return fmt.Errorf("cuda: ReserveScratch of %d bytes: %w", bytes, err)
	}
	b.dropGraphs()
	return nil
}

var _ kernels.StateFreer = (*Backend)(nil)

// FreeKVCache gives back a cache's device memory (NewKVCache) before Close.
func (b *Backend) FreeKVCache(c kernels.KVCache) {
	kv, ok := c.(*KVCache)
	if !ok {
		panic(fmt.Sprintf("cuda: FreeKVCache: cache %T is not a *cuda.KVCache", c))
	}
	b.freeLive(&kv.k, &kv.v)
}

// FreeStatePool gives back a state pool's device memory (NewStatePool and
// its snapshot places) before Close.
func (b *Backend) FreeStatePool(p kernels.StatePool) {
	sp, ok := p.(*StatePool)
	if !ok {
		panic(fmt.Sprintf("cuda: FreeStatePool: pool %T is not a *cuda.StatePool", p))
	}
	b.freeLive(&sp.conv, &sp.rec, &sp.snaps)
	sp.places = 0
}

// freeLive frees the permanent allocations that ps point to, once each, and
// clears them.
func (b *Backend) freeLive(ps ...*devptr) {
	for _, p := range ps {
		if _, live := b.permanent[*p]; live && *p != 0 {
			b.freePermanent(*p)
		}
		*p = 0
	}
}

// Free releases permanent tensors (made by Upload) before Close.
func (b *Backend) Free(ts ...kernels.Tensor) {
	for _, t := range ts {
		ct := asTensor("Free", t)
		if ct.scratch || ct.ptr == 0 {
			continue
		}
		if _, ok := b.permanent[ct.ptr]; !ok {
			panic(fmt.Sprintf("cuda: Free: tensor %v is not a live permanent allocation", ct.shape))
		}
		b.freePermanent(ct.ptr)
		ct.ptr, ct.freed = 0, true
	}
}

// Close frees all device memory of the backend (weights, caches, state
// pools, scratch) and releases the context. The Backend and its tensors
// must not be used afterwards.
func (b *Backend) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	b.abandonGraph()
	b.dropGraphs()
	b.destroyRetired()
	var errs []error
	for p := range b.permanent {
		errs = append(errs, memFree(p))
	}
	b.permanent = map[devptr]int64{}
	errs = append(errs, b.staging.free())
	errs = append(errs, b.scratch.free(), b.freeLayers())
	for _, p := range b.plans {
		p.free()
	}
	b.plans = nil
	if b.lt != 0 {
		cublasLtDestroy(b.lt)
		b.lt = 0
	}
	if b.ws != 0 {
		errs = append(errs, memFree(b.ws))
		b.ws = 0
	}
	if b.mod != (module{}) {
		errs = append(errs, moduleUnload(b.mod))
		b.mod = module{}
	}
	if b.stream != (cuStream{}) {
		errs = append(errs, streamDestroy(b.stream))
		setThreadStream(cuStream{})
		b.stream = cuStream{}
	}
	errs = append(errs, primaryCtxRelease(b.device))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cuda: Close: %w", err)
	}
	return nil
}

// ---- memory ----

func (b *Backend) allocPermanent(op string, bytes int64) devptr {
	if bytes == 0 {
		return 0
	}
	p, err := memAlloc(bytes)
	if err != nil {
		panic(fmt.Sprintf("cuda: %s: %v", op, err))
	}
	b.permanent[p] = bytes
	return p
}

func (b *Backend) freePermanent(p devptr) {
	delete(b.permanent, p)
	if err := memFree(p); err != nil {
		panic(fmt.Sprintf("cuda: Free: %v", err))
	}
}

// arena is a bump allocator over device chunks. A reset that finds more
// than one chunk replaces them by one chunk of their total size, so a
// steady workload settles on a single allocation. Each new chunk doubles
// the last, until the arena is reserved (reserve): then it grows by
// arenaMinChunk (or the allocation) at a time, since the device's memory
// beyond it belongs to the request state.
type arena struct {
	chunks   []chunk
	cur      int
	epoch    uint64 // bumped by every reset
	gen      uint64 // bumped whenever the chunks change (addresses move)
	reserved bool   // sized by reserve: grow by small chunks
	peak     int64  // the most bytes in use since the last reset (rewinds included)
	lastPeak int64  // peak before the last reset
}

type chunk struct {
	base      devptr
	size, off int64
}

const (
	arenaAlign    = 256
	arenaMinChunk = 64 << 20
)

func (a *arena) alloc(bytes int64) (devptr, error) {
	if bytes == 0 {
		return 0, nil
	}
	bytes = roundArena(bytes)
	for ; a.cur < len(a.chunks); a.cur++ {
		c := &a.chunks[a.cur]
		if c.off+bytes <= c.size {
			p := c.base + devptr(c.off)
			c.off += bytes
			a.notePeak()
			return p, nil
		}
	}
	size := max(int64(arenaMinChunk), bytes)
	if n := len(a.chunks); n > 0 && !a.reserved {
		size = max(size, a.chunks[n-1].size*2)
	}
	p, err := memAlloc(size)
	if err != nil {
		return 0, err
	}
	a.chunks = append(a.chunks, chunk{base: p, size: size, off: bytes})
	a.cur = len(a.chunks) - 1
	a.gen++
	a.notePeak()
	return p, nil
}

// notePeak keeps the most bytes in use since the last reset.
func (a *arena) notePeak() {
	if used, _ := a.usage(); used > a.peak {
		a.peak = used
	}
}

// rewind makes the arena's memory free again without giving any back (its
// chunks keep their addresses, which recorded graphs hold); tensors made
// from it before are dead (epoch).
func (a *arena) rewind() {
	a.epoch++
	for i := range a.chunks {
		a.chunks[i].off = 0
	}
	a.cur = 0
}

// reset ends a step: the arena's chunks become one (a step that grew it
// gets the total next time) and it is rewound.
func (a *arena) reset() error {
	a.lastPeak, a.peak = a.peak, 0
	if len(a.chunks) > 1 {
		var total int64
		for _, c := range a.chunks {
			total += c.size
		}
		if err := a.free(); err != nil {
			return err
		}
		p, err := memAlloc(total)
		if err != nil {
			return err
		}
		a.chunks = []chunk{{base: p, size: total}}
		a.gen++
	}
	a.rewind()
	return nil
}

// reserve replaces the (unused) chunks by one of exactly bytes, rounded up
// to the alignment; 0 leaves the arena empty.
func (a *arena) reserve(bytes int64) error {
	bytes = roundArena(bytes)
	a.epoch++
	a.reserved = true
	if len(a.chunks) == 1 && a.chunks[0].size == bytes {
		return nil
	}
	if err := a.free(); err != nil || bytes == 0 {
		return err
	}
	p, err := memAlloc(bytes)
	if err != nil {
		return err
	}
	a.chunks = []chunk{{base: p, size: bytes}}
	return nil
}

func (a *arena) free() error {
	var errs []error
	for _, c := range a.chunks {
		errs = append(errs, memFree(c.base))
	}
	a.chunks, a.cur = nil, 0
	a.gen++
	return errors.Join(errs...)
}

func (a *arena) usage() (used, capacity int64) {
	for i, c := range a.chunks {
		capacity += c.size
		if i <= a.cur {
			used += c.off
		}
	}
	return used, capacity
}

func (b *Backend) allocScratch(op string, bytes int64) devptr {
	a := b.curArena()
	p, err := a.alloc(bytes)
	if err != nil {
		used, capacity := a.usage()
		panic(fmt.Sprintf("cuda: %s: scratch allocation of %d bytes (arena %d of %d bytes in use; is ResetScratch called between steps?): %v",
			op, bytes, used, capacity, err))
	}
	return p
}

// ---- tensors ----

// Tensor is a device tensor: float32, or bfloat16 for matrix weights
// stored by UploadWeight.
type Tensor struct {
	shape      []int
	n          int
	ptr        devptr
	bf16       bool   // elements are bfloat16 (only weights, read by Linear and Embedding)
	twin       devptr // scratch bf16 copy of the elements that the producing kernel wrote (see twinFor), or 0
	linearOnly bool   // the producing kernel wrote only the twin, not the float32 elements (linearonly.go)
	scratch    bool   // lives in a scratch arena
	arena      int8   // which: 0 the step's, 1 or 2 a layer's (layerscratch.go)
	epoch      uint64 // the arena epoch it was allocated in
	freed      bool
}

var _ kernels.Tensor = (*Tensor)(nil)

// Shape returns the dimensions, outermost first. Callers must not modify it.
func (t *Tensor) Shape() []int { return t.shape }

// String describes the tensor's shape, for error messages.
func (t *Tensor) String() string { return fmt.Sprint(t.shape) }

// dims views t as a matrix [rows, cols] where cols is the last dimension.
func (t *Tensor) dims() (rows, cols int) { return kernels.Dims(t.shape) }

func numel(op string, shape []int) int {
	n := 1
	for _, d := range shape {
		if d < 0 {
			panic(fmt.Sprintf("cuda: %s: negative dimension in shape %v", op, shape))
		}
		n *= d
	}
	return n
}

// newTensor allocates an uninitialized scratch tensor.
func (b *Backend) newTensor(op string, shape ...int) *Tensor {
	n := numel(op, shape)
	return &Tensor{shape: slices.Clone(shape), n: n, ptr: b.allocScratch(op, int64(n)*4),
		scratch: true, arena: int8(b.layers.cur), epoch: b.curArena().epoch}
}

// asTensor unwraps a kernels.Tensor produced by this package.
func asTensor(op string, t kernels.Tensor) *Tensor {
	ct, ok := t.(*Tensor)
	if !ok || ct == nil {
		panic(fmt.Sprintf("cuda: %s: tensor %T is not a *cuda.Tensor", op, t))
	}
	return ct
}

// tensor unwraps a float32 tensor whose float32 elements were written
// (not linearOnly) and checks that its memory is still live.
func (b *Backend) tensor(op string, t kernels.Tensor) *Tensor {
	ct := b.linearInput(op, t)
	needF32(op, ct)
	return ct
}

// weight unwraps a float32 or bf16 tensor and checks that its memory is
// still live.
func (b *Backend) weight(op string, t kernels.Tensor) *Tensor {
	ct := asTensor(op, t)
	if ct.freed {
		panic(fmt.Sprintf("cuda: %s: tensor %v was freed", op, ct.shape))
	}
	if ct.scratch && ct.epoch != b.arenaAt(int(ct.arena)).epoch {
		panic(fmt.Sprintf("cuda: %s: scratch tensor %v was made before the last ResetScratch (or its layer's scratch was reused)", op, ct.shape))
	}
	return ct
}

// Upload copies host data into a new permanent tensor (weights; see the
// package doc). Free releases it early.
func (b *Backend) Upload(data []float32, shape ...int) kernels.Tensor {
	n := numel("Upload", shape)
	if n != len(data) {
		panic(fmt.Sprintf("cuda: Upload: %d values for shape %v", len(data), shape))
	}
	t := &Tensor{shape: slices.Clone(shape), n: n, ptr: b.allocPermanent("Upload", int64(n)*4)}
	if n > 0 {
		if err := memcpyHtoD(t.ptr, unsafe.Pointer(&data[0]), int64(n)*4); err != nil {
			panic(fmt.Sprintf("cuda: Upload %v: %v", shape, err))
		}
	}
	return t
}

// Download copies a tensor to the host (waiting for the work that makes it).
func (b *Backend) Download(t kernels.Tensor) []float32 {
	ct := b.weight("Download", t)
	if ct.bf16 {
		return b.downloadBF16(ct)
	}
	needF32("Download", ct)
	out := make([]float32, ct.n)
	if ct.n > 0 {
		if err := memcpyDtoH(unsafe.Pointer(&out[0]), ct.ptr, int64(ct.n)*4); err != nil {
			panic(fmt.Sprintf("cuda: Download %v: %v", ct.shape, err))
		}
	}
	return out
}

// uploadInts copies int32 metadata into the scratch arena; gen recomputes
// it from a step's inputs (nil when it does not derive from them; see
// graphUpload).
func (b *Backend) uploadInts(op string, v []int32, gen inputGen) devptr {
	return b.uploadIntsCap(op, v, len(v), gen)
}

// uploadIntsCap is uploadInts for metadata whose length varies between
// steps of one graph key, up to capElems values.
func (b *Backend) uploadIntsCap(op string, v []int32, capElems int, gen inputGen) devptr {
	if p, ok := b.graphUpload(op, v, capElems, gen); ok {
		return p
	}
	if len(v) == 0 {
		return 0
	}
	bytes := int64(len(v)) * 4
	p := b.allocScratch(op, bytes)
	src := unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), bytes)
	if host := b.staging.take(src); host != nil {
		if err := memcpyHtoDAsync(p, host, bytes); err != nil {
			panic(fmt.Sprintf("cuda: %s: uploading metadata: %v", op, err))
		}
		return p
	}
	if err := memcpyHtoD(p, unsafe.Pointer(&v[0]), bytes); err != nil {
		panic(fmt.Sprintf("cuda: %s: uploading metadata: %v", op, err))
	}
	return p
}

// stagingSize is the pinned host ring for per-call metadata uploads.
const stagingSize = 8 << 20

// staging is a page-locked host buffer from which the per-call metadata is
// copied to the device asynchronously (cuMemcpyHtoDAsync on the default
// stream, ordered before the kernels that read it), so the host does not
// wait for the queued kernels. It is a bump allocator per step: a region
// is written once and only reused after reset, which first synchronizes
// the context so no copy that reads the ring is still pending. A step that
// needs more than the ring falls back to synchronous copies.
type staging struct {
	buf    []byte // pinned memory (not Go heap), nil until first use
	off    int
	failed bool // cuMemHostAlloc failed: always use synchronous copies
}

// take copies src into the ring and returns its address there, or nil if
// the ring cannot hold it (the caller then copies synchronously).
func (s *staging) take(src []byte) unsafe.Pointer {
	off, ok := s.reserve(len(src))
	if !ok {
		return nil
	}
	copy(s.buf[off:off+len(src)], src)
	return unsafe.Pointer(&s.buf[off])
}

// span returns n zeroed bytes of the ring for the caller to fill, or nil if
// the ring cannot hold them.
func (s *staging) span(n int) []byte {
	off, ok := s.reserve(n)
	if !ok || n == 0 {
		return nil
	}
	dst := s.buf[off : off+n]
	clear(dst)
	return dst
}

// reserve takes n bytes of the ring at a 16-byte aligned offset, allocating
// the ring on first use.
func (s *staging) reserve(n int) (off int, ok bool) {
	if s.buf == nil {
		if s.failed {
			return 0, false
		}
		p, err := memHostAlloc(stagingSize)
		if err != nil || p == nil {
			s.failed = true
			return 0, false
		}
		s.buf = unsafe.Slice((*byte)(p), stagingSize)
	}
	off = (s.off + 15) &^ 15
	if off+n > len(s.buf) {
		return 0, false
	}
	s.off = off + n
	return off, true
}

// reset makes the whole ring available again once every pending copy from
// it has executed.
func (s *staging) reset() error {
	if s.off == 0 {
		return nil
	}
	s.off = 0
	return ctxSynchronize()
}

func (s *staging) free() error {
	if s.buf == nil {
		return nil
	}
	err := errors.Join(ctxSynchronize(), memFreeHost(unsafe.Pointer(&s.buf[0])))
	s.buf, s.off = nil, 0
	return err
}

// uploadConstFloats copies float32 constants into a permanent allocation.
func (b *Backend) uploadConstFloats(op string, v []float32) devptr {
	if len(v) == 0 {
		return 0
	}
	p := b.allocPermanent(op, int64(len(v))*4)
	if err := memcpyHtoD(p, unsafe.Pointer(&v[0]), int64(len(v))*4); err != nil {
		panic(fmt.Sprintf("cuda: %s: uploading constants: %v", op, err))
	}
	return p
}

// ---- launches ----

// grid1 returns a 1-D grid that covers n elements with block threads,
// capped (the kernels use grid-stride loops).
func (b *Backend) grid1(n int64, block int) int {
	g := (n + int64(block) - 1) / int64(block)
	return int(min(g, int64(max(b.sms, 1))*32))
}

// pdlMode says which launches use programmatic dependent launch.
type pdlMode int

const (
	pdlOff     pdlMode = iota
	pdlAll             // every launch
	pdlGEMV            // a tensor-core GEMV launched right after another
	pdlWeights         // every kernel that loads before it waits (preloads)
	pdlGEMVs           // every tensor-core GEMV
)

// isGEMV reports whether kernel name is a tensor-core GEMV (it issues its
// weight loads before it waits for its predecessor).
func isGEMV(name string) bool { return strings.HasPrefix(name, "gemv_mma") }

// preloads reports whether kernel name loads what no kernel of the step
// writes before it waits for its predecessor: the GEMVs their weights, the
// GDN decode kernels their state.
func preloads(name string) bool { return isGEMV(name) || strings.HasPrefix(name, "gdn_decode_") }

// programmatic reports whether kernel name is launched with programmatic
// dependent launch after b.lastLaunch.
func (b *Backend) programmatic(name string) bool {
	switch b.pdl {
	case pdlAll:
		return true
	case pdlGEMV:
		return isGEMV(name) && isGEMV(b.lastLaunch)
	case pdlWeights:
		return preloads(name)
	case pdlGEMVs:
		return isGEMV(name)
	}
	return false
}

// launch runs kernel name; args are devptr, int, int64 or float32.
func (b *Backend) launch(op, name string, grid, block [3]int, shmem int, args ...any) {
	f, ok := b.funcs[name]
	if !ok {
		panic(fmt.Sprintf("cuda: %s: no kernel %s", op, name))
	}
	if grid[0]*grid[1]*grid[2] == 0 {
		return
	}
	packed := make([]uint64, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case devptr:
			packed[i] = uint64(v)
		case int:
			if v != int(int32(v)) {
				panic(fmt.Sprintf("cuda: %s: %s argument %d = %d overflows int32", op, name, i, v))
			}
			packed[i] = uint64(uint32(int32(v)))
		case int64:
			packed[i] = uint64(v)
		case float32:
			packed[i] = uint64(math.Float32bits(v))
		default:
			panic(fmt.Sprintf("cuda: %s: %s argument %d has unsupported type %T", op, name, i, a))
		}
	}
	if b.graph.mode != graphOff {
		for _, d := range [...]int{grid[0], grid[1], grid[2], block[0], block[1], block[2], shmem} {
			b.graph.fp.add(uint64(d))
		}
		if b.graph.skip(op, name, packed...) {
			return
		}
	}
	launch := launchKernel
	if b.programmatic(name) {
		launch = launchKernelPDL
	}
	b.lastLaunch = name
	if err := launch(f, grid, block, shmem, packed); err != nil {
		panic(fmt.Sprintf("cuda: %s: %s grid %v block %v: %v", op, name, grid, block, err))
	}
	if b.syncLaunch && b.graph.mode == graphOff {
		if err := ctxSynchronize(); err != nil {
			panic(fmt.Sprintf("cuda: %s: %s: %v", op, name, err))
		}
	}
}

// blockFor returns a block size for a reduction over n values: a multiple
// of 32 between 32 and 256.
func blockFor(n int) int {
	return min(max((n+31)/32*32, 32), 256)
}

// Stream returns the CUstream on which every op of the backend is ordered,
// for device-side collectives (NCCL) that must run in that order.
func (b *Backend) Stream() uintptr { return uintptr(rawStream(b.stream)) }

// DevicePointer returns t's device address and its number of float32
// elements, for device-side collectives.
func (b *Backend) DevicePointer(t kernels.Tensor) (ptr uintptr, n int) {
	ct := b.tensor("DevicePointer", t)
	return uintptr(ct.ptr), ct.n
}

// sharedMeta uploads per-step metadata once per key and step (see metaKey);
// outside BeginStep/EndStep it uploads on every call.
func (b *Backend) sharedMeta(key metaKey, upload func() devptr) devptr {
	if !b.inStep {
		return upload()
	}
	if p, ok := b.meta[key]; ok {
		return p
	}
	p := b.inStepArena(upload) // the step's layers all read it
	b.meta[key] = p
	return p
}

// positionsMeta uploads a batch's positions once per step.
func (b *Backend) positionsMeta(op string, positions []int32) devptr {
	if len(positions) == 0 {
		return 0
	}
	var gen inputGen
	if bt := b.stepIn.Batch; bt != nil && sameInts(positions, bt.Positions) {
		gen = func(in *kernels.StepInputs) []int32 { return in.Batch.Positions }
	}
	return b.sharedMeta(metaKey{kind: "positions", src: unsafe.Pointer(&positions[0]), n: len(positions)},
		func() devptr { return b.uploadInts(op, positions, gen) })
}

// stepBatch returns gen unless bt is not the batch of the step in progress
// (metadata computed from another batch cannot be recomputed from the
// step's inputs).
func (b *Backend) stepBatch(bt *kernels.Batch, gen inputGen) inputGen {
	if bt == nil || bt != b.stepIn.Batch {
		return nil
	}
	return gen
}

// sameInts reports whether a and b are the same slice (same first element
// and length), not merely equal values.
func sameInts(a, b []int32) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}
