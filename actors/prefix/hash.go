// Package prefix is the prefix cache's index, pure like the planner: KV
// pages content-addressed by the hash of their token block and of every
// block before it, shared read-only between requests with reference
// counts, and kept after their last user until their pages are needed
// (least recently used first); and Gated DeltaNet state snapshots at block
// boundaries, in fixed places of their own, evicted the same way. A
// request can resume after the longest prefix that has both its pages and
// a snapshot at its end (a GDN layer's state cannot be rebuilt from pages).
//
// The planner owns both (actors/planner's cache.go); the ranks hold the
// snapshots' memory and execute the saves and restores a plan names. See
// docs/prefix-cache.md.
package prefix

import (
	"crypto/sha256"
	"encoding/binary"
)

// Hash names a full block of tokens together with everything before it.
type Hash [16]byte

// BlockHashes returns the chained hash of every full block of pageSize
// tokens: block i's hash covers block i-1's hash and block i's tokens, so
// equal hashes mean equal prefixes (up to a 128-bit collision). A partial
// last block has none.
func BlockHashes(tokens []int32, pageSize int) []Hash {
	if pageSize <= 0 {
		return nil
	}
	out := make([]Hash, 0, len(tokens)/pageSize)
	var prev Hash
	for start := 0; start+pageSize <= len(tokens); start += pageSize {
		prev = Chain(prev, tokens[start:start+pageSize])
		out = append(out, prev)
	}
	return out
}

// Chain is the hash of block after the block named prev (the zero Hash
// before the first block): how a sequence's next full block is named as
// its tokens grow.
func Chain(prev Hash, block []int32) Hash {
	buf := make([]byte, len(prev)+4*len(block))
	copy(buf, prev[:])
	for i, t := range block {
		binary.LittleEndian.PutUint32(buf[len(prev)+4*i:], uint32(t))
	}
	sum := sha256.Sum256(buf)
	var h Hash
	copy(h[:], sum[:len(h)])
	return h
}
