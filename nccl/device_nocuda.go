//go:build !cuda

package nccl

// DeviceGroup is a tensor-parallel group of GPU ranks communicating through
// NCCL; this binary was built without -tags cuda and cannot make one.
type DeviceGroup struct{}

// NewDeviceGroup returns ErrNoCUDA: this binary has no GPU support.
func NewDeviceGroup(devices []int) (*DeviceGroup, error) {
	if err := checkDevices(devices); err != nil {
		return nil, err
	}
	return nil, ErrNoCUDA
}

// Size is the number of ranks.
func (g *DeviceGroup) Size() int { return 0 }

// Comm is never reached in a binary without -tags cuda.
func (g *DeviceGroup) Comm(rank int) DeviceCommunicator { panic(ErrNoCUDA) }

// Comms is never reached in a binary without -tags cuda.
func (g *DeviceGroup) Comms() []Communicator { return nil }

// Abort does nothing.
func (g *DeviceGroup) Abort(reason error) {}

// Version returns ErrNoCUDA.
func Version() (int, string, error) { return 0, "", ErrNoCUDA }

// CUDADeviceCount returns ErrNoCUDA.
func CUDADeviceCount() (int, error) { return 0, ErrNoCUDA }

// Aborted returns nil.
func (g *DeviceGroup) Aborted() error { return nil }

// NewUniqueID returns ErrNoCUDA: this binary has no NCCL.
func NewUniqueID() ([]byte, error) { return nil, ErrNoCUDA }

// JoinGroup checks its arguments and returns ErrNoCUDA: this binary has no
// NCCL.
func JoinGroup(id []byte, rank, size, device int) (DeviceCommunicator, error) {
	if err := checkJoin(id, rank, size, device); err != nil {
		return nil, err
	}
	return nil, ErrNoCUDA
}
