package safetensors

import (
	"encoding/binary"
	"strings"
	"testing"
)

// rawFile builds a file from a hand-written header and dataLen zero bytes.
func rawFile(header string, dataLen int) []byte {
	buf := make([]byte, 8+len(header)+dataLen)
	binary.LittleEndian.PutUint64(buf, uint64(len(header)))
	copy(buf[8:], header)
	return buf
}

// withLen is an 8-byte prefix claiming n header bytes, followed by body.
func withLen(n uint64, body string) []byte {
	buf := binary.LittleEndian.AppendUint64(nil, n)
	return append(buf, body...)
}

const f32a = `"dtype":"F32","shape":[1],"data_offsets":[0,4]`

func TestParseHeaderErrors(t *testing.T) {
	tests := []struct {
		name string
		buf  []byte
		want string
	}{
		{"nil", nil, "too short"},
		{"short", []byte{1, 0, 0}, "too short"},
		{"header past end", withLen(100, "{}"), "exceeds the 2 bytes"},
		{"header absurd", withLen(200<<20, "{}"), "limit"},
		{"header max uint64", withLen(^uint64(0), "{}"), "limit"},
		{"empty header", rawFile("", 0), "invalid JSON"},
		{"not json", rawFile(`{"a":`, 0), "invalid JSON"},
		{"array", rawFile(`[1,2]`, 0), "expected a JSON object"},
		{"string", rawFile(`"x"`, 0), "expected a JSON object"},
		{"trailing garbage", rawFile(`{}x`, 0), "trailing data"},
		{"two objects", rawFile(`{}{}`, 0), "trailing data"},
		{"bad utf8", rawFile("{\"a\xff\":1}", 0), "UTF-8"},
		{"entry not object", rawFile(`{"a":5}`, 0), `tensor "a": expected a JSON object`},
		{"entry null", rawFile(`{"a":null}`, 0), `tensor "a": expected a JSON object`},
		{"missing dtype", rawFile(`{"a":{"shape":[1],"data_offsets":[0,4]}}`, 4), `tensor "a": missing field "dtype"`},
		{"missing shape", rawFile(`{"a":{"dtype":"F32","data_offsets":[0,4]}}`, 4), `tensor "a": missing field "shape"`},
		{"missing offsets", rawFile(`{"a":{"dtype":"F32","shape":[1]}}`, 4), `tensor "a": missing field "data_offsets"`},
		{"unknown field", rawFile(`{"a":{`+f32a+`,"x":1}}`, 4), `tensor "a": unknown field "x"`},
		{"duplicate field", rawFile(`{"a":{`+f32a+`,"dtype":"F32"}}`, 4), `tensor "a": duplicate key "dtype"`},
		{"dtype number", rawFile(`{"a":{"dtype":3,"shape":[1],"data_offsets":[0,4]}}`, 4), `tensor "a": dtype: expected a string`},
		{"dtype null", rawFile(`{"a":{"dtype":null,"shape":[1],"data_offsets":[0,4]}}`, 4), `tensor "a": dtype: expected a string`},
		{"unknown dtype", rawFile(`{"a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}}`, 8), `tensor "a": unknown dtype "F64"`},
		{"shape string", rawFile(`{"a":{"dtype":"F32","shape":"1","data_offsets":[0,4]}}`, 4), `tensor "a": shape: expected an array`},
		{"shape null", rawFile(`{"a":{"dtype":"F32","shape":null,"data_offsets":[0,4]}}`, 4), `tensor "a": shape: expected an array`},
		{"shape float", rawFile(`{"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}}`, 4), `tensor "a": shape: element 0`},
		{"shape exp", rawFile(`{"a":{"dtype":"F32","shape":[1e0],"data_offsets":[0,4]}}`, 4), `tensor "a": shape: element 0`},
		{"shape string elem", rawFile(`{"a":{"dtype":"F32","shape":["1"],"data_offsets":[0,4]}}`, 4), `tensor "a": shape: element 0`},
		{"shape nested", rawFile(`{"a":{"dtype":"F32","shape":[[1]],"data_offsets":[0,4]}}`, 4), `tensor "a": shape: element 0`},
		{"shape huge int", rawFile(`{"a":{"dtype":"F32","shape":[99999999999999999999],"data_offsets":[0,4]}}`, 4), `tensor "a": shape: element 0`},
		{"negative dim", rawFile(`{"a":{"dtype":"F32","shape":[2,-1],"data_offsets":[0,4]}}`, 4), `tensor "a": shape [2 -1] has a negative dimension`},
		{"numel overflow", rawFile(`{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}}`, 4), `tensor "a": shape [4294967296 4294967296]: element count overflows`},
		{"bytes overflow", rawFile(`{"a":{"dtype":"I64","shape":[4611686018427387904],"data_offsets":[0,4]}}`, 4), `tensor "a": shape [4611686018427387904]: byte size overflows`},
		{"offsets not array", rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":4}}`, 4), `tensor "a": data_offsets: expected an array`},
		{"offsets one", rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[4]}}`, 4), `tensor "a": data_offsets: want 2 elements, got 1`},
		{"offsets three", rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4,4]}}`, 4), `tensor "a": data_offsets: want 2 elements, got 3`},
		{"offsets string", rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":["0",4]}}`, 4), `tensor "a": data_offsets: element 0`},
		{"offset negative", rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}}`, 4), `tensor "a": data_offsets: negative offset`},
		{"begin after end", rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}}`, 4), `tensor "a": data_offsets: begin 4 > end 0`},
		{"end past data", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, 4), `tensor "a": data_offsets: end 8 is beyond the 4-byte data buffer`},
		{"size mismatch", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`, 4), `tensor "a": data_offsets [0, 4] span 4 bytes, F32[2] needs 8`},
		{"overlap", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`, 12), `tensors "a" and "b" have overlapping data ranges`},
		{"same range", rawFile(`{"b":{`+f32a+`},"a":{`+f32a+`}}`, 4), `tensors "a" and "b" have overlapping`},
		{"duplicate name", rawFile(`{"a":{`+f32a+`},"a":{`+f32a+`}}`, 4), `duplicate key "a"`},
		{"metadata string", rawFile(`{"__metadata__":"x"}`, 0), `__metadata__: expected a JSON object`},
		{"metadata number value", rawFile(`{"__metadata__":{"k":1}}`, 0), `__metadata__: key "k": expected a string`},
		{"metadata null value", rawFile(`{"__metadata__":{"k":null}}`, 0), `__metadata__: key "k": expected a string`},
		{"metadata duplicate key", rawFile(`{"__metadata__":{"k":"1","k":"2"}}`, 0), `__metadata__: duplicate key "k"`},
		{"metadata twice", rawFile(`{"__metadata__":{},"__metadata__":{}}`, 0), `duplicate key "__metadata__"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts, meta, err := ParseHeader(tt.buf)
			if err == nil {
				t.Fatalf("no error; got %d tensors, meta %v", len(ts), meta)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "safetensors: ") || !strings.Contains(msg, tt.want) {
				t.Fatalf("error %q\nwant prefix %q and substring %q", msg, "safetensors: ", tt.want)
			}
		})
	}
}

func TestParseHeaderAccepts(t *testing.T) {
	tests := []struct {
		name  string
		buf   []byte
		count int
	}{
		{"empty object", rawFile(`{}`, 0), 0},
		{"metadata only", rawFile(`{"__metadata__":{"format":"pt"}}  `, 0), 0},
		{"padded with spaces", rawFile("{\"a\":{"+f32a+"}}     \n", 4), 1},
		{"scalar", rawFile(`{"a":{"dtype":"F32","shape":[],"data_offsets":[0,4]}}`, 4), 1},
		{"zero size", rawFile(`{"a":{"dtype":"BF16","shape":[0,7],"data_offsets":[0,0]}}`, 0), 1},
		{"zero size inside other", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"z":{"dtype":"I64","shape":[3,0],"data_offsets":[4,4]}}`, 8), 2},
		{"huge zero dim", rawFile(`{"a":{"dtype":"F32","shape":[4294967296,4294967296,0],"data_offsets":[0,0]}}`, 0), 1},
		{"gap and trailing bytes", rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 16), 1},
		{"field order", rawFile(`{"a":{"data_offsets":[0,4],"shape":[1],"dtype":"I32"}}`, 4), 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts, meta, err := ParseHeader(tt.buf)
			if err != nil {
				t.Fatal(err)
			}
			if len(ts) != tt.count || meta == nil {
				t.Fatalf("got %d tensors (want %d), meta %v", len(ts), tt.count, meta)
			}
			for _, x := range ts {
				if len(x.Data) != x.NumElements()*x.DType.Size() {
					t.Errorf("%s: %d data bytes for %s%v", x.Name, len(x.Data), x.DType, x.Shape)
				}
			}
		})
	}
}

func TestParseHeaderDataAliasesBuffer(t *testing.T) {
	buf := rawFile(`{"b":{"dtype":"I32","shape":[1],"data_offsets":[4,8]},"a":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}}`, 8)
	dataStart := len(buf) - 8
	binary.LittleEndian.PutUint32(buf[dataStart:], 7)
	binary.LittleEndian.PutUint32(buf[dataStart+4:], 9)
	ts, _, err := ParseHeader(buf)
	if err != nil {
		t.Fatal(err)
	}
	if ts[0].Name != "a" || ts[1].Name != "b" {
		t.Fatalf("not sorted by name: %s, %s", ts[0].Name, ts[1].Name)
	}
	if cap(ts[0].Data) != 4 {
		t.Errorf("cap(Data) = %d, want 4 (appends must not clobber neighbours)", cap(ts[0].Data))
	}
	buf[dataStart] = 8 // Data must alias buf, not copy it
	a, _ := ts[0].Int32s()
	b, _ := ts[1].Int32s()
	if a[0] != 8 || b[0] != 9 {
		t.Errorf("got a=%v b=%v, want [8] [9]", a, b)
	}
}
