package nccl

import "fmt"

// UniqueIDBytes is the size of an NCCL unique id (NCCL_UNIQUE_ID_BYTES).
// The id names one communicator: the process that made it (ncclGetUniqueId)
// hosts the communicator's bootstrap root, and every rank that joins with it
// (JoinGroup) connects there first.
const UniqueIDBytes = 128

// CheckUniqueID reports why id cannot be an NCCL unique id, or nil.
func CheckUniqueID(id []byte) error {
	switch {
	case len(id) == 0:
		return fmt.Errorf("nccl: no unique id")
	case len(id) != UniqueIDBytes:
		return fmt.Errorf("nccl: a unique id of %d bytes, want %d", len(id), UniqueIDBytes)
	}
	return nil
}

// checkJoin validates JoinGroup's arguments.
func checkJoin(id []byte, rank, size, device int) error {
	if err := CheckUniqueID(id); err != nil {
		return err
	}
	switch {
	case size < 1 || rank < 0 || rank >= size:
		return fmt.Errorf("nccl: rank %d of a group of %d", rank, size)
	case device < 0:
		return fmt.Errorf("nccl: rank %d: device ordinal %d is negative", rank, device)
	}
	return nil
}

// crossProcess is a rank's device communicator in a group whose other ranks
// live in other processes (JoinGroup). Embedding the interface hides the
// LocalPeers methods of the communicator it holds: peers in other processes
// cannot share device memory or an in-process exchange, so the one-shot
// all-reduce of kernels/cuda must not be offered (it would wait for ranks
// that are not here).
type crossProcess struct{ DeviceCommunicator }
