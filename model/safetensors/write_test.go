package safetensors

import (
	"bytes"
	"encoding/binary"
	"math"
	"slices"
	"strings"
	"testing"
)

func encodeF16(xs []float32) []byte {
	return encode(xs, 2, func(b []byte, x float32) { binary.LittleEndian.PutUint16(b, F32ToF16(x)) })
}

func encodeI64(xs []int64) []byte {
	return encode(xs, 8, func(b []byte, x int64) { binary.LittleEndian.PutUint64(b, uint64(x)) })
}

// sampleTensors covers every dtype plus scalar and zero-size shapes.
func sampleTensors() []Tensor {
	fs := []float32{1, -2.5, 0.375, 1024, 0, -0.125}
	return []Tensor{
		{Name: "z.f32", DType: F32, Shape: []int{2, 3}, Data: EncodeF32(fs)},
		{Name: "a.bf16", DType: BF16, Shape: []int{3, 2}, Data: EncodeBF16(fs)},
		{Name: "m.f16", DType: F16, Shape: []int{6}, Data: encodeF16(fs)},
		{Name: "i.i32", DType: I32, Shape: []int{3}, Data: EncodeI32([]int32{-7, 0, math.MaxInt32})},
		{Name: "i.i64", DType: I64, Shape: []int{2}, Data: encodeI64([]int64{math.MinInt32, 42})},
		{Name: "scalar", DType: F32, Shape: []int{}, Data: EncodeF32([]float32{3})},
		{Name: "empty", DType: BF16, Shape: []int{0, 4}, Data: nil},
	}
}

func TestWriteRoundTrip(t *testing.T) {
	in := sampleTensors()
	meta := map[string]string{"format": "pt", "quote\"<&>": "ünïcode"}
	var buf bytes.Buffer
	if err := Write(&buf, in, meta); err != nil {
		t.Fatal(err)
	}
	raw := buf.Bytes()
	if n := binary.LittleEndian.Uint64(raw); (8+n)%8 != 0 {
		t.Errorf("data starts at %d, not 8-aligned", 8+n)
	}
	out, gotMeta, err := ParseHeader(raw)
	if err != nil {
		t.Fatal(err)
	}
	if len(gotMeta) != 2 || gotMeta["format"] != "pt" || gotMeta["quote\"<&>"] != "ünïcode" {
		t.Errorf("metadata = %v", gotMeta)
	}
	want := slices.Clone(in)
	slices.SortFunc(want, func(a, b Tensor) int { return strings.Compare(a.Name, b.Name) })
	if len(out) != len(want) {
		t.Fatalf("got %d tensors, want %d", len(out), len(want))
	}
	for i, w := range want {
		g := out[i]
		if g.Name != w.Name || g.DType != w.DType || !slices.Equal(g.Shape, w.Shape) || !bytes.Equal(g.Data, w.Data) {
			t.Errorf("tensor %d: got %s %s%v, want %s %s%v", i, g.Name, g.DType, g.Shape, w.Name, w.DType, w.Shape)
		}
	}
	// Sorted by name means data is laid out in name order, contiguously.
	if !bytes.Equal(raw[len(raw)-4:], EncodeF32([]float32{-0.125})) {
		t.Error("last bytes are not the last element of the last tensor by name")
	}
}

