package actors

import (
	"errors"
	"strings"
	"testing"

	"cohort/kernels"
	"cohort/kernels/cpu"
	"cohort/model"
)

// memBackend is a CPU backend that reports device memory.
type memBackend struct {
	kernels.Backend
	free int64
	err  error
}

func (m memBackend) MemInfo() (int64, int64, error) { return m.free, 2 * m.free, m.err }

func TestBudgetFromDevice(t *testing.T) {
	c := cpu.New(cpu.Options{})
	for _, tc := range []struct {
		name            string
		be              kernels.Backend
		budget, reserve int64
		want, wantRes   int64
		wantErr         string
	}{
		{"explicit budget kept, no reserve added", memBackend{Backend: c, free: 1 << 30}, 5 << 20, 0, 5 << 20, 0, ""},
		{"free memory when unset, the device reserve", memBackend{Backend: c, free: 3 << 30}, 0, 0, 3 << 30, model.DeviceReserve, ""},
		{"free memory, a reserve given", memBackend{Backend: c, free: 3 << 30}, 0, 7 << 20, 3 << 30, 7 << 20, ""},
		{"no device memory", c, 0, 0, 0, 0, "reports no device memory"},
		{"MemInfo fails", memBackend{Backend: c, err: errors.New("boom")}, 0, 0, 0, 0, "boom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := budgetFromDevice(tc.be, model.CapacityInput{Budget: tc.budget, Reserve: tc.reserve})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got.Budget != tc.want || got.Reserve != tc.wantRes {
				t.Fatalf("budget = %d, reserve %d, %v; want %d, %d", got.Budget, got.Reserve, err, tc.want, tc.wantRes)
			}
		})
	}
}
