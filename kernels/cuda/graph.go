//go:build cuda

package cuda

import (
	"fmt"
	"log"
	"os"
	"unsafe"

	"cohort/kernels"
)

// CUDA graphs for decode steps.
//
// A model brackets a step whose launches are fully determined by a key
// (for Qwen3.5: a decode step of n rows) with BeginStep(key) and
// EndStep(). The first step with a key runs eagerly (it sizes the scratch
// arena). The second is captured: its launches are recorded on the stream
// instead of run, and EndStep instantiates and launches the graph. Every
// later step with that key is replayed: the model's Go code runs as usual,
// so scratch tensors get the same addresses and the per-step metadata is
// computed, but launches and GEMMs are skipped (only fingerprinted), the
// metadata is copied into the graph's fixed input buffers, and EndStep
// launches the graph: one launch per step instead of hundreds.
//
// The fingerprint of the skipped launches (kernel, grid, arguments) must
// equal the captured one; a replay that diverges panics and drops the
// graph. Metadata whose length varies between steps of one key (a
// sequence's KV pages) gets an input buffer of its maximum size. A capture
// during which the scratch arena grows is dropped (addresses would move),
// and so is every graph when the arena is reallocated. A step that fails
// before EndStep leaves its capture or replay unfinished; ResetScratch
// discards it, so nothing half-recorded is ever launched.
//
// COHORT_CUDA_GRAPHS=0 turns graphs off. They are also off with
// COHORT_CUDA_SYNC=1 and for ranks whose collectives go through the host.

// maxGraphs bounds the graphs a backend keeps; reaching it drops them all.
const maxGraphs = 512

type graphMode uint8

const (
	graphOff     graphMode = iota // eager
	graphCapture                  // launches are recorded into a new graph
	graphReplay                   // launches are skipped; EndStep launches the graph
)

// stepGraph is one instantiated graph and what it expects of a replay.
type stepGraph struct {
	exec       graphExec
	nodes      int
	print      uint64       // fingerprint of the captured launches
	inputs     []graphInput // metadata buffers, in upload order
	arenaGen   [3]uint64    // the scratch arenas' layout it was captured on (scratchGen)
	scratchAt  int64        // scratch bytes in use when the step began
	scratchEnd int64        // and when it ended
	out        Tensor       // the step's result (in the scratch arena)
	direct     bool         // every input has a gen: ReplayStep may run it
}

// graphInput is a fixed device buffer the graph reads metadata from.
type graphInput struct {
	ptr   devptr
	bytes int64    // capacity
	gen   inputGen // recomputes its values from a step's inputs, or nil
}

// inputGen computes a graph input's values from a step's inputs, so that
// ReplayStep can refill it without running the model's ops. It must equal
// what the op that uploaded the input computes for the same step.
type inputGen func(in *kernels.StepInputs) []int32

// pendingCopy is a metadata copy held back until a capture ends.
type pendingCopy struct {
	dst   devptr
	src   unsafe.Pointer // pinned staging memory
	bytes int64
}

// graphs is a Backend's graph state.
type graphs struct {
	enabled  bool
	mode     graphMode
	key      string
	byKey    map[string]*stepGraph
	warm     map[string]bool // keys that ran eagerly once
	cur      *stepGraph      // the graph being captured or replayed
	vals     [][]int32       // ReplayStep's recomputed inputs (reused)
	fp       fpHash
	input    int // replay: next input
	pending  []pendingCopy
	retired  []graphExec // launched once, destroyed at the next reset
	captures int         // graphs captured (for tests and logs)
	replays  int         // steps replayed
	direct   int         // of them, by ReplayStep (without the model's ops)
	copies   int         // metadata copies ReplayStep enqueued
}

// fpHash is an incremental FNV-1a fingerprint of launches.
type fpHash struct{ h uint64 }

func (f *fpHash) reset() { f.h = 14695981039346656037 }

func (f *fpHash) add(v uint64) {
	for i := 0; i < 8; i++ {
		f.h ^= v & 0xff
		f.h *= 1099511628211
		v >>= 8
	}
}

func (f *fpHash) addString(s string) {
	for i := 0; i < len(s); i++ {
		f.h ^= uint64(s[i])
		f.h *= 1099511628211
	}
}