func TestRoundTripValues(t *testing.T) {
	var buf bytes.Buffer
	if err := Write(&buf, sampleTensors(), nil); err != nil {
		t.Fatal(err)
	}
	out, meta, err := ParseHeader(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if len(meta) != 0 {
		t.Errorf("metadata = %v, want empty", meta)
	}
	byName := map[string]Tensor{}
	for _, x := range out {
		byName[x.Name] = x
	}
	wantF := []float32{1, -2.5, 0.375, 1024, 0, -0.125}
	for _, name := range []string{"z.f32", "a.bf16", "m.f16"} {
		got, err := byName[name].Float32()
		if err != nil || !slices.Equal(got, wantF) {
			t.Errorf("%s.Float32() = %v, %v; want %v", name, got, err, wantF)
		}
	}
	if got, err := byName["scalar"].Float32(); err != nil || !slices.Equal(got, []float32{3}) {
		t.Errorf("scalar = %v, %v", got, err)
	}
	if got, err := byName["empty"].Float32(); err != nil || len(got) != 0 {
		t.Errorf("empty = %v, %v", got, err)
	}
	if got, err := byName["i.i32"].Int32s(); err != nil || !slices.Equal(got, []int32{-7, 0, math.MaxInt32}) {
		t.Errorf("i32 = %v, %v", got, err)
	}
	if got, err := byName["i.i64"].Int32s(); err != nil || !slices.Equal(got, []int32{math.MinInt32, 42}) {
		t.Errorf("i64 = %v, %v", got, err)
	}
}

func TestTensorConversionErrors(t *testing.T) {
	tests := []struct {
		name string
		t    Tensor
		conv func(Tensor) error
		want string
	}{
		{"float of int", Tensor{Name: "x", DType: I32, Shape: []int{1}, Data: make([]byte, 4)}, asFloat, "not a float type"},
		{"int of float", Tensor{Name: "x", DType: F32, Shape: []int{1}, Data: make([]byte, 4)}, asInt, "not an integer type"},
		{"i64 too big", Tensor{Name: "x", DType: I64, Shape: []int{2}, Data: encodeI64([]int64{1, math.MaxInt32 + 1})}, asInt, "element 1 (2147483648) is out of int32 range"},
		{"i64 too small", Tensor{Name: "x", DType: I64, Shape: []int{1}, Data: encodeI64([]int64{math.MinInt32 - 1})}, asInt, "out of int32 range"},
		{"short data", Tensor{Name: "x", DType: F32, Shape: []int{2}, Data: make([]byte, 4)}, asFloat, "data is 4 bytes, F32[2] needs 8"},
		{"unknown dtype", Tensor{Name: "x", DType: "U8", Shape: []int{1}, Data: make([]byte, 1)}, asFloat, `unknown dtype "U8"`},
		{"negative dim", Tensor{Name: "x", DType: I32, Shape: []int{-1}}, asInt, "negative dimension"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.conv(tt.t)
			if err == nil || !strings.HasPrefix(err.Error(), `safetensors: tensor "x": `) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
	if n := (Tensor{Shape: []int{-1}}).NumElements(); n != -1 {
		t.Errorf("NumElements of bad shape = %d, want -1", n)
	}
}

func asFloat(t Tensor) error { _, err := t.Float32(); return err }
func asInt(t Tensor) error   { _, err := t.Int32s(); return err }

func TestWriteErrors(t *testing.T) {
	ok := Tensor{Name: "a", DType: F32, Shape: []int{1}, Data: make([]byte, 4)}
	tests := []struct {
		name    string
		tensors []Tensor
		meta    map[string]string
		want    string
	}{
		{"duplicate", []Tensor{ok, ok}, nil, `duplicate tensor name "a"`},
		{"reserved", []Tensor{{Name: "__metadata__", DType: F32, Shape: []int{}, Data: make([]byte, 4)}}, nil, "reserved"},
		{"size mismatch", []Tensor{{Name: "b", DType: BF16, Shape: []int{3}, Data: make([]byte, 4)}}, nil, `tensor "b": data is 4 bytes`},
		{"unknown dtype", []Tensor{{Name: "b", DType: "F64", Shape: []int{1}, Data: make([]byte, 8)}}, nil, `tensor "b": unknown dtype`},
		{"negative dim", []Tensor{{Name: "b", DType: F32, Shape: []int{-1}}}, nil, `tensor "b": shape [-1] has a negative`},
		{"bad utf8 name", []Tensor{{Name: "\xff", DType: F32, Shape: []int{0}}}, nil, "UTF-8"},
		{"bad utf8 meta", nil, map[string]string{"k": "\xff"}, "UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			err := Write(&buf, tt.tensors, tt.meta)
			if err == nil || !strings.HasPrefix(err.Error(), "safetensors: ") || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
			if buf.Len() != 0 {
				t.Errorf("wrote %d bytes before failing validation", buf.Len())
			}
		})
	}
}

func TestWriteEmpty(t *testing.T) {
	var buf bytes.Buffer
	if err := Write(&buf, nil, nil); err != nil {
		t.Fatal(err)
	}
	ts, meta, err := ParseHeader(buf.Bytes())
	if err != nil || len(ts) != 0 || len(meta) != 0 {
		t.Fatalf("got %v %v %v", ts, meta, err)
	}
	if buf.Len() != 16 || buf.String()[8:] != "{}      " {
		t.Errorf("encoding = %q", buf.String())
	}
}
