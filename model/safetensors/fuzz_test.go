package safetensors

import (
	"bytes"
	"testing"
)

func FuzzParseHeader(f *testing.F) {
	var valid bytes.Buffer
	if err := Write(&valid, sampleTensors(), map[string]string{"format": "pt"}); err != nil {
		f.Fatal(err)
	}
	v := valid.Bytes()
	f.Add(v)
	f.Add(v[:len(v)-1])         // truncated data
	f.Add(v[:20])               // truncated header
	f.Add(v[:7])                // truncated length
	f.Add([]byte{})             // empty
	f.Add(rawFile(`{}`, 0))     // no tensors
	f.Add(withLen(1<<40, "{}")) // absurd length
	for _, h := range []string{
		`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`,
		`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`,
		`{"a":{"dtype":"I64","shape":[4611686018427387904],"data_offsets":[0,4]}}`,
		`{"a":{"dtype":"BF16","shape":[-1],"data_offsets":[4,0]}}`,
		`{"__metadata__":{"k":1},"a":{"dtype":"X","shape":"s","data_offsets":[0]}}`,
		`{"a":{"dtype":"BF16","shape":[0,3],"data_offsets":[2,2]}}`,
	} {
		f.Add(rawFile(h, 12))
	}
	f.Fuzz(func(t *testing.T, buf []byte) {
		tensors, meta, err := ParseHeader(buf)
		if err != nil {
			if tensors != nil || meta != nil {
				t.Fatal("results returned alongside an error")
			}
			return
		}
		seen := map[string]bool{}
		for _, x := range tensors {
			n := x.NumElements()
			if n < 0 || len(x.Data) != n*x.DType.Size() {
				t.Fatalf("tensor %q: %d bytes for %s%v", x.Name, len(x.Data), x.DType, x.Shape)
			}
			if seen[x.Name] {
				t.Fatalf("duplicate tensor %q", x.Name)
			}
			seen[x.Name] = true
			if _, err := x.Float32(); err != nil && (x.DType == F32 || x.DType == BF16 || x.DType == F16) {
				t.Fatalf("Float32 on validated tensor: %v", err)
			}
		}
		// A successfully parsed file must survive a write/parse round trip.
		var out bytes.Buffer
		if err := Write(&out, tensors, meta); err != nil {
			t.Fatalf("re-encoding a parsed file: %v", err)
		}
		again, _, err := ParseHeader(out.Bytes())
		if err != nil || len(again) != len(tensors) {
			t.Fatalf("re-parse: %d tensors, %v", len(again), err)
		}
	})
}
