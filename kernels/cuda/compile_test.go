//go:build cuda

package cuda

import (
	"strings"
	"testing"
)

// TestCompileKernels compiles the embedded kernels with whatever NVRTC this
// host has, for every target the backend could pick, without a GPU. It
// catches source errors before device time is spent.
func TestCompileKernels(t *testing.T) {
	if err := loadNVRTC(); err != nil {
		t.Skipf("no NVRTC: %v", err)
	}
	maj, min, err := nvrtcVersion()
	if err != nil {
		t.Fatal(err)
	}
	src, err := kernelSource()
	if err != nil {
		t.Fatal(err)
	}
	compiled := 0
	for _, cc := range [][2]int{{9, 0}, {8, 0}} {
		for _, tg := range targetsFor(cc[0], cc[1]) {
			opts := append([]string{"--gpu-architecture=" + tg.arch}, nvrtcOptions...)
			img, log, err := nvrtcCompile(src, "cohort_kernels.cu", opts, tg.cubin)
			if err != nil {
				// An older NVRTC may not know the arch-specific target.
				if strings.Contains(err.Error(), "INVALID_OPTION") && tg.cubin {
					t.Logf("NVRTC %d.%d (%s): %s not supported: %v", maj, min, nvrtcLib.lib.Path, tg.arch, err)
					continue
				}
				t.Fatalf("NVRTC %d.%d (%s), %s: %v", maj, min, nvrtcLib.lib.Path, tg.arch, err)
			}
			if log != "" {
				t.Errorf("%s: compiler log is not empty:\n%s", tg.arch, log)
			}
			if !tg.cubin {
				for _, name := range kernelNames {
					if !strings.Contains(string(img), ".entry "+name+"(") {
						t.Errorf("%s: PTX lacks entry %s", tg.arch, name)
					}
				}
			}
			compiled++
			t.Logf("NVRTC %d.%d: %s: %d bytes", maj, min, tg.arch, len(img))
		}
	}
	if compiled == 0 {
		t.Fatal("no target compiled")
	}
}
