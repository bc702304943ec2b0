package cpu

import (
	"math"
	"slices"
	"strings"
	"testing"
)

func TestLinear(t *testing.T) {
	be := New(Options{Threads: 3})
	r := newRand(2)
	x, w := randSlice(r, 2*3*33, 1), randSlice(r, 65*33, 1)
	y := be.Linear(be.Upload(x, 2, 3, 33), be.Upload(w, 65, 33))
	if !slices.Equal(y.Shape(), []int{2, 3, 65}) {
		t.Fatalf("shape %v", y.Shape())
	}
	want := make([]float32, 6*65)
	naiveMatmul(want, x, w, 6, 33, 65)
	checkClose(t, "Linear", data(y), want, 1e-5)
}

func TestShapeMismatchPanicsWithOpName(t *testing.T) {
	be := New(Options{})
	defer func() {
		msg, _ := recover().(string)
		if !strings.Contains(msg, "Linear") || !strings.Contains(msg, "[2 3]") {
			t.Errorf("panic message %q does not name the op and shapes", msg)
		}
	}()
	be.Linear(be.Upload(make([]float32, 6), 2, 3), be.Upload(make([]float32, 8), 2, 4))
}

func TestRMSNorms(t *testing.T) {
	be := New(Options{Threads: 2})
	r := newRand(3)
	const T, heads, g = 3, 4, 16
	const eps = 1e-6
	x, z, w := randSlice(r, T*heads*g, 2), randSlice(r, T*heads*g, 3), randSlice(r, g, 0.5)
	delta := randSlice(r, T*heads*g, 1)

	// rms returns 1/sqrt(mean(x²)+eps) of group i in float64.
	rms := func(v []float32, i int) float64 {
		var ss float64
		for _, e := range v[i*g : (i+1)*g] {
			ss += float64(e) * float64(e)
		}
		return 1 / math.Sqrt(ss/g+eps)
	}
	zc, gated := make([]float32, len(x)), make([]float32, len(x))
	sum := make([]float32, len(x))
	for i := range sum {
		sum[i] = x[i] + delta[i]
	}
	zcSum := make([]float32, len(x))
	for i := range x {
		grp, j := i/g, i%g
		zc[i] = float32(float64(x[i]) * rms(x, grp) * (1 + float64(w[j])))
		zcSum[i] = float32(float64(sum[i]) * rms(sum, grp) * (1 + float64(w[j])))
		zi := float64(z[i])
		gated[i] = float32(float64(x[i]) * rms(x, grp) * float64(w[j]) * zi * sigmoid64(zi))
	}
	xt, wt := be.Upload(x, T, heads*g), be.Upload(w, g)
	checkClose(t, "RMSNorm", data(be.RMSNorm(xt, wt, eps)), zc, 1e-6)
	checkClose(t, "GatedRMSNorm", data(be.GatedRMSNorm(xt, be.Upload(z, T, heads*g), wt, eps)), gated, 1e-6)
	s, n := be.AddRMSNorm(xt, be.Upload(delta, T, heads*g), wt, eps)
	checkClose(t, "AddRMSNorm sum", data(s), sum, 0)
	checkClose(t, "AddRMSNorm normed", data(n), zcSum, 1e-6)
	// Whole-row norm (len(w) = cols).
	wRow := randSlice(r, heads*g, 0.5)
	full := data(be.RMSNorm(xt, be.Upload(wRow, heads*g), eps))
	for i := range T {
		var ss float64
		for _, e := range x[i*heads*g : (i+1)*heads*g] {
			ss += float64(e) * float64(e)
		}
		inv := 1 / math.Sqrt(ss/(heads*g)+eps)
		for j := range heads * g {
			want := float64(x[i*heads*g+j]) * inv * (1 + float64(wRow[j]))
			if d := math.Abs(float64(full[i*heads*g+j]) - want); d > 1e-5 {
				t.Fatalf("row norm [%d,%d]: got %v want %v", i, j, full[i*heads*g+j], want)
			}
		}
	}
}

