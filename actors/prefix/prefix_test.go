package prefix

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestBlockHashes(t *testing.T) {
	a := BlockHashes([]int32{1, 2, 3, 4, 5, 6, 7}, 3)
	if len(a) != 2 {
		t.Fatalf("%d hashes for 7 tokens in blocks of 3, want 2 (the partial block has none)", len(a))
	}
	for _, tc := range []struct {
		name   string
		tokens []int32
		same   int // leading hashes equal to a's
	}{
		{"same prefix, other tail", []int32{1, 2, 3, 4, 5, 6, 9}, 2},
		{"second block differs", []int32{1, 2, 3, 4, 5, 0}, 1},
		{"first block differs", []int32{0, 2, 3, 4, 5, 6}, 0},
		{"a block equal only by position", []int32{4, 5, 6, 4, 5, 6}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := BlockHashes(tc.tokens, 3)
			for i := range b {
				if eq := b[i] == a[i]; eq != (i < tc.same) {
					t.Errorf("block %d: equal %v, want %v", i, eq, i < tc.same)
				}
			}
		})
	}
	if BlockHashes([]int32{1, 2}, 0) != nil {
		t.Error("page size 0 gave hashes")
	}
}

// TestIndexEvictionOrder: a released page waits for eviction in the order
// of release, a held one is never evicted, and a page used again leaves
// the idle list until it is released again.
func TestIndexEvictionOrder(t *testing.T) {
	x := NewIndex()
	h := BlockHashes([]int32{0, 1, 2, 3, 4, 5, 6, 7}, 2)
	for i, hh := range h {
		if ok, err := x.Insert(hh, int32(10+i)); !ok || err != nil {
			t.Fatalf("insert %d: %v %v", i, ok, err)
		}
	}
	for _, p := range []int32{12, 10, 13} {
		if err := x.Release(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := x.Acquire([]int32{10}); err != nil { // a new request reuses block 0
		t.Fatal(err)
	}
	var order []int32
	for {
		p, ok := x.Evict()
		if !ok {
			break
		}
		order = append(order, p)
	}
	if want := []int32{12, 13}; !slices.Equal(order, want) {
		t.Errorf("evicted %v, want %v (10 and 11 are held)", order, want)
	}
	if got := x.Match(h); !slices.Equal(got, []int32{10, 11}) {
		t.Errorf("match after eviction: %v, want [10 11] (block 2 is gone)", got)
	}
}

func TestIndexErrors(t *testing.T) {
	x := NewIndex()
	h := BlockHashes([]int32{1, 2}, 2)[0]
	if _, err := x.Insert(h, 3); err != nil {
		t.Fatal(err)
	}
	if ok, err := x.Insert(h, 4); ok || err != nil {
		t.Errorf("second insert of a cached block: %v %v, want not stored, no error", ok, err)
	}
	if _, err := x.Insert(BlockHashes([]int32{5, 6}, 2)[0], 3); err == nil {
		t.Error("a page cached twice")
	}
	if err := x.Release(3); err != nil {
		t.Fatal(err)
	}
	if err := x.Release(3); err == nil {
		t.Error("double release accepted")
	}
	if err := x.Release(99); err == nil || x.Acquire([]int32{99}) == nil {
		t.Error("release or acquire of an unknown page accepted")
	}
}

// TestIndexProperty drives the index with random requests that share
// prefixes and checks it against the plain rules: every page is in one
// place (free, held, or idle), nothing held is evicted, no page is freed
// twice, and a match returns pages that hold exactly those blocks.
func TestIndexProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const pages, pageSize = 24, 4
	x := NewIndex()
	free := make([]int32, pages)
	for i := range free {
		free[i] = int32(i)
	}
	content := map[int32]Hash{} // what a cached page holds
	var live []testReq
	for step := 0; step < 3000; step++ {
		if len(live) > 0 && (r.IntN(3) == 0 || len(free)+x.Idle() < 4) {
			i := r.IntN(len(live))
			for _, p := range live[i].pages {
				if err := x.Release(p); err != nil {
					t.Fatal(err)
				}
			}
			free = append(free, live[i].own...)
			live = slices.Delete(live, i, i+1)
			continue
		}
		// A prompt from a few shared system prompts plus a private tail.
		tokens := make([]int32, pageSize*(1+r.IntN(4)))
		sys := int32(r.IntN(3))
		for j := range tokens {
			tokens[j] = sys*100 + int32(j)
			if j >= pageSize*2 {
				tokens[j] = int32(r.IntN(1000))
			}
		}
		hashes := BlockHashes(tokens, pageSize)
		hit := x.Match(hashes)
		for i, p := range hit {
			if content[p] != hashes[i] {
				t.Fatalf("step %d: matched page %d holds another block", step, p)
			}
		}
		if err := x.Acquire(hit); err != nil {
			t.Fatal(err)
		}
		rq := testReq{pages: slices.Clone(hit)}
		for _, h := range hashes[len(hit):] {
			if len(free) == 0 {
				p, ok := x.Evict()
				if !ok {
					t.Fatalf("step %d: no page free or idle", step)
				}
				delete(content, p)
				free = append(free, p)
			}
			p := free[len(free)-1]
			free = free[:len(free)-1]
			if ok, err := x.Insert(h, p); err != nil {
				t.Fatal(err)
			} else if ok {
				content[p] = h
				rq.pages = append(rq.pages, p)
			} else {
				rq.own = append(rq.own, p)
			}
		}
		live = append(live, rq)
		held := map[int32]bool{}
		for _, l := range live {
			for _, p := range append(slices.Clone(l.pages), l.own...) {
				held[p] = true
			}
		}
		if n := len(free) + x.Cached() + countOwn(live); n != pages {
			t.Fatalf("step %d: %d pages accounted for, want %d", step, n, pages)
		}
		for _, p := range free {
			if held[p] {
				t.Fatalf("step %d: page %d both free and held", step, p)
			}
		}
	}
}

// testReq is a request of TestIndexProperty: the cached pages it holds and
// the private ones (blocks another request had cached first).
type testReq struct{ pages, own []int32 }

func countOwn(live []testReq) int {
	n := 0
	for _, l := range live {
		n += len(l.own)
	}
	return n
}

// TestSnapshots: the budget holds, eviction goes least recently used first
// and skips pinned snapshots, and the resume point is the longest cached
// prefix that ends in a snapshot.
func TestSnapshots(t *testing.T) {
	h := BlockHashes(make([]int32, 40), 4) // 10 distinct chained hashes
	s := NewSnapshots(300)
	id1, _, _ := s.Add(h[1], 100)
	id3, _, _ := s.Add(h[3], 100)
	id5, _, _ := s.Add(h[5], 100)
	if n, id := s.ResumePoint(h, 10); n != 6 || id != id5 {
		t.Errorf("resume point %d %d, want 6 at the snapshot of block 5", n, id)
	}
	if n, id := s.ResumePoint(h, 3); n != 2 || id != id1 {
		t.Errorf("resume point with 3 cached blocks: %d %d, want 2", n, id)
	}
	// id1 was touched last, then id5: id3 is the least recently used.
	if err := s.Pin(id3); err != nil {
		t.Fatal(err)
	}
	_, evicted, ok := s.Add(h[7], 150)
	if !ok || !slices.Equal(evicted, []SnapshotID{id5, id1}) {
		t.Errorf("evicted %v (ok %v), want [%d %d]: the pinned %d stays", evicted, ok, id5, id1, id3)
	}
	if s.Used() > 300 || s.Len() != 2 {
		t.Errorf("used %d of 300 in %d snapshots", s.Used(), s.Len())
	}
	if _, _, ok := s.Add(h[8], 250); ok {
		t.Error("a snapshot that cannot fit beside the pinned one was added")
	}
	if err := s.Unpin(id3); err != nil || s.Unpin(id3) == nil {
		t.Errorf("unpin: %v; a second unpin must fail", err)
	}
	if s.Pin(999) == nil {
		t.Error("pin of an unknown snapshot accepted")
	}
}
