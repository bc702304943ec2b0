//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"os"

	"cohort/kernels"
)

// layerScratchOn turns on the reuse of a step's scratch from one decoder
// layer to the next (kernels.LayerScoper): the ops of layer i allocate from
// layer arena i%2, which BeginLayer(i) rewinds, so a step's scratch is what
// two layers take beside what lives for the whole step (the step arena,
// b.scratch: the embedding, the shared metadata, the logits and sampling),
// not what all its layers take (at least 5 MB a token for the 4b shape:
// an 8,255-token step ran out at 42.7 GB on an H100, docs/gpu.md phase 15).
// Reuse is safe in stream order: layer i+2's kernels run after layer i's.
// On by default (measured on an H100, 4b shape: serve's reserve for a
// 2,111-token step went from 21,804 to 1,852 MiB, and an 8,255-token step
// fits in 6,024 MiB); COHORT_CUDA_LAYER_SCRATCH=0 turns it off.
var layerScratchOn = os.Getenv("COHORT_CUDA_LAYER_SCRATCH") != "0"

// layerArenas are the two arenas the layers of a step alternate between.
type layerArenas struct {
	a   [2]arena
	cur int // where allocScratch takes from: 0 the step arena, 1 or 2 layer arena cur-1
}

var _ kernels.LayerScoper = (*Backend)(nil)

// BeginLayer is kernels.LayerScoper's: from here until BeginLayer(i+1) the
// ops allocate from layer arena i%2, rewound now (what layer i-2 made there
// is dead: layer i-1 read it). Outside a step, or with the reuse off, it
// does nothing.
func (b *Backend) BeginLayer(i int) {
	if !layerScratchOn || !b.inStep || i < 0 {
		return
	}
	a := &b.layers.a[i%2]
	a.rewind()
	b.layers.cur = i%2 + 1
}

// EndLayers is kernels.LayerScoper's: the ops after the last layer (the
// logits, sampling) allocate from the step arena again.
func (b *Backend) EndLayers() { b.layers.cur = 0 }

// curArena is the arena allocScratch takes from.
func (b *Backend) curArena() *arena { return b.arenaAt(b.layers.cur) }

// arenaAt is arena id: 0 the step arena, 1 or 2 a layer arena.
func (b *Backend) arenaAt(id int) *arena {
	if id == 0 {
		return &b.scratch
	}
	return &b.layers.a[id-1]
}

// inStepArena runs f with allocations from the step arena: for what several
// layers share (sharedMeta).
func (b *Backend) inStepArena(f func() devptr) devptr {
	cur := b.layers.cur
	b.layers.cur = 0
	defer func() { b.layers.cur = cur }()
	return f()
}

// scratchGen is the generation of every arena's chunks together: a recorded
// graph holds their addresses.
func (b *Backend) scratchGen() [3]uint64 {
	return [3]uint64{b.scratch.gen, b.layers.a[0].gen, b.layers.a[1].gen}
}

// layerBytes returns the most bytes each layer arena has held in use at
// once in the step in progress, summed, and their capacity.
func (b *Backend) layerBytes() (peak, capacity int64) {
	for i := range b.layers.a {
		a := &b.layers.a[i]
		_, c := a.usage()
		peak, capacity = peak+a.peak, capacity+c
	}
	return peak, capacity
}

// reserveLayers makes each layer arena one chunk of what the last step
// held in it at most (none for an arena it did not use), growing by small
// chunks past that, and returns their bytes.
func (b *Backend) reserveLayers() (int64, error) {
	var n int64
	for i := range b.layers.a {
		a := &b.layers.a[i]
		if err := a.reserve(a.lastPeak); err != nil {
			return n, fmt.Errorf("layer arena %d: %w", i, err)
		}
		_, c := a.usage()
		n += c
	}
	return n, nil
}

// resetLayers ends a step for the layer arenas: allocations return to the
// step arena, and each layer arena becomes one chunk (reset).
func (b *Backend) resetLayers() error {
	b.layers.cur = 0
	for i := range b.layers.a {
		if err := b.layers.a[i].reset(); err != nil {
			return fmt.Errorf("layer arena %d: %w", i, err)
		}
	}
	return nil
}

// freeLayers gives the layer arenas' memory back (Close).
func (b *Backend) freeLayers() error {
	return errors.Join(b.layers.a[0].free(), b.layers.a[1].free())
}
