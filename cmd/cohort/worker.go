package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"

	"cohort/actors/remote"
	_ "cohort/model/all" // registers every architecture
)

// runWorker hosts rank actors for engines started with `serve --workers`.
func runWorker(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:7400", "host:port of this worker's actor remote (port 0 picks one); engines list it in --workers")
	ringHost := fs.String("ring-host", "", "address the ranks' TCP ring listeners bind (default: the --listen host)")
	dir := fs.String("model", "", "checkpoint directory this worker serves (required: engines cannot name another; the checksum must match the engine's)")
	device := fs.String("device", "cpu", "backend of the hosted ranks: cpu (NCCL across processes is not built yet, see docs/remote.md)")
	threads := fs.Int("threads", 0, "compute threads per hosted rank (0: all cores)")
	var sec securityFlags
	sec.register(fs)
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	switch {
	case *device != "cpu":
		return fmt.Errorf("worker: --device %s: only cpu ranks can run in worker processes so far (GPU ranks need NCCL across processes, see docs/remote.md)", *device)
	case *threads < 0:
		return errors.New("worker: --threads must not be negative")
	case *dir == "":
		return errors.New("worker: --model is required: a worker serves only the checkpoint directory it was started with")
	}
	security, err := sec.security()
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	if *threads == 0 {
		*threads = runtime.GOMAXPROCS(0)
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	tracing, shutdownTracing, err := setupTracing(ctx, log.New(os.Stderr, "cohort: worker: ", log.LstdFlags).Printf)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	defer shutdownTracing()
	newBackend, lockThread, _, err := backendFactory(*device, *threads)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	w, err := remote.StartWorker(remote.WorkerConfig{Listen: *listen, RingHost: *ringHost, ModelDir: *dir,
		NewBackend: newBackend, LockThread: lockThread, TracerProvider: tracing, Security: security})
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	defer w.Close()
	fmt.Fprintf(stdout, "cohort: worker listening on %s (%s)\n", w.Addr(), remote.Build())
	if host, _, _ := net.SplitHostPort(*listen); security.Insecure && (host == "" || host == "0.0.0.0" || host == "::") {
		fmt.Fprintf(os.Stderr, "cohort: worker: WARNING: --insecure on every interface (%s): anyone who reaches this port can run ranks here\n", *listen)
	}
	select {
	case <-ctx.Done():
		return nil
	case <-w.Done():
		return errors.New("worker: the host actor stopped: this worker can no longer serve engines")
	}
}

// workerList parses --workers: comma-separated host:port addresses.
func workerList(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}