func (g *graphs) init(b *Backend) {
	single := b.comm == nil || b.comm.Size() == 1
	g.enabled = os.Getenv("COHORT_CUDA_GRAPHS") != "0" && !b.syncLaunch && single
	g.byKey, g.warm = map[string]*stepGraph{}, map[string]bool{}
}

// skip fingerprints a stream operation of op and reports whether it must
// not be issued (during a replay).
func (g *graphs) skip(op, what string, args ...uint64) bool {
	if g.mode == graphOff {
		return false
	}
	g.fp.addString(what)
	for _, a := range args {
		g.fp.add(a)
	}
	return g.mode == graphReplay
}

// GraphStats reports how many graphs were captured and steps replayed.
func (b *Backend) GraphStats() (captured, replayed int) { return b.graph.captures, b.graph.replays }

// BeginStep starts a forward step over in. Metadata shared by the step's
// ops is uploaded once until EndStep. A non-empty key says that the step's
// launches are fully determined by it, so the step may be captured into a
// CUDA graph or replayed from one (see the comment at the top of graph.go).
func (b *Backend) BeginStep(key string, in kernels.StepInputs) {
	g := &b.graph
	b.abandonGraph()
	b.inStep = true
	b.stepIn = in
	b.layers.cur = 0
	clear(b.meta)
	if !g.enabled || key == "" {
		return
	}
	used, _ := b.scratch.usage()
	if sg := g.byKey[key]; sg != nil {
		if sg.arenaGen == b.scratchGen() && sg.scratchAt == used {
			g.mode, g.key, g.cur, g.input = graphReplay, key, sg, 0
			g.fp.reset()
			return
		}
		b.dropGraph(key)
	}
	if len(g.byKey) >= maxGraphs {
		b.dropGraphs() // keys of models or states that are gone pile up
		clear(g.warm)
	}
	if !g.warm[key] {
		g.warm[key] = true // run eagerly once: the arena reaches its size
		return
	}
	if err := beginCapture(); err != nil {
		panic(fmt.Sprintf("cuda: BeginStep(%s): %v", key, err))
	}
	g.mode, g.key, g.input, g.pending = graphCapture, key, 0, g.pending[:0]
	g.cur = &stepGraph{arenaGen: b.scratchGen(), scratchAt: used, direct: true}
	g.fp.reset()
}

// EndStep ends the step begun by BeginStep: a capture is instantiated and
// launched, a replay launched. out is the step's result.
func (b *Backend) EndStep(out kernels.Tensor) {
	g := &b.graph
	b.inStep = false
	b.stepIn = kernels.StepInputs{}
	clear(b.meta)
	switch g.mode {
	case graphCapture:
		ot, ok := out.(*Tensor)
		if !ok || ot == nil {
			g.cur.direct = false
		} else {
			g.cur.out = *ot
		}
		g.cur.scratchEnd, _ = b.scratch.usage()
		b.endCaptureAndLaunch()
	case graphReplay:
		sg := g.cur
		g.mode, g.cur = graphOff, nil
		if g.fp.h != sg.print || g.input != len(sg.inputs) {
			b.dropGraph(g.key)
			panic(fmt.Sprintf("cuda: graph %s: replay diverged from the capture (%d of %d inputs)", g.key, g.input, len(sg.inputs)))
		}
		if err := graphLaunch(sg.exec); err != nil {
			panic(fmt.Sprintf("cuda: graph %s: %v", g.key, err))
		}
		g.replays++
	}
}

func (b *Backend) endCaptureAndLaunch() {
	g := &b.graph
	sg := g.cur
	g.mode, g.cur = graphOff, nil
	exec, nodes, err := endCapture()
	if err != nil {
		panic(fmt.Sprintf("cuda: graph %s: %v", g.key, err))
	}
	sg.exec, sg.nodes, sg.print = exec, nodes, g.fp.h
	for _, c := range g.pending {
		if err := memcpyHtoDAsync(c.dst, c.src, c.bytes); err != nil {
			panic(fmt.Sprintf("cuda: graph %s: metadata: %v", g.key, err))
		}
	}
	g.pending = g.pending[:0]
	if err := graphLaunch(exec); err != nil {
		graphDestroy(exec)
		panic(fmt.Sprintf("cuda: graph %s: %v", g.key, err))
	}
	if sg.arenaGen == b.scratchGen() {
		g.byKey[g.key] = sg
		g.captures++
		log.Printf("cuda: device %d: captured CUDA graph %s (%d nodes, %d metadata inputs, direct replay %v)", b.device, g.key, nodes, len(sg.inputs), sg.direct)
	} else {
		// The arena grew during the capture, so the next reset moves it:
		// the graph runs this once and is destroyed after the step.
		g.retired = append(g.retired, exec)
	}
}

