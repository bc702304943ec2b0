package prefix

import (
	"container/list"
	"fmt"
)

// SnapshotID names one GDN state snapshot (every rank keeps its shard of it
// under the same id).
type SnapshotID uint64

// Snapshots is the budget of GDN state snapshots, each taken at the end of a
// cached block and named by that block's hash. Snapshots that a restore has
// pinned are never evicted; the others go least recently used first when a
// new one needs room.
type Snapshots struct {
	budget, used int64
	next         SnapshotID
	byHash       map[Hash]*snapshot
	byID         map[SnapshotID]*snapshot
	lru          list.List // unpinned snapshots, least recently used first
}

type snapshot struct {
	hash  Hash
	id    SnapshotID
	bytes int64
	pins  int
	lru   *list.Element // nil while pinned
}

// NewSnapshots returns an empty budget of budget bytes.
func NewSnapshots(budget int64) *Snapshots {
	return &Snapshots{budget: budget, byHash: map[Hash]*snapshot{}, byID: map[SnapshotID]*snapshot{}}
}

// Add records a snapshot of bytes at the end of block h and returns its id
// and the ids it evicted to make room (the ranks free those). A snapshot
// already taken at h is only touched. ok is false, and nothing changes,
// when the snapshot cannot fit beside the pinned ones.
func (s *Snapshots) Add(h Hash, bytes int64) (id SnapshotID, evicted []SnapshotID, ok bool) {
	if old, ok := s.byHash[h]; ok {
		s.touch(old)
		return old.id, nil, true
	}
	if bytes <= 0 || bytes > s.budget-s.pinned() {
		return 0, nil, false
	}
	for s.used+bytes > s.budget {
		evicted = append(evicted, s.evict())
	}
	s.next++
	sn := &snapshot{hash: h, id: s.next, bytes: bytes}
	sn.lru = s.lru.PushBack(sn)
	s.byHash[h], s.byID[sn.id] = sn, sn
	s.used += bytes
	return sn.id, evicted, true
}

// ResumePoint returns how many leading blocks of hashes a request can skip:
// the longest n ≤ cached (the blocks whose pages Index.Match found) whose
// last block has a snapshot, and that snapshot (touched, as used). 0 when
// none has.
func (s *Snapshots) ResumePoint(hashes []Hash, cached int) (int, SnapshotID) {
	for n := min(cached, len(hashes)); n > 0; n-- {
		if sn, ok := s.byHash[hashes[n-1]]; ok {
			s.touch(sn)
			return n, sn.id
		}
	}
	return 0, 0
}

// Pin keeps a snapshot from eviction while a restore reads it; Unpin ends
// that.
func (s *Snapshots) Pin(id SnapshotID) error {
	sn, ok := s.byID[id]
	if !ok {
		return fmt.Errorf("prefix: pin snapshot %d: unknown", id)
	}
	hold(&sn.pins, &sn.lru, &s.lru)
	return nil
}

// Unpin drops one pin of a snapshot.
func (s *Snapshots) Unpin(id SnapshotID) error {
	sn, ok := s.byID[id]
	if !ok {
		return fmt.Errorf("prefix: unpin snapshot %d: unknown", id)
	}
	if !drop(&sn.pins, &sn.lru, &s.lru, sn) {
		return fmt.Errorf("prefix: unpin snapshot %d: not pinned", id)
	}
	return nil
}

// Used is the bytes the snapshots take, Len their number.
func (s *Snapshots) Used() int64 { return s.used }

// Len is the number of snapshots kept.
func (s *Snapshots) Len() int { return len(s.byID) }

// Reset forgets every snapshot (a rebuilt group starts empty).
func (s *Snapshots) Reset() { *s = *NewSnapshots(s.budget) }

func (s *Snapshots) touch(sn *snapshot) {
	if sn.lru != nil {
		s.lru.MoveToBack(sn.lru)
	}
}

func (s *Snapshots) pinned() int64 {
	var n int64
	for _, sn := range s.byID {
		if sn.pins > 0 {
			n += sn.bytes
		}
	}
	return n
}

// evict removes the least recently used unpinned snapshot; Add calls it
// only while the pinned ones leave room, so there is one.
func (s *Snapshots) evict() SnapshotID {
	sn := s.lru.Remove(s.lru.Front()).(*snapshot)
	delete(s.byHash, sn.hash)
	delete(s.byID, sn.id)
	s.used -= sn.bytes
	return sn.id
}
