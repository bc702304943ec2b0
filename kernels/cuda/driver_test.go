//go:build cuda

package cuda

import (
	"math"
	"testing"
	"unsafe"
)

// TestDriverHotPath checks the calls a step makes hundreds of times (a
// launch, a memset, an async copy on the thread's stream) allocate nothing
// on the Go heap, and that they are ordered on the thread's stream: the
// copy sees the kernel's result without a context-wide synchronize.
func TestDriverHotPath(t *testing.T) {
	b := gpu(t)
	const n = 256
	y, err := memAlloc(n * 4)
	if err != nil {
		t.Fatal(err)
	}
	defer memFree(y)
	one := make([]float32, n)
	for i := range one {
		one[i] = 1
	}
	x, err := memAlloc(n * 4)
	if err != nil {
		t.Fatal(err)
	}
	defer memFree(x)
	if err := memcpyHtoD(x, unsafe.Pointer(&one[0]), n*4); err != nil {
		t.Fatal(err)
	}
	f, ok := b.funcs["add_f32"]
	if !ok {
		t.Fatal("no kernel add_f32")
	}
	args := []uint64{uint64(y), uint64(x), uint64(x), n}
	allocs := testing.AllocsPerRun(100, func() {
		if err := memcpyHtoDAsync(x, unsafe.Pointer(&one[0]), n*4); err != nil {
			t.Fatal(err)
		}
		if err := memsetD32(y, math.Float32bits(7), n); err != nil {
			t.Fatal(err)
		}
		if err := launchKernel(f, [3]int{1, 1, 1}, [3]int{128, 1, 1}, 0, args); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("copy + memset + launch allocate %v times per call, want 0", allocs)
	}
	got := make([]float32, n)
	if err := memcpyDtoH(unsafe.Pointer(&got[0]), y, n*4); err != nil {
		t.Fatal(err)
	}
	for i, v := range got {
		if v != 2 {
			t.Fatalf("y[%d] = %v after memset 7 then y = x + x with x = 1, want 2", i, v)
		}
	}
}

// TestLtBucket: the rows a timed cuBLASLt algorithm is kept for, by
// octave and, with ltQuarterBuckets, by quarter octave.
func TestLtBucket(t *testing.T) {
	defer func(v bool) { ltQuarterBuckets = v }(ltQuarterBuckets)
	for _, tc := range []struct {
		n               int
		octave, quarter int
	}{
		{1, 16, 16}, {16, 16, 16}, {17, 32, 20}, {20, 32, 20}, {21, 32, 24}, {144, 256, 160}, {160, 256, 160},
		{513, 1024, 640}, {896, 1024, 896}, {897, 1024, 1024}, {1024, 1024, 1024}, {8192, 8192, 8192}, {8255, 16384, 10240},
	} {
		key := ltKey{m: 2560, n: tc.n, k: 9216}
		for _, q := range []bool{false, true} {
			ltQuarterBuckets = q
			want := tc.octave
			if q {
				want = tc.quarter
			}
			b := ltBucket(key)
			if b.n != want || b.m != key.m || b.k != key.k {
				t.Errorf("ltBucket(n %d), quarters %v: %+v, want n %d and the rest unchanged", tc.n, q, b, want)
			}
			if b.n < tc.n {
				t.Errorf("ltBucket(n %d), quarters %v: bucket %d is below the rows", tc.n, q, b.n)
			}
		}
	}
}

func TestLtAlgosFromEnv(t *testing.T) {
	for _, tc := range []struct {
		v     string
		want  int
		error bool
	}{{"", 8, false}, {"1", 1, false}, {"32", 32, false}, {"0", 8, true}, {"33", 8, true}, {"many", 8, true}} {
		got, err := ltAlgosFromEnv(tc.v)
		if got != tc.want || (err != nil) != tc.error {
			t.Errorf("ltAlgosFromEnv(%q) = %d, %v; want %d, error %v", tc.v, got, err, tc.want, tc.error)
		}
	}
}
