package nccl

import (
	"context"
	"strings"
	"testing"
)

func TestCheckJoin(t *testing.T) {
	id := make([]byte, UniqueIDBytes)
	cases := []struct {
		name               string
		id                 []byte
		rank, size, device int
		want               string // "" accepted, else a part of the error
	}{
		{"ok", id, 1, 2, 0, ""},
		{"no id", nil, 0, 2, 0, "no unique id"},
		{"short id", id[:16], 0, 2, 0, "16 bytes, want 128"},
		{"long id", append(id, 0), 0, 2, 0, "129 bytes, want 128"},
		{"rank past size", id, 2, 2, 0, "rank 2 of a group of 2"},
		{"negative rank", id, -1, 2, 0, "rank -1"},
		{"empty group", id, 0, 0, 0, "group of 0"},
		{"negative device", id, 0, 1, -1, "device ordinal -1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := checkJoin(c.id, c.rank, c.size, c.device)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("error %v, want one saying %q", err, c.want)
			}
		})
	}
}

// localPeersDevice is a fake device communicator of an in-process group.
type localPeersDevice struct{ fakeDevice }

func (localPeersDevice) Devices() []int { return []int{0, 1} }
func (localPeersDevice) Exchange(context.Context, uint64) ([]uint64, error) {
	return nil, nil
}
func (localPeersDevice) OnAbort(func()) {}

// TestCrossProcessHidesLocalPeers: a rank joined across processes is a
// device communicator but offers no in-process peers (kernels/cuda would
// otherwise set up the one-shot all-reduce with ranks that are not here).
func TestCrossProcessHidesLocalPeers(t *testing.T) {
	inner := localPeersDevice{fakeDevice{mustGroup(t, 1).Comm(0)}}
	var c Communicator = crossProcess{inner}
	if _, ok := c.(LocalPeers); ok {
		t.Fatal("a cross-process communicator offers LocalPeers")
	}
	if d, ok := AsDevice(c); !ok || d.Device() != 0 {
		t.Fatalf("AsDevice = %v, %v", d, ok)
	}
}
