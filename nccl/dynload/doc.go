// Package dynload is Cohort's one loader of versioned shared libraries
// (NVRTC, cuBLASLt, NCCL): their sonames differ between CUDA 11, 12 and 13,
// so the cuda build links none of them and opens them with dlopen at run
// time instead. Each library has a documented search list (Spec): the
// environment variable first, when set, then absolute paths and sonames in
// order; the first that loads and has every symbol wins, and the error
// lists every path tried with the reason it failed.
//
// It lives under nccl because nccl may import nothing of Cohort's but its
// own sub-packages, and kernels/cuda may import nccl; both use it. It needs
// cgo (dlopen) and nothing else; without cgo it is empty.
package dynload
