package safetensors

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func writeJSON(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustWrite(t *testing.T, path string, tensors []Tensor, meta map[string]string) {
	t.Helper()
	if err := WriteFile(path, tensors, meta); err != nil {
		t.Fatal(err)
	}
}

func f32Tensor(name string, xs ...float32) Tensor {
	return Tensor{Name: name, DType: F32, Shape: []int{len(xs)}, Data: EncodeF32(xs)}
}

func TestOpenFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "w.safetensors")
	mustWrite(t, path, sampleTensors(), map[string]string{"format": "pt"})
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	names := f.Names()
	if !slices.IsSorted(names) || len(names) != len(sampleTensors()) {
		t.Errorf("Names() = %v", names)
	}
	x, ok := f.Tensor("z.f32")
	if !ok {
		t.Fatal("z.f32 missing")
	}
	if got, err := x.Float32(); err != nil || got[1] != -2.5 {
		t.Errorf("z.f32 = %v, %v", got, err)
	}
	x.Shape[0] = 99 // callers get their own copy of the shape
	if y, _ := f.Tensor("z.f32"); y.Shape[0] != 2 {
		t.Error("Tensor() shares the shape slice")
	}
	if _, ok := f.Tensor("nope"); ok {
		t.Error("found a missing tensor")
	}
	if m := f.Metadata(); m["format"] != "pt" {
		t.Errorf("Metadata() = %v", m)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, ok := f.Tensor("z.f32"); ok || len(f.Names()) != 0 {
		t.Error("tensors still visible after Close")
	}
}

// openNamed opens path, closed when the test ends, and checks the tensor
// names it lists.
func openNamed(t *testing.T, path string, want []string) *File {
	t.Helper()
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if !slices.Equal(f.Names(), want) {
		t.Errorf("Names() = %v, want %v", f.Names(), want)
	}
	return f
}

func TestOpenDirSingle(t *testing.T) {
	dir := t.TempDir()
	mustWrite(t, filepath.Join(dir, "model.safetensors"), []Tensor{f32Tensor("w", 1, 2)}, nil)
	openNamed(t, dir, []string{"w"})
}

// shardedDir writes two shards and an index that lists them correctly.
func shardedDir(t *testing.T) string {
	dir := t.TempDir()
	mustWrite(t, filepath.Join(dir, "model-00001-of-00002.safetensors"),
		[]Tensor{f32Tensor("a", 1), f32Tensor("b", 2, 3)}, map[string]string{"format": "pt", "shard": "1"})
	mustWrite(t, filepath.Join(dir, "model-00002-of-00002.safetensors"),
		[]Tensor{f32Tensor("c", 4, 5, 6)}, map[string]string{"format": "pt", "shard": "2"})
	writeJSON(t, filepath.Join(dir, indexName), `{
  "metadata": {"total_size": 24},
  "weight_map": {
    "a": "model-00001-of-00002.safetensors",
    "b": "model-00001-of-00002.safetensors",
    "c": "model-00002-of-00002.safetensors"
  }
}`)
	return dir
}

func TestOpenDirIndex(t *testing.T) {
	dir := shardedDir(t)
	// A stray model.safetensors must be ignored when an index exists.
	mustWrite(t, filepath.Join(dir, "model.safetensors"), []Tensor{f32Tensor("stray", 0)}, nil)
	f := openNamed(t, dir, []string{"a", "b", "c"})
	c, _ := f.Tensor("c")
	if got, err := c.Float32(); err != nil || !slices.Equal(got, []float32{4, 5, 6}) {
		t.Errorf("c = %v, %v", got, err)
	}
	if m := f.Metadata(); m["format"] != "pt" || m["shard"] != "2" {
		t.Errorf("Metadata() = %v", m)
	}
}

