package model

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"cohort/kernels"
)

// Architecture is one model family: it declares its weights for a shard and
// builds a runnable model from loaded weights. Adding an architecture means
// one package that calls Register in its init function.
type Architecture interface {
	// Declare lists every weight of the checkpoint with its full shape and its
	// tensor-parallel placement. It fails when the degree does not fit the
	// model's heads.
	Declare(cfg *Config, shard Shard) ([]WeightDecl, error)
	// Build binds loaded (already sharded) weights into a runnable model.
	Build(cfg *Config, shard Shard, weights map[string]kernels.Tensor) (Model, error)
}

// Model runs forward steps over a flat batch on one rank.
type Model interface {
	// Forward runs one step for the batch's rows (token ids in tokens) and
	// returns the logits [len(outputRows), vocab] of the requested rows. The
	// per-request state lives in st, owned by the caller (the rank).
	Forward(be kernels.Backend, st *State, tokens []int32, b *kernels.Batch, outputRows []int) (kernels.Tensor, error)
	// NewState allocates the per-rank request state: KV pages and GDN slots.
	NewState(be kernels.Backend, slots, pages, pageSize int) *State
}

// State is the per-request state of one rank, kept outside the model.
type State struct {
	KV  kernels.KVCache   // paged KV cache of the full-attention layers
	GDN kernels.StatePool // conv + recurrent state of the GDN layers
	// ID is unique in the process (NewID) and never reused, unlike an
	// address; 0 means none was given. Backends key recorded steps on it.
	ID uint64
}

var lastID atomic.Uint64

// NewID returns a process-unique, never reused, non-zero identity for a
// model instance or a State.
func NewID() uint64 { return lastID.Add(1) }

var registry = struct {
	sync.Mutex
	archs map[string]Architecture
}{archs: map[string]Architecture{}}

// Register adds an architecture under config.json's architectures[0] name.
// It fails on a duplicate name.
func Register(name string, a Architecture) error {
	registry.Lock()
	defer registry.Unlock()
	if name == "" || a == nil {
		return fmt.Errorf("model: register: empty name or nil architecture")
	}
	if _, dup := registry.archs[name]; dup {
		return fmt.Errorf("model: architecture %q is already registered", name)
	}
	registry.archs[name] = a
	return nil
}

// MustRegister is Register for init functions: a duplicate is a programming
// error caught by the first test run.
func MustRegister(name string, a Architecture) {
	if err := Register(name, a); err != nil {
		panic(err)
	}
}

// Lookup returns the architecture registered under name.
func Lookup(name string) (Architecture, error) {
	registry.Lock()
	defer registry.Unlock()
	if a, ok := registry.archs[name]; ok {
		return a, nil
	}
	names := make([]string, 0, len(registry.archs))
	for n := range registry.archs {
		names = append(names, n)
	}
	sort.Strings(names)
	return nil, fmt.Errorf("model: unknown architecture %q (supported: %s)", name, strings.Join(names, ", "))
}