// abandonGraph discards a step left unfinished (it failed before EndStep):
// an open capture is ended and thrown away, a replay forgotten.
func (b *Backend) abandonGraph() {
	g := &b.graph
	switch g.mode {
	case graphCapture:
		if exec, _, err := endCapture(); err == nil && exec != 0 {
			graphDestroy(exec)
		}
	case graphReplay:
	default:
		return
	}
	g.mode, g.cur, g.pending = graphOff, nil, g.pending[:0]
}

func (b *Backend) dropGraph(key string) {
	if sg := b.graph.byKey[key]; sg != nil {
		graphDestroy(sg.exec)
		delete(b.graph.byKey, key)
	}
}

// destroyRetired destroys graphs that were launched once, after the
// stream has been synchronized.
func (b *Backend) destroyRetired() {
	if len(b.graph.retired) == 0 {
		return
	}
	if err := streamSynchronize(); err != nil {
		return // keep them: the stream has failed, Close frees the rest
	}
	for _, e := range b.graph.retired {
		graphDestroy(e)
	}
	b.graph.retired = b.graph.retired[:0]
}

// dropGraphs forgets every graph (the arena they point into is gone).
func (b *Backend) dropGraphs() {
	for k := range b.graph.byKey {
		b.dropGraph(k)
	}
}

// ReplayStep runs the graph recorded under key on new inputs without the
// model's ops (kernels.Stepper): each metadata input is recomputed by its
// gen, copied into its buffer, and the graph launched. The scratch the step
// used is reserved, so what the caller allocates next does not overlap the
// graph's buffers. It declines (false) when no graph for key can be run so:
// none recorded, one with an input of unknown origin, or the arena moved.
func (b *Backend) ReplayStep(key string, in kernels.StepInputs) (kernels.Tensor, bool) {
	g := &b.graph
	sg := g.byKey[key]
	used, _ := b.scratch.usage()
	if !g.enabled || sg == nil || !sg.direct || sg.arenaGen != b.scratchGen() || sg.scratchAt != used {
		return nil, false
	}
	b.abandonGraph()
	vals := g.vals[:0]
	for _, gi := range sg.inputs {
		v := gi.gen(&in) // validates, and may panic, before anything is enqueued
		if int64(len(v))*4 > gi.bytes {
			return nil, false
		}
		vals = append(vals, v)
	}
	g.vals = vals
	if graphPack {
		b.replayPacked(key, sg.inputs, vals)
	} else {
		for i, gi := range sg.inputs {
			if v := vals[i]; len(v) > 0 {
				b.replayCopy(key, gi.ptr, b.stageInts("graph "+key, v), int64(len(v))*4)
			}
		}
	}
	if sg.scratchEnd > used {
		b.allocScratch("ReplayStep", sg.scratchEnd-used)
	}
	if err := graphLaunch(sg.exec); err != nil {
		panic(fmt.Sprintf("cuda: graph %s: %v", key, err))
	}
	g.replays++
	g.direct++
	out := sg.out
	out.epoch = b.arenaAt(int(out.arena)).epoch // it lives in this step's scratch, like every op's result
	return &out, true
}

// graphPack turns on replayPacked, the default since its runs end at
// packGap: on the H200 (cohort bench, 4b-shape, one run each, 2026-12-03)
// the host's forward call of a replay took 34.7, 34.5 and 84.0 µs at
// batch 1, 8 and 32 against 35.3, 73.5 and 121.1 copied one input at a
// time, and the steps 3.202, 3.916 and 6.284 ms/token against 3.239, 3.946
// and 6.455. COHORT_CUDA_GRAPH_PACK=0 copies one input at a time.
var graphPack = os.Getenv("COHORT_CUDA_GRAPH_PACK") != "0"

// packGap is the most unused capacity of an input that a packed copy
// carries to reach the next input: a run of inputs ends after one with
// more (a page list sized for the whole cache, say), so that no copy moves
// kilobytes of zeros.
const packGap = 1024

