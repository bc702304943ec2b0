package safetensors

import "math"

// DType is a tensor element type as spelled in safetensors headers.
type DType string

// Supported element types.
const (
	BF16 DType = "BF16"
	F16  DType = "F16"
	F32  DType = "F32"
	I32  DType = "I32"
	I64  DType = "I64"
)

// Size returns the number of bytes per element, or 0 for an unknown dtype.
func (d DType) Size() int {
	switch d {
	case BF16, F16:
		return 2
	case F32, I32:
		return 4
	case I64:
		return 8
	}
	return 0
}

// BF16ToF32 widens a bfloat16 bit pattern to float32 (exact).
func BF16ToF32(b uint16) float32 {
	return math.Float32frombits(uint32(b) << 16)
}

// F32ToBF16 rounds f to the nearest bfloat16, ties to even. Infinities stay
// infinite, overflow becomes infinity and NaN stays NaN (made quiet).
func F32ToBF16(f float32) uint16 {
	bits := math.Float32bits(f)
	if f != f {
		return uint16(bits>>16) | 0x0040
	}
	bits += 0x7fff + (bits>>16)&1
	return uint16(bits >> 16)
}

// F16ToF32 widens an IEEE half-precision bit pattern to float32 (exact).
func F16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f: // Inf or NaN; the payload is kept.
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp != 0:
		return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
	case mant == 0:
		return math.Float32frombits(sign)
	}
	// Subnormal: mant * 2^-24, normalise so the leading 1 is implicit.
	e := uint32(127 - 15 + 1)
	for mant&0x400 == 0 {
		mant <<= 1
		e--
	}
	return math.Float32frombits(sign | e<<23 | (mant&0x3ff)<<13)
}

// F32ToF16 rounds f to the nearest IEEE half-precision value, ties to even,
// producing subnormals where needed. Overflow becomes infinity and NaN stays
// NaN (made quiet).
func F32ToF16(f float32) uint16 {
	bits := math.Float32bits(f)
	sign := uint16(bits>>16) & 0x8000
	exp := int(bits>>23) & 0xff
	mant := bits & 0x7fffff
	if exp == 0xff {
		if mant != 0 {
			return sign | 0x7e00 | uint16(mant>>13)
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	switch {
	case e >= 0x1f:
		return sign | 0x7c00
	case e <= 0:
		if e < -10 {
			return sign // below half the smallest subnormal
		}
		// Subnormal result: shift the full 24-bit significand.
		return sign | uint16(roundShift(mant|0x800000, uint(14-e)))
	}
	// Normal result; a carry out of the mantissa correctly bumps the
	// exponent, up to infinity.
	return sign | uint16(roundShift(uint32(e)<<23|mant, 13))
}

// roundShift returns v >> s rounded to nearest, ties to even (0 < s < 32).
func roundShift(v uint32, s uint) uint32 {
	r := v >> s
	rem := v & (1<<s - 1)
	half := uint32(1) << (s - 1)
	if rem > half || (rem == half && r&1 == 1) {
		r++
	}
	return r
}
