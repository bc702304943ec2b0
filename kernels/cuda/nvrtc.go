//go:build cuda

package cuda

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

//go:embed kernels/*.cu
var kernelFS embed.FS

// kernelSource concatenates kernels/*.cu in name order.
func kernelSource() (string, error) {
	names, err := fs.Glob(kernelFS, "kernels/*.cu")
	if err != nil {
		return "", err
	}
	slices.Sort(names)
	var sb strings.Builder
	for _, n := range names {
		src, err := kernelFS.ReadFile(n)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&sb, "// ---- %s ----\n", n)
		sb.Write(src)
		sb.WriteString("\n")
	}
	return sb.String(), nil
}

// target is one NVRTC compilation target: a real architecture gives a cubin,
// a virtual one PTX that the driver finishes.
type target struct {
	arch  string
	cubin bool
}

// targetsFor lists the targets to try for compute capability maj.min, best
// first: on sm_90 (Hopper) the arch-specific sm_90a cubin, falling back to
// compute_90 PTX for NVRTC versions that lack sm_90a; elsewhere PTX for the
// exact compute_XY.
func targetsFor(maj, min int) []target {
	virtual := target{arch: fmt.Sprintf("compute_%d%d", maj, min)}
	if maj == 9 && min == 0 {
		return []target{{arch: "sm_90a", cubin: true}, virtual}
	}
	return []target{virtual}
}

// nvrtcOptions are the compile options besides the architecture. Fast math
// stays off (IEEE division, square root and denormals).
var nvrtcOptions = []string{"-default-device", "-std=c++17"}

// loadKernels compiles the kernels for the device (or takes them from the
// on-disk cache) and loads them with load, trying the targets of targetsFor
// in order until one loads. It returns a description of what was loaded.
func loadKernels(maj, min int, load func(image []byte) error) (string, error) {
	if err := loadNVRTC(); err != nil {
		return "", err
	}
	vmaj, vmin, err := nvrtcVersion()
	if err != nil {
		return "", fmt.Errorf("cuda: %w", err)
	}
	src, err := kernelSource()
	if err != nil {
		return "", fmt.Errorf("cuda: reading embedded kernels: %w", err)
	}
	var errs []error
	for _, t := range targetsFor(maj, min) {
		opts := append([]string{"--gpu-architecture=" + t.arch}, nvrtcOptions...)
		ext := ".ptx"
		if t.cubin {
			ext = ".cubin"
		}
		path := cachePath(cacheKey(src, opts, vmaj, vmin) + ext)
		desc := fmt.Sprintf("%s (NVRTC %d.%d, compiled)", t.arch, vmaj, vmin)
		var img []byte
		if path != "" {
			if c, err := os.ReadFile(path); err == nil && len(c) > 0 {
				img, desc = c, fmt.Sprintf("%s (NVRTC %d.%d, cached %s)", t.arch, vmaj, vmin, path)
			}
		}
		fromCache := img != nil
		if !fromCache {
			if img, _, err = nvrtcCompile(src, "cohort_kernels.cu", opts, t.cubin); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", t.arch, err))
				continue
			}
		}
		if err := load(img); err != nil {
			errs = append(errs, fmt.Errorf("%s: loading the module: %w", t.arch, err))
			if fromCache {
				os.Remove(path) // a bad cache entry is recompiled next time
			}
			continue
		}
		if path != "" && !fromCache {
			writeCache(path, img)
		}
		return desc, nil
	}
	return "", fmt.Errorf("cuda: kernels for sm_%d%d with NVRTC %d.%d (%s): %w", maj, min, vmaj, vmin, nvrtcLib.lib.Path, errors.Join(errs...))
}

// cacheKey is the sha256 of everything the image depends on.
func cacheKey(src string, opts []string, vmaj, vmin int) string {
	h := sha256.New()
	fmt.Fprintf(h, "nvrtc %d.%d\n%s\n", vmaj, vmin, strings.Join(opts, " "))
	h.Write([]byte(src))
	return hex.EncodeToString(h.Sum(nil))
}

// cachePath returns $XDG_CACHE_HOME/cohort/ptx/name (or the user cache
// directory's), or "" when there is none.
func cachePath(name string) string {
	dir := os.Getenv("XDG_CACHE_HOME")
	if dir == "" {
		d, err := os.UserCacheDir()
		if err != nil {
			return ""
		}
		dir = d
	}
	return filepath.Join(dir, "cohort", "ptx", name)
}

// writeCache stores img atomically; failures only cost a recompile later.
func writeCache(path string, img []byte) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return
	}
	_, werr := f.Write(img)
	cerr := f.Close()
	if werr != nil || cerr != nil || os.Rename(f.Name(), path) != nil {
		os.Remove(f.Name())
	}
}