func TestOpenErrors(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(t *testing.T, dir string) string // returns the path to open
		want    []string
		sharded bool // start from shardedDir instead of an empty dir
	}{
		{"missing path", func(t *testing.T, dir string) string {
			return filepath.Join(dir, "nope")
		}, []string{"nope"}, false},
		{"empty dir", func(t *testing.T, dir string) string {
			return dir
		}, []string{indexName, singleName}, false},
		{"empty file", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "e.safetensors")
			writeJSON(t, p, "")
			return p
		}, []string{"e.safetensors", "empty"}, false},
		{"corrupt file", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "c.safetensors")
			os.WriteFile(p, rawFile(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, 4), 0o644)
			return p
		}, []string{"c.safetensors", `tensor "w"`, "beyond"}, false},
		{"missing shard", func(t *testing.T, dir string) string {
			os.Remove(filepath.Join(dir, "model-00002-of-00002.safetensors"))
			return dir
		}, []string{"model-00002-of-00002.safetensors", indexName}, true},
		{"tensor not in named shard", func(t *testing.T, dir string) string {
			mustWrite(t, filepath.Join(dir, "model-00002-of-00002.safetensors"), []Tensor{f32Tensor("d", 1)}, nil)
			return dir
		}, []string{`tensor "d"`, "missing from the weight_map"}, true},
		{"tensor in other shard", func(t *testing.T, dir string) string {
			writeJSON(t, filepath.Join(dir, indexName), `{"weight_map": {
  "a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors",
  "c": "model-00002-of-00002.safetensors"}}`)
			return dir
		}, []string{`tensor "b" is in shard model-00001-of-00002.safetensors`}, true},
		{"index lists absent tensor", func(t *testing.T, dir string) string {
			writeJSON(t, filepath.Join(dir, indexName), `{"weight_map": {
  "a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
  "c": "model-00002-of-00002.safetensors", "zz": "model-00002-of-00002.safetensors"}}`)
			return dir
		}, []string{`tensor "zz" is not in its shard model-00002-of-00002.safetensors`}, true},
		{"index without weight_map", func(t *testing.T, dir string) string {
			writeJSON(t, filepath.Join(dir, indexName), `{"metadata": {}}`)
			return dir
		}, []string{"no weight_map"}, true},
		{"index bad json", func(t *testing.T, dir string) string {
			writeJSON(t, filepath.Join(dir, indexName), `{"weight_map": {`)
			return dir
		}, []string{indexName, "invalid JSON"}, true},
		{"index duplicate tensor", func(t *testing.T, dir string) string {
			writeJSON(t, filepath.Join(dir, indexName), `{"weight_map": {"a": "x", "a": "y"}}`)
			return dir
		}, []string{`duplicate key "a"`}, true},
		{"index escaping shard", func(t *testing.T, dir string) string {
			writeJSON(t, filepath.Join(dir, indexName), `{"weight_map": {"a": "../x.safetensors"}}`)
			return dir
		}, []string{"not a local file name"}, true},
		{"index non-string shard", func(t *testing.T, dir string) string {
			writeJSON(t, filepath.Join(dir, indexName), `{"weight_map": {"a": 1}}`)
			return dir
		}, []string{`weight_map["a"]: expected a string`}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if tt.sharded {
				dir = shardedDir(t)
			}
			f, err := Open(tt.setup(t, dir))
			if err == nil {
				f.Close()
				t.Fatal("no error")
			}
			if !strings.HasPrefix(err.Error(), "safetensors: ") {
				t.Errorf("error %q lacks the safetensors: prefix", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestOpenMissingShardIsNotExist(t *testing.T) {
	dir := shardedDir(t)
	os.Remove(filepath.Join(dir, "model-00001-of-00002.safetensors"))
	_, err := Open(dir)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("error %v does not wrap fs.ErrNotExist", err)
	}
}

func TestWriteFileReplaces(t *testing.T) {
	path := filepath.Join(t.TempDir(), "w.safetensors")
	mustWrite(t, path, []Tensor{f32Tensor("old", 1)}, nil)
	mustWrite(t, path, []Tensor{f32Tensor("new", 2)}, nil)
	openNamed(t, path, []string{"new"})
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("temporary files left behind: %v", entries)
	}
	if err := WriteFile(path, []Tensor{{Name: "bad", DType: F32, Shape: []int{2}}}, nil); err == nil {
		t.Error("WriteFile accepted an invalid tensor")
	}
	if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 1 {
		t.Errorf("failed WriteFile left files: %v", entries)
	}
}
