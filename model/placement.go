package model

import "fmt"

// Shard names one rank of a tensor-parallel group.
type Shard struct {
	Rank, Size int
}

// Single is the shard of an unsharded (TP = 1) model.
var Single = Shard{Rank: 0, Size: 1}

// Segment is a contiguous run of a weight's split dimension, made of whole
// units (heads, or single rows) that are dealt out to the ranks separately.
type Segment struct {
	Len  int // length along the split dimension
	Unit int // granularity: a rank always receives whole units
	// ReplicateIfFewer lets a segment with fewer units than ranks give each
	// rank one whole unit (rank r takes unit ⌊r·units/size⌋): KV heads.
	ReplicateIfFewer bool
}

// Placement says how a weight is laid out across the ranks.
type Placement struct {
	Split    bool      // false: every rank holds the whole weight
	Dim      int       // the split dimension
	Segments []Segment // segments of Dim, in order; their lengths sum to the dim
}

// Replicated is the placement of a weight every rank holds whole.
var Replicated = Placement{}

// Split splits dimension dim of one segment (unit rows at a time).
func Split(dim, length, unit int) Placement {
	return Placement{Split: true, Dim: dim, Segments: []Segment{{Len: length, Unit: unit}}}
}

// WeightDecl declares one checkpoint tensor: its canonical name (without the
// model./model.language_model. prefix), its full shape and its placement.
type WeightDecl struct {
	Name  string
	Shape []int
	Place Placement
}

// ShardShape returns the shape of the rank's part of a weight.
func (d WeightDecl) ShardShape(s Shard) ([]int, error) {
	shape := append([]int(nil), d.Shape...)
	if !d.Place.Split {
		return shape, nil
	}
	if err := d.check(s); err != nil {
		return nil, err
	}
	n := 0
	for _, seg := range d.Place.Segments {
		_, l := seg.rangeFor(s)
		n += l
	}
	shape[d.Place.Dim] = n
	return shape, nil
}

func (d WeightDecl) check(s Shard) error {
	p := d.Place
	if p.Dim < 0 || p.Dim >= len(d.Shape) {
		return fmt.Errorf("model: %s: split dim %d out of range for shape %v", d.Name, p.Dim, d.Shape)
	}
	total := 0
	for _, seg := range p.Segments {
		if seg.Unit <= 0 || seg.Len%seg.Unit != 0 {
			return fmt.Errorf("model: %s: segment of %d is not a whole number of %d-wide units", d.Name, seg.Len, seg.Unit)
		}
		units := seg.Len / seg.Unit
		if seg.ReplicateIfFewer && units < s.Size {
			if s.Size%units != 0 {
				return fmt.Errorf("model: %s: tensor-parallel degree %d is not a multiple of %d units", d.Name, s.Size, units)
			}
		} else if units%s.Size != 0 {
			return fmt.Errorf("model: %s: tensor-parallel degree %d does not divide %d units of %d", d.Name, s.Size, units, seg.Unit)
		}
		total += seg.Len
	}
	if total != d.Shape[p.Dim] {
		return fmt.Errorf("model: %s: segments cover %d of dim %d (size %d)", d.Name, total, p.Dim, d.Shape[p.Dim])
	}
	return nil
}

// rangeFor returns the start (inside the segment) and length of the rank's part.
func (seg Segment) rangeFor(s Shard) (start, length int) {
	units := seg.Len / seg.Unit
	if seg.ReplicateIfFewer && units < s.Size {
		u := s.Rank * units / s.Size
		return u * seg.Unit, seg.Unit
	}
	per := units / s.Size * seg.Unit
	return s.Rank * per, per
}

// ShardData cuts the rank's part out of a full weight given in row-major
// order. The result is a new slice (or data itself when replicated).
func (d WeightDecl) ShardData(data []float32, s Shard) ([]float32, []int, error) {
	shape, err := d.ShardShape(s)
	if err != nil {
		return nil, nil, err
	}
	if n := numel(d.Shape); len(data) != n {
		return nil, nil, fmt.Errorf("model: %s: have %d values, shape %v needs %d", d.Name, len(data), d.Shape, n)
	}
	if !d.Place.Split {
		return data, shape, nil
	}
	outer := numel(d.Shape[:d.Place.Dim])
	inner := numel(d.Shape[d.Place.Dim+1:])
	full := d.Shape[d.Place.Dim]
	out := make([]float32, 0, numel(shape))
	for o := 0; o < outer; o++ {
		base := 0
		for _, seg := range d.Place.Segments {
			start, l := seg.rangeFor(s)
			from := (o*full + base + start) * inner
			out = append(out, data[from:from+l*inner]...)
			base += seg.Len
		}
	}
	return out, shape, nil
}

func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}
