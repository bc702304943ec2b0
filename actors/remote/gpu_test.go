package remote

import (
	"bytes"
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"cohort/actors"
	"cohort/actors/remote/rankpb"
	"cohort/model"
	"cohort/nccl"
)

// fakeIDs is a UniqueIDSource without NCCL: id n carries n in its first
// bytes. size overrides the length of the ids it makes (0: 128); err, if
// set, is returned instead.
type fakeIDs struct {
	mu   sync.Mutex
	made [][]byte
	size int
	err  error
}

func (f *fakeIDs) NewUniqueID() ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	id := make([]byte, orDefault(f.size, nccl.UniqueIDBytes))
	binary.BigEndian.PutUint64(id, uint64(len(f.made)+1))
	f.made = append(f.made, id)
	return id, nil
}

func (f *fakeIDs) ids() [][]byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.made)
}

// orDefault is v, or def when v is 0.
func orDefault(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// placeGen runs the id step of one placement of generation gen over size
// ranks and returns each rank's LoadShard.
func placeGen(t *testing.T, cfg Config, gen uint64, size int) []*rankpb.LoadShard {
	t.Helper()
	g := &remoteGroup{pool: &workerPool{cfg: cfg}, gen: gen, size: size}
	placed := make([]*rankPlaced, size)
	ring := []string{"10.0.0.2:1", "10.0.0.3:1", "10.0.0.4:1"}[:size]
	for r := range placed {
		placed[r] = &rankPlaced{worker: ring[r], ring: ring, group: "e/g"}
	}
	if err := g.withID(placed); err != nil {
		t.Fatalf("generation %d: %v", gen, err)
	}
	out := make([]*rankpb.LoadShard, size)
	for r, p := range placed {
		load := &actors.LoadShard{Shard: model.Shard{Rank: r, Size: size}}
		out[r] = loadToPB(gen, r, load, p, &cfg)
	}
	return out
}

// TestPlacementIDs: every placement of GPU ranks gets a fresh NCCL unique
// id, the same in every rank's LoadShard; a generation placed again (a
// worker failed while it was placed) gets another one too. CPU ranks get
// none and keep the TCP ring's addresses.
func TestPlacementIDs(t *testing.T) {
	src := &fakeIDs{}
	gpu := Config{NCCL: src}
	var seen [][]byte
	for _, gen := range []uint64{1, 2, 2, 3} {
		loads := placeGen(t, gpu, gen, 3)
		id := loads[0].NcclUniqueId
		if len(id) != nccl.UniqueIDBytes {
			t.Fatalf("generation %d: an id of %d bytes", gen, len(id))
		}
		for r, l := range loads {
			if !bytes.Equal(l.NcclUniqueId, id) {
				t.Errorf("generation %d: rank %d got id %x…, rank 0 %x…", gen, r, l.NcclUniqueId[:8], id[:8])
			}
			if l.Rank != int32(r) || l.Size != 3 || l.Generation != gen {
				t.Errorf("generation %d: rank %d's LoadShard says rank %d of %d, generation %d", gen, r, l.Rank, l.Size, l.Generation)
			}
		}
		if slices.ContainsFunc(seen, func(s []byte) bool { return bytes.Equal(s, id) }) {
			t.Errorf("generation %d reuses an earlier id %x…", gen, id[:8])
		}
		seen = append(seen, id)
	}
	if n := len(src.ids()); n != 4 {
		t.Errorf("%d ids made for 4 placements", n)
	}
	for r, l := range placeGen(t, Config{}, 1, 2) {
		if l.NcclUniqueId != nil || len(l.RingAddrs) != 2 || l.RingGroup == "" {
			t.Errorf("CPU rank %d: id %x, ring %v %q", r, l.NcclUniqueId, l.RingAddrs, l.RingGroup)
		}
	}
}

// TestPlacementIDFails: when no id can be made (or the source makes one of
// the wrong size), every rank's placement fails with the reason, naming the
// generation.
func TestPlacementIDFails(t *testing.T) {
	for _, src := range []*fakeIDs{{err: errors.New("libnccl.so.2 not found")}, {size: 64}} {
		g := &remoteGroup{pool: &workerPool{cfg: Config{NCCL: src}}, gen: 7, size: 2}
		placed := []*rankPlaced{{pid: nil, worker: "a"}, {worker: "b"}}
		err := g.withID(placed)
		if err == nil || !strings.Contains(err.Error(), "generation 7") {
			t.Fatalf("error %v, want one naming generation 7", err)
		}
		for r, p := range placed {
			if p.err != err || p.pid != nil || p.ncclID != nil {
				t.Errorf("rank %d: placement %+v", r, p)
			}
		}
	}
}

func TestLocalRanks(t *testing.T) {
	cases := []struct {
		workers []string
		want    []int
	}{
		{[]string{"a", "b"}, []int{0, 0}},
		{[]string{"a", "b", "a", "b"}, []int{0, 0, 1, 1}},
		{[]string{"a", "a", "a"}, []int{0, 1, 2}},
		{nil, []int{}},
	}
	for _, c := range cases {
		if got := localRanks(c.workers); !slices.Equal(got, c.want) {
			t.Errorf("localRanks(%v) = %v, want %v", c.workers, got, c.want)
		}
	}
}

// TestCheckCollective: a GPU worker refuses a LoadShard without the NCCL
// unique id or with one of the wrong size; a CPU worker refuses one that
// carries an id (it joins the TCP ring).
func TestCheckCollective(t *testing.T) {
	id := make([]byte, nccl.UniqueIDBytes)
	gpu := &GPURanks{Devices: []int{0}}
	cases := []struct {
		name string
		gpu  *GPURanks
		id   []byte
		want string // "" accepted, else a part of the error
	}{
		{"cpu, ring", nil, nil, ""},
		{"cpu, id", nil, id, "hosts CPU ranks (TCP ring) but rank 1 of generation 4 got an NCCL unique id"},
		{"gpu, id", gpu, id, ""},
		{"gpu, no id", gpu, nil, "hosts GPU ranks but rank 1 of generation 4 got no NCCL unique id: start the engine with serve --device cuda"},
		{"gpu, short id", gpu, id[:100], "a unique id of 100 bytes, want 128"},
		{"gpu, long id", gpu, append(slices.Clone(id), 1), "a unique id of 129 bytes, want 128"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := &workerState{cfg: WorkerConfig{GPU: c.gpu}, addr: "w:1"}
			err := st.checkCollective(&rankpb.LoadShard{Generation: 4, Rank: 1, Size: 2, NcclUniqueId: c.id})
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("error %v, want one saying %q", err, c.want)
			}
		})
	}
}

func TestGPUDevice(t *testing.T) {
	st := &workerState{cfg: WorkerConfig{GPU: &GPURanks{Devices: []int{3, 1}}}, addr: "w:1"}
	for local, want := range []int{3, 1} {
		if d, err := st.gpuDevice(5, local); err != nil || d != want {
			t.Errorf("local rank %d: GPU %d, %v; want %d", local, d, err, want)
		}
	}
	_, err := st.gpuDevice(5, 2)
	if err == nil || !strings.Contains(err.Error(), "rank 5 needs GPU number 3 of this worker, which has 2") {
		t.Errorf("a third rank on two GPUs: %v", err)
	}
}
