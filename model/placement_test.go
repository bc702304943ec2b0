package model

import (
	"slices"
	"strings"
	"testing"
)

func seq(n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(i)
	}
	return out
}

func TestShardData(t *testing.T) {
	tests := []struct {
		name  string
		decl  WeightDecl
		shard Shard
		shape []int
		want  []float32
	}{
		{"replicated", WeightDecl{Name: "w", Shape: []int{2, 2}}, Shard{1, 2}, []int{2, 2}, []float32{0, 1, 2, 3}},
		{"rows rank1", WeightDecl{Name: "w", Shape: []int{4, 2}, Place: Split(0, 4, 1)}, Shard{1, 2}, []int{2, 2}, []float32{4, 5, 6, 7}},
		{"cols rank0", WeightDecl{Name: "w", Shape: []int{2, 4}, Place: Split(1, 4, 1)}, Shard{0, 2}, []int{2, 2}, []float32{0, 1, 4, 5}},
		{"head units", WeightDecl{Name: "w", Shape: []int{8, 1}, Place: Split(0, 8, 4)}, Shard{1, 2}, []int{4, 1}, []float32{4, 5, 6, 7}},
		{"segments", WeightDecl{Name: "w", Shape: []int{8, 1}, Place: Placement{Split: true,
			Segments: []Segment{{Len: 2, Unit: 1}, {Len: 2, Unit: 1}, {Len: 4, Unit: 2}}}}, Shard{1, 2}, []int{4, 1}, []float32{1, 3, 6, 7}},
		{"replicate kv", WeightDecl{Name: "w", Shape: []int{2, 1}, Place: Placement{Split: true,
			Segments: []Segment{{Len: 2, Unit: 1, ReplicateIfFewer: true}}}}, Shard{3, 4}, []int{1, 1}, []float32{1}},
		{"3d conv", WeightDecl{Name: "w", Shape: []int{4, 1, 2}, Place: Split(0, 4, 1)}, Shard{1, 2}, []int{2, 1, 2}, []float32{4, 5, 6, 7}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, shape, err := tt.decl.ShardData(seq(numel(tt.decl.Shape)), tt.shard)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(shape, tt.shape) || !slices.Equal(got, tt.want) {
				t.Fatalf("got %v %v, want %v %v", shape, got, tt.shape, tt.want)
			}
		})
	}
}

// TestShardsPartition checks that the ranks' parts of a split weight
// together hold every value exactly once.
func TestShardsPartition(t *testing.T) {
	d := WeightDecl{Name: "qkv", Shape: []int{24, 3}, Place: Placement{Split: true,
		Segments: []Segment{{Len: 8, Unit: 2}, {Len: 8, Unit: 2}, {Len: 8, Unit: 4}}}}
	for _, size := range []int{1, 2} {
		seen := map[float32]int{}
		for r := 0; r < size; r++ {
			part, _, err := d.ShardData(seq(72), Shard{r, size})
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range part {
				seen[v]++
			}
		}
		for v := 0; v < 72; v++ {
			if seen[float32(v)] != 1 {
				t.Fatalf("size %d: value %d seen %d times", size, v, seen[float32(v)])
			}
		}
	}
}

func TestShardErrors(t *testing.T) {
	tests := []struct {
		decl WeightDecl
		s    Shard
		want string
	}{
		{WeightDecl{Name: "q", Shape: []int{12, 1}, Place: Split(0, 12, 4)}, Shard{0, 2}, "does not divide 3 units"},
		{WeightDecl{Name: "k", Shape: []int{4, 1}, Place: Placement{Split: true, Segments: []Segment{{Len: 4, Unit: 2, ReplicateIfFewer: true}}}}, Shard{0, 3}, "not a multiple of 2 units"},
		{WeightDecl{Name: "x", Shape: []int{4}, Place: Split(1, 4, 1)}, Shard{0, 2}, "split dim 1 out of range"},
		{WeightDecl{Name: "y", Shape: []int{6}, Place: Split(0, 4, 1)}, Shard{0, 2}, "segments cover 4"},
	}
	for _, tt := range tests {
		_, err := tt.decl.ShardShape(tt.s)
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), tt.decl.Name) {
			t.Errorf("%s: err = %v, want %q", tt.decl.Name, err, tt.want)
		}
	}
}

func TestCanonicalName(t *testing.T) {
	tests := []struct {
		in, want string
		skip     bool
	}{
		{"model.language_model.layers.0.mlp.up_proj.weight", "layers.0.mlp.up_proj.weight", false},
		{"model.embed_tokens.weight", "embed_tokens.weight", false},
		{"lm_head.weight", "lm_head.weight", false},
		{"model.visual.blocks.0.attn.qkv.weight", "", true},
		{"mtp.fc.weight", "", true},
		{"something.else", "something.else", false},
	}
	for _, tt := range tests {
		got, skip := CanonicalName(tt.in)
		if got != tt.want || skip != tt.skip {
			t.Errorf("CanonicalName(%q) = %q, %v; want %q, %v", tt.in, got, skip, tt.want, tt.skip)
		}
	}
}

func TestRegistry(t *testing.T) {
	if err := Register("TestArch", nil); err == nil {
		t.Fatal("nil architecture accepted")
	}
	if _, err := Lookup("NoSuchArch"); err == nil || !strings.Contains(err.Error(), `unknown architecture "NoSuchArch"`) {
		t.Fatalf("Lookup unknown: %v", err)
	}
}

func TestRegistryRejectsDuplicates(t *testing.T) {
	if err := Register("TestDuplicateArch", testArch{}); err != nil {
		t.Fatal(err)
	}
	err := Register("TestDuplicateArch", testArch{})
	if err == nil || !strings.Contains(err.Error(), "already registered") {
		t.Fatalf("duplicate: %v", err)
	}
	if a, err := Lookup("TestDuplicateArch"); err != nil || a == nil {
		t.Fatalf("Lookup: %v", err)
	}
}
