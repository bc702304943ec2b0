package model

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"cohort/kernels"
)

// Architecture is one model family. It owns everything about the family
// that the house must not know: the config fields only it has, the size
// and shape of its per-request state, its weights and its forward pass.
// Adding an architecture means one package that calls Register in its init
// function, plus its line in model/all.
type Architecture interface {
	// ParseConfig reads the architecture's own fields from text, the
	// config.json object holding the language-model fields (text_config,
	// or the whole file for a flat config), into cfg.Params; fills the
	// shared fields config.json left at zero with its defaults
	// (Config.Defaults); and checks what it relies on. cfg has the shared
	// fields already.
	ParseConfig(text []byte, cfg *Config) error
	// StateSize says what one request's state costs on one rank of shard
	// with elemBytes bytes per KV cache element (4 on CPU, the CUDA
	// backend's KV type: 2 for bf16).
	StateSize(cfg *Config, shard Shard, elemBytes int) StateSize
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
	// per-request state lives in st, owned by the caller (the rank) and made
	// by this model's NewState.
	Forward(be kernels.Backend, st State, tokens []int32, b *kernels.Batch, outputRows []int) (kernels.Tensor, error)
	// NewState allocates the per-rank request state: `slots` concurrent
	// requests and `pages` KV pages of pageSize tokens.
	NewState(be kernels.Backend, slots, pages, pageSize int) State
}

// State is the per-request state of one rank (KV pages, recurrent state),
// kept outside the model and owned by the rank. Its contents are the
// architecture's business: the rank only resets slots.
type State interface {
	// Reset zeroes a slot's state in every layer. A slot is reset before it
	// is given to a new request.
	Reset(slot int)
}

// SnapshotState is implemented by states whose per-slot part (for Qwen3.5,
// every GDN layer's conv and recurrent state) can be copied into snapshot
// places of their own, for the prefix cache: the rank saves a slot at a
// block boundary the plan names, and restores it into the slot of a
// request that resumes there. KV pages are shared as they are and need no
// copy.
type SnapshotState interface {
	State
	// AllocSnapshots makes n places and returns the bytes of one (0: the
	// state cannot be snapshotted, no place was made).
	AllocSnapshots(n int) int64
	Save(slot, place int)    // copy slot's state into place
	Restore(place, slot int) // copy place into slot's state
}

// FreeableState is implemented by states that give their memory back
// before their backend closes, where the backend can (kernels.StateFreer):
// a rank frees the throwaway state of its scratch measurement so.
type FreeableState interface {
	State
	// Free gives back the state's KV pages and slots on be, the backend
	// that made them. The state must not be used again.
	Free(be kernels.Backend)
}

// FreeState frees st where it is a FreeableState; any other state is left
// to the garbage collector or to the backend's Close.
func FreeState(be kernels.Backend, st State) {
	if f, ok := st.(FreeableState); ok {
		f.Free(be)
	}
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
