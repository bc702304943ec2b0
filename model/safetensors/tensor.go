package safetensors

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Tensor is one named tensor. Data holds the raw little-endian elements;
// for tensors from a File it aliases a read-only mapping and must not be
// written to or used after the File is closed.
type Tensor struct {
	Name  string
	DType DType
	Shape []int
	Data  []byte
}

// NumElements returns the product of the dimensions (1 for a scalar), or -1
// if a dimension is negative or the product overflows int.
func (t Tensor) NumElements() int {
	n, err := numElements(t.Shape)
	if err != nil {
		return -1
	}
	return n
}

// numElements multiplies out a shape, rejecting negative dims and overflow.
// A zero dimension makes the count zero regardless of the others.
func numElements(shape []int) (int, error) {
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("shape %v has a negative dimension", shape)
		}
		if d == 0 {
			return 0, nil
		}
	}
	n := 1
	for _, d := range shape {
		if n > math.MaxInt/d {
			return 0, fmt.Errorf("shape %v: element count overflows", shape)
		}
		n *= d
	}
	return n, nil
}

// byteSize returns the number of data bytes a dtype and shape need.
func byteSize(d DType, shape []int) (int, error) {
	size := d.Size()
	if size == 0 {
		return 0, fmt.Errorf("unknown dtype %q", string(d))
	}
	n, err := numElements(shape)
	if err != nil {
		return 0, err
	}
	if n > math.MaxInt/size {
		return 0, fmt.Errorf("shape %v: byte size overflows", shape)
	}
	return n * size, nil
}

// check verifies that the tensor's Data matches its dtype and shape.
func (t Tensor) check() error {
	want, err := byteSize(t.DType, t.Shape)
	if err != nil {
		return err
	}
	if len(t.Data) != want {
		return fmt.Errorf("data is %d bytes, %s%v needs %d", len(t.Data), t.DType, t.Shape, want)
	}
	return nil
}

func (t Tensor) errorf(format string, args ...any) error {
	return fmt.Errorf("safetensors: tensor %q: %w", t.Name, fmt.Errorf(format, args...))
}

// Float32 converts a BF16, F16 or F32 tensor to a new []float32.
func (t Tensor) Float32() ([]float32, error) {
	if err := t.check(); err != nil {
		return nil, t.errorf("%w", err)
	}
	d := t.Data
	out := make([]float32, len(d)/t.DType.Size())
	switch t.DType {
	case BF16:
		for i := range out {
			out[i] = BF16ToF32(binary.LittleEndian.Uint16(d[2*i:]))
		}
	case F16:
		for i := range out {
			out[i] = F16ToF32(binary.LittleEndian.Uint16(d[2*i:]))
		}
	case F32:
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(d[4*i:]))
		}
	default:
		return nil, t.errorf("dtype %s is not a float type", t.DType)
	}
	return out, nil
}

// Int32s converts an I32 or I64 tensor to a new []int32. I64 values outside
// the int32 range are an error.
func (t Tensor) Int32s() ([]int32, error) {
	if err := t.check(); err != nil {
		return nil, t.errorf("%w", err)
	}
	d := t.Data
	switch t.DType {
	case I32:
		out := make([]int32, len(d)/4)
		for i := range out {
			out[i] = int32(binary.LittleEndian.Uint32(d[4*i:]))
		}
		return out, nil
	case I64:
		out := make([]int32, len(d)/8)
		for i := range out {
			v := int64(binary.LittleEndian.Uint64(d[8*i:]))
			if v < math.MinInt32 || v > math.MaxInt32 {
				return nil, t.errorf("element %d (%d) is out of int32 range", i, v)
			}
			out[i] = int32(v)
		}
		return out, nil
	}
	return nil, t.errorf("dtype %s is not an integer type", t.DType)
}

// EncodeBF16 rounds xs to bfloat16 and returns the little-endian bytes.
func EncodeBF16(xs []float32) []byte {
	return encode(xs, 2, func(b []byte, x float32) { binary.LittleEndian.PutUint16(b, F32ToBF16(x)) })
}

// EncodeF32 returns the little-endian bytes of xs.
func EncodeF32(xs []float32) []byte {
	return encode(xs, 4, func(b []byte, x float32) { binary.LittleEndian.PutUint32(b, math.Float32bits(x)) })
}

// EncodeI32 returns the little-endian bytes of xs.
func EncodeI32(xs []int32) []byte {
	return encode(xs, 4, func(b []byte, x int32) { binary.LittleEndian.PutUint32(b, uint32(x)) })
}

// encode lays xs out in size bytes each, written by put.
func encode[T any](xs []T, size int, put func([]byte, T)) []byte {
	out := make([]byte, size*len(xs))
	for i, x := range xs {
		put(out[size*i:], x)
	}
	return out
}
