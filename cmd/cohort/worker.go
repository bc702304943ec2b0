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
	device := fs.String("device", "cpu", "backend of the hosted ranks: cpu (TCP ring), or cuda (NCCL; a binary built with make build-cuda; the engine needs serve --device cuda)")
	devices := fs.String("devices", "", "with --device cuda: the GPUs of the hosted ranks, comma-separated, e.g. 0,1 (the worker's first rank of a generation on the first; default: every GPU)")
	threads := fs.Int("threads", 0, "compute threads per hosted rank (0: all cores)")
	var sec securityFlags
	sec.register(fs)
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	if err := checkWorkerDevice(*device, *devices); err != nil {
		return err
	}
	switch {
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
	cfg := remote.WorkerConfig{Listen: *listen, RingHost: *ringHost, ModelDir: *dir, TracerProvider: tracing, Security: security}
	if err := workerBackends(&cfg, *device, *devices, *threads); err != nil {
		return err
	}
	w, err := remote.StartWorker(cfg)
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

// workerBackends sets how the worker makes its ranks' backends: CPU
// backends with threads workers each, or (cuda) GPU ranks on the listed
// GPUs, made by the factory of in-process GPU ranks and joined by NCCL.
func workerBackends(cfg *remote.WorkerConfig, device, devices string, threads int) error {
	if device == "cuda" {
		gpu, err := workerGPU(devices)
		cfg.GPU, cfg.LockThread = gpu, true
		return err
	}
	newBackend, lockThread, _, err := backendFactory(device, threads)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	cfg.NewBackend, cfg.LockThread = newBackend, lockThread
	return nil
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
