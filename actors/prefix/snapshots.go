package prefix

import "container/list"

// Snapshots is the bookkeeping of Gated DeltaNet state snapshots. There is
// a fixed number of places (the ranks allocate them: each holds one slot's
// whole state, every rank its shard of it under the same place), and each
// snapshot is taken at the end of a cached block and named by that block's
// hash.
//
// A snapshot is reserved when a plan names its save and committed once the
// step that saves it ran; only a committed one can be resumed from.
// Committed snapshots are evicted least recently used first when a
// reservation finds no free place; reserved ones never are. Nothing needs
// pinning while a request restores one: a step restores before its forward
// pass and saves after it, and a restore is planned in the step that reads
// it, so a place evicted and reserved again in that step is written only
// after it was read.
type Snapshots struct {
	places  int
	byHash  map[Hash]*snapshot
	free    []int     // free places, the lowest last
	lru     list.List // committed snapshots, least recently used first
	evicted uint64
}

type snapshot struct {
	hash  Hash
	place int
	lru   *list.Element // nil while reserved
}

// NewSnapshots returns empty bookkeeping of places places.
func NewSnapshots(places int) *Snapshots {
	s := &Snapshots{places: max(places, 0)}
	s.Reset()
	return s
}

// Has reports whether a snapshot at the end of block h is reserved or
// committed (so taking another would be waste).
func (s *Snapshots) Has(h Hash) bool {
	_, ok := s.byHash[h]
	return ok
}

// Reserve names a place for a snapshot at the end of block h: a free one,
// or the place of the least recently used committed snapshot, which is
// evicted. ok is false, reserving nothing, when h already has a snapshot or
// every place is reserved.
func (s *Snapshots) Reserve(h Hash) (place int, ok bool) {
	if s.Has(h) {
		return 0, false
	}
	switch {
	case len(s.free) > 0:
		place = s.free[len(s.free)-1]
		s.free = s.free[:len(s.free)-1]
	case s.lru.Len() > 0:
		old := s.lru.Remove(s.lru.Front()).(*snapshot)
		delete(s.byHash, old.hash)
		s.evicted++
		place = old.place
	default:
		return 0, false
	}
	s.byHash[h] = &snapshot{hash: h, place: place}
	return place, true
}

// Commit makes the snapshot reserved at place for h usable: the step that
// saved it ran. It reports false, changing nothing, when that reservation
// is gone (Reset since).
func (s *Snapshots) Commit(h Hash, place int) bool {
	sn, ok := s.byHash[h]
	if !ok || sn.place != place || sn.lru != nil {
		return false
	}
	sn.lru = s.lru.PushBack(sn)
	return true
}

// Cancel gives back a reservation whose step will not run.
func (s *Snapshots) Cancel(h Hash, place int) {
	if sn, ok := s.byHash[h]; ok && sn.place == place && sn.lru == nil {
		delete(s.byHash, h)
		s.free = append(s.free, place)
	}
}

// Demote makes a committed snapshot the next to be evicted (its request
// took a later one that supersedes it).
func (s *Snapshots) Demote(h Hash) {
	if sn, ok := s.byHash[h]; ok && sn.lru != nil {
		s.lru.MoveToFront(sn.lru)
	}
}

// ResumePoint returns how many leading blocks of hashes a request can skip:
// the longest n ≤ cached (the blocks whose pages Index.Match found) whose
// last block has a committed snapshot, and that snapshot's place (touched,
// as used). 0 when none has.
func (s *Snapshots) ResumePoint(hashes []Hash, cached int) (n, place int) {
	for n := min(cached, len(hashes)); n > 0; n-- {
		if sn, ok := s.byHash[hashes[n-1]]; ok && sn.lru != nil {
			s.lru.MoveToBack(sn.lru)
			return n, sn.place
		}
	}
	return 0, 0
}

// Places is the number of places, Len the snapshots reserved or committed.
func (s *Snapshots) Places() int { return s.places }

// Len is the number of snapshots reserved or committed.
func (s *Snapshots) Len() int { return len(s.byHash) }

// Evicted counts the snapshots evicted so far (Reset does not count).
func (s *Snapshots) Evicted() uint64 { return s.evicted }

// Reset forgets every snapshot (a rebuilt group starts empty): every place
// is free again and a pending Commit finds nothing.
func (s *Snapshots) Reset() {
	s.byHash = map[Hash]*snapshot{}
	s.lru.Init()
	s.free = s.free[:0]
	for p := s.places - 1; p >= 0; p-- {
		s.free = append(s.free, p)
	}
}