func TestRoPE(t *testing.T) {
	be := New(Options{Threads: 2})
	r := newRand(4)
	const heads, hd, rot = 3, 16, 8
	const theta = 1e7
	positions := []int32{0, 1, 7, 300, 4097}
	T := len(positions)
	x := randSlice(r, T*heads*hd, 1)
	xt := be.Upload(x, T, heads*hd)
	be.RoPE(xt, positions, hd, rot, theta)
	got := data(xt)
	half := rot / 2
	for row, p := range positions {
		for h := range heads {
			base := row*heads*hd + h*hd
			for i := range hd {
				want := float64(x[base+i])
				if i < rot {
					j := i % half
					ang := float64(p) * math.Pow(theta, -2*float64(j)/rot)
					c, s := math.Cos(ang), math.Sin(ang)
					if i < half {
						want = float64(x[base+i])*c - float64(x[base+i+half])*s
					} else {
						want = float64(x[base+i])*c + float64(x[base+i-half])*s
					}
				}
				// float32 angles of large positions carry ~1e-7·pos of error.
				tol := 1e-6 + 2e-7*float64(p)
				if d := math.Abs(float64(got[base+i]) - want); d > tol {
					t.Errorf("pos %d head %d dim %d: got %v want %v", p, h, i, got[base+i], want)
				}
			}
		}
	}
}

func TestSmallOps(t *testing.T) {
	be := New(Options{})
	r := newRand(6)

	// Upload copies; Download copies.
	src := []float32{1, 2, 3, 4, 5, 6}
	u := be.Upload(src, 2, 3)
	src[0] = 99
	d := be.Download(u)
	d[1] = 99
	if got := data(u); !slices.Equal(got, []float32{1, 2, 3, 4, 5, 6}) {
		t.Errorf("Upload/Download did not copy: %v", got)
	}

	// Embedding with a vocab shard [10, 13).
	table := randSlice(r, 3*4, 1)
	emb := data(be.Embedding(be.Upload(table, 3, 4), []int32{9, 10, 12, 13, 11}, 10))
	want := slices.Concat(make([]float32, 4), table[0:4], table[8:12], make([]float32, 4), table[4:8])
	checkClose(t, "Embedding", emb, want, 0)

	// SplitQueryGate: per-head [q | gate] interleave.
	const heads, hd = 3, 2
	qg := make([]float32, 2*heads*2*hd)
	for i := range qg {
		qg[i] = float32(i)
	}
	q, g := be.SplitQueryGate(be.Upload(qg, 2, heads*2*hd), heads, hd)
	checkClose(t, "SplitQueryGate q", data(q), []float32{0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21}, 0)
	checkClose(t, "SplitQueryGate gate", data(g), []float32{2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23}, 0)

	// SwiGLU and Add.
	a, b := randSlice(r, 10, 4), randSlice(r, 10, 4)
	at, bt := be.Upload(a, 2, 5), be.Upload(b, 2, 5)
	sw, sum := data(be.SwiGLU(at, bt)), data(be.Add(at, bt))
	for i := range a {
		ai := float64(a[i])
		if w := ai * sigmoid64(ai) * float64(b[i]); math.Abs(float64(sw[i])-w) > 1e-6 {
			t.Errorf("SwiGLU[%d] = %v, want %v", i, sw[i], w)
		}
		if sum[i] != a[i]+b[i] {
			t.Errorf("Add[%d] = %v", i, sum[i])
		}
	}

	// SelectRows.
	sel := be.SelectRows(at, []int{1, 1, 0})
	if !slices.Equal(sel.Shape(), []int{3, 5}) {
		t.Errorf("SelectRows shape %v", sel.Shape())
	}
	checkClose(t, "SelectRows", data(sel), slices.Concat(a[5:], a[5:], a[:5]), 0)
}
