//go:build !cuda

package main

import (
	"context"
	"io"
	"strings"
	"testing"
)

// TestWorkerWithoutCUDA: a binary built without -tags cuda refuses
// `worker --device cuda` and says why, and `serve --device cuda --workers`
// too.
func TestWorkerWithoutCUDA(t *testing.T) {
	for _, args := range [][]string{
		{"worker", "--device", "cuda", "--devices", "0,1", "--listen", "127.0.0.1:0", "--model", tinyDir(t), "--insecure"},
		{"serve", "--device", "cuda", "--tp", "2", "--workers", "127.0.0.1:1,127.0.0.1:2", "--insecure", "--port", "0"},
	} {
		err := dispatch(context.Background(), args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "built without -tags cuda") {
			t.Errorf("%q: error %v, want one saying the binary was built without CUDA", args, err)
		}
	}
}
