package main

import (
	"errors"
	"flag"
	"runtime"
)

// placementFlags are the flags of the commands that run a model on ranks
// (serve, bench, generate, score): the checkpoint, the backend, the
// tensor-parallel degree and the GPU of each rank.
type placementFlags struct {
	dir, device, devices string
	tp                   int
	threads              int // CPU backend workers per rank (0: the command's default); only where registerThreads was called
}

// newPlacementFlagSet is the flag set of command name with the placement
// flags registered (tpUsage says what --tp does for it).
func newPlacementFlagSet(name, tpUsage string) (*flag.FlagSet, *placementFlags) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	p := &placementFlags{}
	p.register(fs, tpUsage)
	return fs, p
}

// newPromptFlagSet is newPlacementFlagSet with --threads and the input
// flags, for generate and score (prompt and promptUsage are --prompt's).
func newPromptFlagSet(name, tpUsage, prompt, promptUsage string) (*flag.FlagSet, *placementFlags, *inputFlags) {
	fs, p := newPlacementFlagSet(name, tpUsage)
	p.registerThreads(fs)
	in := &inputFlags{}
	in.register(fs, prompt, promptUsage)
	return fs, p, in
}

// maxPrefillUsage is --max-prefill-tokens' usage wherever it is "as serve".
const maxPrefillUsage = "prefill tokens per engine step (0: 8192 on cuda, vLLM's default on GPUs of 70 GB and more; 2048 on cpu)"

// maxPrefill is --max-prefill-tokens v resolved for the device: v when
// set, else maxPrefillFor's default.
func (p *placementFlags) maxPrefill(v int) int {
	if v != 0 {
		return v
	}
	return maxPrefillFor(p.device)
}

// maxPrefillFor is serve's prefill tokens per step on device: one 8k
// prompt a step on a GPU (its layers' scratch is reused, so the step's
// reserve is about 6 GiB for the 4b shape; 8k prefills then take one step
// instead of four: 176.9 against 195.9 ms on an H100, docs/gpu.md phase
// 16), 2048 on the CPU.
func maxPrefillFor(device string) int {
	if device == "cuda" {
		return cudaServeMaxPrefill
	}
	return serveMaxPrefill
}

// register adds --model, --device, --devices and --tp; tpUsage says what
// --tp does for the command.
func (p *placementFlags) register(fs *flag.FlagSet, tpUsage string) {
	fs.StringVar(&p.dir, "model", "", "model directory (default: the built-in tiny model)")
	fs.StringVar(&p.device, "device", "cpu", "backend: cpu, or cuda (a binary built with make build-cuda)")
	fs.StringVar(&p.devices, "devices", "", "with --device cuda: GPU of each rank, comma-separated, e.g. 1,0 (default 0..tp-1)")
	fs.IntVar(&p.tp, "tp", 1, tpUsage)
}

// registerThreads adds --threads.
func (p *placementFlags) registerThreads(fs *flag.FlagSet) {
	fs.IntVar(&p.threads, "threads", 0, "CPU backend workers (0: GOMAXPROCS)")
}

// check rejects a degree below 1 and a negative --threads.
func (p placementFlags) check() error {
	switch {
	case p.tp < 1:
		return errors.New("--tp must be at least 1")
	case p.threads < 0:
		return errors.New("--threads must not be negative")
	}
	return nil
}

// rankThreads is each CPU rank's share of the cores when the ranks run in
// this process.
func (p placementFlags) rankThreads() int {
	return max(runtime.GOMAXPROCS(0)/p.tp, 1)
}

// engine is whether the command runs through the engine (the ranks of
// serve): with more than one rank, or GPUs picked by --devices.
func (p placementFlags) engine() bool {
	return p.tp > 1 || p.devices != ""
}
