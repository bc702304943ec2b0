// Package gpuchaos holds the GPU chaos test of tensor parallelism over NCCL
// (build tag cuda; it skips without two GPUs). It is a package of its own so
// that its test binary stays small (tools/cuda/tp-test.sh carries it to the
// GPU machine): the engine, the CUDA backend and NCCL, without the HTTP edge.
// The engine is wired the way `cohort serve --device cuda --tp 2 --devices
// 1,0` wires it (cmd/cohort configureDevices).
package gpuchaos
