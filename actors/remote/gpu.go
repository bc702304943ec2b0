package remote

import (
	"fmt"

	"cohort/actors"
	"cohort/actors/remote/rankpb"
	"cohort/nccl"
)

// GPU ranks across processes: the engine makes one NCCL unique id for every
// placement of a generation (Config.NCCL) and sends it in every rank's
// LoadShard; a GPU worker (WorkerConfig.GPU) joins that communicator with
// the rank's index and the group's size instead of the TCP ring.

// UniqueIDSource makes NCCL unique ids (nccl.NewUniqueID; tests use a fake).
type UniqueIDSource interface {
	NewUniqueID() ([]byte, error)
}

// UniqueIDFunc is a function as a UniqueIDSource.
type UniqueIDFunc func() ([]byte, error)

// NewUniqueID calls f.
func (f UniqueIDFunc) NewUniqueID() ([]byte, error) { return f() }

// GPURanks makes a worker's ranks GPU ranks, joined by NCCL.
type GPURanks struct {
	// Devices are the worker's GPU ordinals: the i-th rank of a generation
	// placed on this worker (PrepareRank.local_rank) runs on Devices[i].
	Devices []int
	// NewBackend makes the backend factory of a rank on GPU device (the
	// factory of in-process GPU ranks, cmd/cohort/gpuranks).
	NewBackend func(device int) actors.BackendFactory
	// Join makes the rank's communicator in the generation's NCCL group
	// (nccl.JoinGroup); it must not block: the rank connects when its
	// backend initialises its collectives on the device thread.
	Join func(id []byte, rank, size, device int) (nccl.Communicator, error)
}

// Backends of the ranks, as Identity.device names them.
const (
	deviceCPU  = "cpu"
	deviceCUDA = "cuda"
)

// engineDevice is the backend of the ranks an engine with cfg places.
func (cfg *Config) engineDevice() string {
	if cfg.NCCL != nil {
		return deviceCUDA
	}
	return deviceCPU
}

// device is the backend of the ranks a worker hosts.
func (cfg *WorkerConfig) device() string {
	if cfg.GPU != nil {
		return deviceCUDA
	}
	return deviceCPU
}

// newPlacementID makes the NCCL unique id of one placement of a generation
// (nil for CPU ranks, which use the TCP ring): a fresh one every time, so a
// rebuilt group never meets a rank of an older one.
func newPlacementID(src UniqueIDSource, gen uint64) ([]byte, error) {
	if src == nil {
		return nil, nil
	}
	id, err := src.NewUniqueID()
	if err == nil {
		err = nccl.CheckUniqueID(id)
	}
	if err != nil {
		return nil, fmt.Errorf("remote: the NCCL unique id of generation %d: %w", gen, err)
	}
	return id, nil
}

// localRanks numbers each rank among the ranks placed on the same worker
// (workers[r] is rank r's worker), in rank order.
func localRanks(workers []string) []int {
	seen := map[string]int{}
	out := make([]int, len(workers))
	for r, w := range workers {
		out[r] = seen[w]
		seen[w]++
	}
	return out
}

// checkCollective refuses a LoadShard whose collective does not fit the
// worker: a GPU worker needs the generation's NCCL unique id, a CPU worker
// joins the TCP ring and must not get one.
func (st *workerState) checkCollective(msg *rankpb.LoadShard) error {
	id := msg.GetNcclUniqueId()
	switch {
	case st.cfg.GPU == nil && len(id) > 0:
		return fmt.Errorf("worker %s hosts CPU ranks (TCP ring) but rank %d of generation %d got an NCCL unique id: start the worker with --device cuda",
			st.addr, msg.Rank, msg.Generation)
	case st.cfg.GPU == nil:
		return nil
	case len(id) == 0:
		return fmt.Errorf("worker %s hosts GPU ranks but rank %d of generation %d got no NCCL unique id: start the engine with serve --device cuda",
			st.addr, msg.Rank, msg.Generation)
	}
	if err := nccl.CheckUniqueID(id); err != nil {
		return fmt.Errorf("worker %s: rank %d of generation %d: %w", st.addr, msg.Rank, msg.Generation, err)
	}
	return nil
}

// collective names the workers' ranks' collective, for errors.
func (st *workerState) collective() string {
	if st.cfg.GPU != nil {
		return "nccl"
	}
	return "tcp ring"
}

// gpuDevice is the GPU of the local-th rank of a generation on this worker.
func (st *workerState) gpuDevice(rank, local int) (int, error) {
	devs := st.cfg.GPU.Devices
	if local < 0 || local >= len(devs) {
		return 0, fmt.Errorf("worker %s: rank %d needs GPU number %d of this worker, which has %d (--devices %v): lower serve --ranks-per-worker or give the worker more GPUs",
			st.addr, rank, local+1, len(devs), devs)
	}
	return devs[local], nil
}
