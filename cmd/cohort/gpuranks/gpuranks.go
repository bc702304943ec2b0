//go:build cuda

package gpuranks

import (
	"context"
	"fmt"

	"cohort/actors"
	"cohort/kernels"
	"cohort/kernels/cuda"
	"cohort/model"
	"cohort/nccl"
)

// Factory makes rank r's CUDA backend on GPU devices[r] (GPU r when
// devices is nil), in the rank's device thread, and initialises its
// collectives there: with an NCCL communicator that creates the rank's NCCL
// communicator (ncclCommInitRank on the thread's current context) and joins
// the group, so a group that cannot connect fails while loading (a failed or
// aborted peer releases it through the group's abort).
func Factory(devices []int) actors.BackendFactory {
	return func(shard model.Shard, comm nccl.Communicator) (kernels.Backend, error) {
		dev := shard.Rank
		if devices != nil {
			if shard.Rank < 0 || shard.Rank >= len(devices) {
				return nil, fmt.Errorf("rank %d: no GPU for it in %v", shard.Rank, devices)
			}
			dev = devices[shard.Rank]
		}
		return newRank(shard, comm, dev)
	}
}

// OnDevice makes a rank's CUDA backend on GPU dev, whatever its rank, the
// way Factory does: for a worker process (cohort worker --device cuda),
// which picks its ranks' GPUs itself.
func OnDevice(dev int) actors.BackendFactory {
	return func(shard model.Shard, comm nccl.Communicator) (kernels.Backend, error) {
		return newRank(shard, comm, dev)
	}
}

// newRank makes the backend on GPU dev and initialises its collectives.
func newRank(shard model.Shard, comm nccl.Communicator, dev int) (kernels.Backend, error) {
	be, err := cuda.New(cuda.Options{Device: dev, Comm: comm})
	if err != nil {
		return nil, fmt.Errorf("rank %d on GPU %d: %w", shard.Rank, dev, err)
	}
	if err := be.InitCollectives(context.Background()); err != nil {
		be.Close()
		return nil, fmt.Errorf("rank %d on GPU %d: %w", shard.Rank, dev, err)
	}
	return be, nil
}

// Comms is actors.Config.NewComms for GPU ranks: a new NCCL group (and
// unique id) over devices per rank-group generation.
func Comms(devices []int) func(size int) ([]nccl.Communicator, error) {
	return func(size int) ([]nccl.Communicator, error) {
		if size != len(devices) {
			return nil, fmt.Errorf("nccl group of %d ranks for %d GPUs %v", size, len(devices), devices)
		}
		g, err := nccl.NewDeviceGroup(devices)
		if err != nil {
			return nil, err
		}
		return g.Comms(), nil
	}
}
