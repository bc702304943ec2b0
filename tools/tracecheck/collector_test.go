package tracecheck

import (
	"context"
	"testing"
)

func TestStartRefusesNonLoopback(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:4318", ":4318", "localhost:4318", "192.0.2.1:4318", "127.0.0.1"} {
		if c, err := Start(context.Background(), addr); err == nil {
			c.Shutdown()
			t.Errorf("Start(%q) succeeded", addr)
		}
	}
}