// replayPacked copies a replayed graph's metadata into its input buffers
// with one cuMemcpyHtoDAsync for each run of inputs whose buffers follow
// one another in the arena (allocations are arenaAlign-rounded, so the next
// buffer starts where the rounded capacity ends) and leave at most packGap
// bytes of their capacity unused. Each value lands at its
// buffer's offset in one zeroed staging span; the rest of a capacity and
// the padding between buffers, which no kernel reads, get zeros instead of
// the previous step's values.
func (b *Backend) replayPacked(key string, inputs []graphInput, vals [][]int32) {
	for i := 0; i < len(inputs); {
		j := i + 1
		for j < len(inputs) && inputs[j].ptr == inputs[j-1].ptr+devptr(roundArena(inputs[j-1].bytes)) &&
			inputs[j-1].bytes-4*int64(len(vals[j-1])) <= packGap {
			j++
		}
		start := inputs[i].ptr
		var end devptr
		for k := i; k < j; k++ {
			if n := len(vals[k]); n > 0 {
				end = inputs[k].ptr + devptr(4*n)
			}
		}
		if end > start {
			span := b.staging.span(int(end - start))
			if span == nil {
				panic(fmt.Sprintf("cuda: graph %s: step metadata does not fit the staging ring", key))
			}
			for k := i; k < j; k++ {
				if v := vals[k]; len(v) > 0 {
					copy(span[inputs[k].ptr-start:], unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v)))
				}
			}
			b.replayCopy(key, start, unsafe.Pointer(&span[0]), int64(end-start))
		}
		i = j
	}
}

// roundArena is bytes rounded up as the scratch arena rounds an
// allocation.
func roundArena(bytes int64) int64 { return (bytes + arenaAlign - 1) &^ (arenaAlign - 1) }

// replayCopy enqueues one metadata copy of a replayed graph.
func (b *Backend) replayCopy(key string, dst devptr, src unsafe.Pointer, bytes int64) {
	if err := memcpyHtoDAsync(dst, src, bytes); err != nil {
		panic(fmt.Sprintf("cuda: graph %s: metadata: %v", key, err))
	}
	b.graph.copies++
}

// stageInts copies graph step metadata (not empty) into the pinned staging
// ring and returns its address there; a graph step cannot fall back to a
// synchronous copy, so a full ring is a panic naming what.
func (b *Backend) stageInts(what string, v []int32) unsafe.Pointer {
	src := b.staging.take(unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), int64(len(v))*4))
	if src == nil {
		panic(fmt.Sprintf("cuda: %s: graph step metadata does not fit the staging ring", what))
	}
	return src
}

// graphUpload places int32 metadata for the step being captured or
// replayed into its fixed input buffer of capacity capElems (≥ len(v)),
// and reports false when no graph step is in progress. gen recomputes the
// values from a step's inputs (nil: they come from elsewhere, so the graph
// can only be replayed by running the model's ops).
func (b *Backend) graphUpload(op string, v []int32, capElems int, gen inputGen) (devptr, bool) {
	g := &b.graph
	if g.mode == graphOff {
		return 0, false
	}
	bytes, capBytes := int64(len(v))*4, int64(max(capElems, len(v), 1))*4
	var src unsafe.Pointer
	if len(v) > 0 {
		src = b.stageInts(op, v)
	}
	switch g.mode {
	case graphCapture:
		p := b.allocScratch(op, capBytes)
		g.cur.inputs = append(g.cur.inputs, graphInput{ptr: p, bytes: capBytes, gen: gen})
		if gen == nil {
			g.cur.direct = false
		}
		if bytes > 0 {
			g.pending = append(g.pending, pendingCopy{dst: p, src: src, bytes: bytes})
		}
		return p, true
	default: // replay
		if g.input >= len(g.cur.inputs) {
			panic(fmt.Sprintf("cuda: %s: graph %s: more metadata than captured", op, g.key))
		}
		in := g.cur.inputs[g.input]
		g.input++
		if p := b.allocScratch(op, capBytes); p != in.ptr || capBytes != in.bytes {
			panic(fmt.Sprintf("cuda: %s: graph %s: metadata buffer moved or resized", op, g.key))
		}
		if err := memcpyHtoDAsync(in.ptr, src, bytes); err != nil {
			panic(fmt.Sprintf("cuda: %s: graph metadata: %v", op, err))
		}
		return in.ptr, true
	}
}
