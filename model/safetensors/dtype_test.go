package safetensors

import (
	"math"
	"testing"
)

func TestDTypeSize(t *testing.T) {
	for d, want := range map[DType]int{BF16: 2, F16: 2, F32: 4, I32: 4, I64: 8, "F64": 0, "": 0} {
		if got := d.Size(); got != want {
			t.Errorf("%q.Size() = %d, want %d", d, got, want)
		}
	}
}

func bits(u uint32) float32 { return math.Float32frombits(u) }

// rounding is one float32 and the 16-bit pattern it rounds to.
type rounding struct {
	in   float32
	want uint16
}

// TestF32To16Bit checks the roundings of float32 to bfloat16 and float16 (to
// nearest, ties to even; overflow to Inf), and that NaNs stay NaNs.
func TestF32To16Bit(t *testing.T) {
	for _, f := range []struct {
		name      string
		conv      func(float32) uint16
		exp, mant uint16 // a NaN keeps every exponent bit set and some mantissa bit
		nans      []uint32
		cases     []rounding
	}{
		{"F32ToBF16", F32ToBF16, 0x7f80, 0x7f, []uint32{0x7fc00000, 0x7f800001, 0xff800001, 0x7f80ffff}, []rounding{
			{0, 0x0000},
			{float32(math.Copysign(0, -1)), 0x8000},
			{1, 0x3f80},
			{-2, 0xc000},
			{bits(0x3f808000), 0x3f80}, // tie, even stays
			{bits(0x3f818000), 0x3f82}, // tie, odd rounds up
			{bits(0x3f808001), 0x3f81}, // above tie
			{bits(0x3f807fff), 0x3f80}, // below tie
			{3.140625, 0x4049},
			{math.MaxFloat32, 0x7f80},      // overflows to +Inf
			{bits(0x7f7f7fff), 0x7f7f},     // largest value that stays finite
			{bits(0x00000001), 0x0000},     // tiny subnormal rounds to zero
			{bits(0x00018000), 0x0002},     // subnormal tie to even (odd 1 -> 2)
			{bits(0x00010000), 0x0001},     // exact bf16 subnormal
			{float32(math.Inf(1)), 0x7f80}, // +Inf
			{float32(math.Inf(-1)), 0xff80},
		}},
		{"F32ToF16", F32ToF16, 0x7c00, 0x3ff, []uint32{0x7fc00000, 0x7f800001, 0xff800001, 0x7f801fff}, []rounding{
			{0, 0x0000},
			{float32(math.Copysign(0, -1)), 0x8000},
			{1, 0x3c00},
			{-2, 0xc000},
			{0.1, 0x2e66},
			{1 + 1.0/2048, 0x3c00}, // tie, even stays
			{1 + 3.0/2048, 0x3c02}, // tie, odd rounds up
			{1 + 1.0/1024, 0x3c01}, // exact
			{65504, 0x7bff},        // max finite
			{65519, 0x7bff},        // below tie with Inf
			{65520, 0x7c00},        // tie rounds to even = Inf
			{1e10, 0x7c00},         // overflow
			{0x1p-14, 0x0400},      // min normal
			{0x1p-24, 0x0001},      // min subnormal
			{0x1p-25, 0x0000},      // tie with zero -> even zero
			{0x1.8p-25, 0x0001},    // above tie
			{0x1.8p-24, 0x0002},    // subnormal tie, odd rounds up
			{0x1.ff8p-15, 0x03ff},  // max subnormal
			{0x1.ffcp-15, 0x0400},  // tie above max subnormal rounds into min normal
			{-0x1p-24, 0x8001},     // negative subnormal
			{0x1p-30, 0x0000},      // underflow
			{bits(0x00000001), 0x0000},
			{float32(math.Inf(1)), 0x7c00},
			{float32(math.Inf(-1)), 0xfc00},
		}},
	} {
		for _, c := range f.cases {
			if got := f.conv(c.in); got != c.want {
				t.Errorf("%s(%g [%#08x]) = %#04x, want %#04x", f.name, c.in, math.Float32bits(c.in), got, c.want)
			}
		}
		for _, nan := range f.nans {
			if got := f.conv(bits(nan)); got&f.exp != f.exp || got&f.mant == 0 {
				t.Errorf("%s(NaN %#08x) = %#04x, not a NaN", f.name, nan, got)
			}
		}
	}
}

func TestF16ToF32Known(t *testing.T) {
	tests := []struct {
		in   uint16
		want float32
	}{
		{0x3c00, 1}, {0xc000, -2}, {0x7bff, 65504}, {0x0400, 0x1p-14},
		{0x0001, 0x1p-24}, {0x03ff, 0x1.ff8p-15}, {0x8001, -0x1p-24},
		{0x7c00, float32(math.Inf(1))}, {0xfc00, float32(math.Inf(-1))},
	}
	for _, tt := range tests {
		if got := F16ToF32(tt.in); got != tt.want {
			t.Errorf("F16ToF32(%#04x) = %g, want %g", tt.in, got, tt.want)
		}
	}
	if got := F16ToF32(0x7e00); got == got {
		t.Errorf("F16ToF32(0x7e00) = %g, want NaN", got)
	}
}

// TestHalfExhaustive checks, for every 16-bit pattern, that widening then
// narrowing is the identity (NaN stays NaN), and that the midpoints between
// neighbouring finite values round to the even neighbour.
func TestHalfExhaustive(t *testing.T) {
	formats := []struct {
		name   string
		widen  func(uint16) float32
		narrow func(float32) uint16
		inf    uint16
	}{
		{"bf16", BF16ToF32, F32ToBF16, 0x7f80},
		{"f16", F16ToF32, F32ToF16, 0x7c00},
	}
	for _, f := range formats {
		for i := range 1 << 16 {
			h := uint16(i)
			x := f.widen(h)
			got := f.narrow(x)
			if x != x {
				if y := f.widen(got); y == y {
					t.Fatalf("%s: NaN %#04x came back as %#04x", f.name, h, got)
				}
				continue
			}
			if got != h {
				t.Fatalf("%s: %#04x -> %g -> %#04x", f.name, h, x, got)
			}
			mag := h & 0x7fff
			if mag >= f.inf-1 {
				continue // the neighbour is Inf or NaN
			}
			lo, hi := x, f.widen(h+1)
			mid := lo + (hi-lo)/2 // exact: a half value has few significant bits
			even := h
			if h&1 == 1 {
				even = h + 1
			}
			if r := f.narrow(mid); r != even {
				t.Fatalf("%s: midpoint of %#04x,%#04x (%g) -> %#04x, want %#04x", f.name, h, h+1, mid, r, even)
			}
			up := math.Nextafter32(mid, hi)
			down := math.Nextafter32(mid, lo)
			if f.narrow(up) != h+1 || f.narrow(down) != h {
				t.Fatalf("%s: values around midpoint of %#04x,%#04x round wrongly", f.name, h, h+1)
			}
		}
	}
}

func TestEncode(t *testing.T) {
	if got := EncodeBF16([]float32{1, -2}); string(got) != "\x80\x3f\x00\xc0" {
		t.Errorf("EncodeBF16 = % x", got)
	}
	if got := EncodeF32([]float32{1}); string(got) != "\x00\x00\x80\x3f" {
		t.Errorf("EncodeF32 = % x", got)
	}
}
