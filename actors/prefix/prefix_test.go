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
		if _, err := x.Release(p); err != nil {
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
	if _, err := x.Release(3); err != nil {
		t.Fatal(err)
	}
	if _, err := x.Release(3); err == nil {
		t.Error("double release accepted")
	}
	if _, err := x.Release(99); err == nil || x.Acquire([]int32{99}) == nil {
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
				if freed, err := x.Release(p); err != nil || freed {
					t.Fatalf("release %d: freed %v, %v", p, freed, err)
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

// TestIndexReset: a reset frees the idle pages at once; a held page
// matches nothing from then on and is freed by its last release, once.
func TestIndexReset(t *testing.T) {
	x := NewIndex()
	h := BlockHashes([]int32{1, 2, 3, 4, 5, 6}, 2)
	for i, hh := range h {
		if ok, err := x.Insert(hh, int32(i)); !ok || err != nil {
			t.Fatal(ok, err)
		}
	}
	if err := x.Acquire([]int32{1}); err != nil { // page 1: two holders
		t.Fatal(err)
	}
	if _, err := x.Release(0); err != nil { // page 0 idle
		t.Fatal(err)
	}
	if freed := x.Reset(); !slices.Equal(freed, []int32{0}) {
		t.Fatalf("reset freed %v, want [0] (the idle page)", freed)
	}
	if m := x.Match(h); len(m) != 0 || x.Acquire([]int32{1}) == nil {
		t.Fatalf("after reset: match %v, or a forgotten page acquired", m)
	}
	if ok, err := x.Insert(h[0], 7); !ok || err != nil {
		t.Fatalf("insert after reset: %v %v", ok, err)
	}
	for _, c := range []struct {
		page  int32
		freed bool
	}{{1, false}, {1, true}, {2, true}} {
		if freed, err := x.Release(c.page); err != nil || freed != c.freed {
			t.Fatalf("release %d: freed %v (%v), want %v", c.page, freed, err, c.freed)
		}
	}
	if _, err := x.Release(1); err == nil {
		t.Error("a forgotten page released after it was freed")
	}
	if x.Cached() != 1 || x.Holders(7) != 1 {
		t.Errorf("cached %d, holders of page 7 %d; want 1 and 1", x.Cached(), x.Holders(7))
	}
}

// TestSnapshots: a reserved snapshot cannot be resumed from until it is
// committed and is never evicted; committed ones go least recently used
// first (a demoted one before all), and the resume point is the longest
// cached prefix that ends in a committed snapshot.
func TestSnapshots(t *testing.T) {
	h := BlockHashes(make([]int32, 40), 4) // 10 distinct chained hashes
	s := NewSnapshots(3)
	reserve := func(i int) int {
		t.Helper()
		p, ok := s.Reserve(h[i])
		if !ok {
			t.Fatalf("reserve block %d: no place", i)
		}
		return p
	}
	p1, p3, p5 := reserve(1), reserve(3), reserve(5)
	if p1 != 0 || p3 != 1 || p5 != 2 {
		t.Errorf("places %d %d %d, want 0 1 2 (lowest free first)", p1, p3, p5)
	}
	if n, _ := s.ResumePoint(h, 10); n != 0 {
		t.Errorf("resumed at %d blocks from reserved snapshots", n)
	}
	if _, ok := s.Reserve(h[7]); ok {
		t.Error("a reservation evicted a reserved snapshot")
	}
	if _, ok := s.Reserve(h[3]); ok {
		t.Error("block 3 reserved twice")
	}
	for _, c := range [][2]int{{1, p1}, {3, p3}, {5, p5}} {
		if !s.Commit(h[c[0]], c[1]) {
			t.Fatalf("commit block %d", c[0])
		}
	}
	if s.Commit(h[1], p1) || s.Commit(h[2], p1) {
		t.Error("a commit of a committed or never reserved snapshot succeeded")
	}
	if n, p := s.ResumePoint(h, 10); n != 6 || p != p5 {
		t.Errorf("resume point %d at place %d, want 6 at %d", n, p, p5)
	}
	if n, p := s.ResumePoint(h, 3); n != 2 || p != p1 {
		t.Errorf("resume point with 3 cached blocks: %d at %d, want 2 at %d", n, p, p1)
	}
	// Use order now: 3, 5, 1. Demoting 1 makes it the first to go.
	s.Demote(h[1])
	var got []int
	for _, i := range []int{7, 8, 9} {
		got = append(got, reserve(i))
	}
	if want := []int{p1, p3, p5}; !slices.Equal(got, want) {
		t.Errorf("evicted places %v, want %v", got, want)
	}
	if s.Evicted() != 3 || s.Len() != 3 || s.Has(h[1]) {
		t.Errorf("evicted %d, len %d, block 1 kept %v", s.Evicted(), s.Len(), s.Has(h[1]))
	}
	s.Cancel(h[9], got[2])
	if s.Has(h[9]) || s.Len() != 2 {
		t.Error("cancel kept the reservation")
	}
	s.Reset()
	if s.Len() != 0 || s.Commit(h[7], got[0]) {
		t.Error("reset kept a snapshot, or a reservation from before it committed")
	}
	if p := reserve(2); p != 0 {
		t.Errorf("after reset the first place is %d, want 0", p)
	}
}
