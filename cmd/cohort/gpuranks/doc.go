// Package gpuranks places the engine's ranks on GPUs: each rank's CUDA
// backend on its GPU and an NCCL group per rank-group generation. It is what
// `cohort serve --device cuda` wires (cmd/cohort configureDevices) and what
// the GPU chaos test (cmd/cohort/gpuchaos) wires the same way. Its code has
// the build tag cuda; without it the package is empty.
package gpuranks
