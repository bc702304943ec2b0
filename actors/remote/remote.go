// Package remote places an engine's ranks in other processes: the engine
// side (a worker pool with heartbeats, the placement of each generation,
// proxy actors that stand in for remote ranks as the engine root's
// children) and the worker side (`cohort worker`: a host of rank actors
// joined by a TCP ring), the protobuf wire between them (rankpb), mutual TLS
// and a guard on the actor port. It implements actors.Placer; actors does
// not import it (cmd/cohort wires the two). See docs/remote.md.
package remote

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"cohort/actors"
)

// ProtocolVersion names the rank protocol (rankpb); it is part of
// the build string, so an engine and a worker that speak different versions
// refuse each other.
const ProtocolVersion = 4 // 2: steps carry diffs (admissions once, then new tokens and pages); 3: a step's results in output-row order, without ids; 4: GPU ranks (device, local rank, NCCL unique id)

// Well-known names on a worker.
const (
	workerHostName = "cohort-worker" // the actor that answers pings
	rankKind       = "cohort.rank"   // the remote kind of rank actors
)

// Config places an engine's ranks on worker processes (`cohort worker`)
// instead of in the engine's process. Zero values take the defaults in
// brackets.
type Config struct {
	Workers []string // host:port of each worker's actor remote
	// Listen is this engine's actor-remote address; workers reply to it, so
	// it must be reachable from them ["127.0.0.1:0"].
	Listen string
	// ModelDir is the checkpoint path sent to the workers [Checkpoint.Dir];
	// a worker may override it with its own path, the checksum must match.
	ModelDir string
	// RanksPerWorker caps the ranks one worker hosts [⌈TP/len(Workers)⌉]: a
	// group is placed only when the live workers can hold every rank.
	RanksPerWorker int
	Heartbeat      time.Duration // worker ping period [250ms]
	// DownAfter declares a worker down when it answered no ping for this
	// long: the bound on detecting a silent partition [2s].
	DownAfter       time.Duration
	SpawnTimeout    time.Duration // bound on spawning and preparing one remote rank [10s]
	RingDialTimeout time.Duration // the TCP ring must form within it [10s]
	RingOpTimeout   time.Duration // bound on one collective [actors.Config.StepDeadline]
	Build           string        // this build's identity [Build()]
	// NCCL, if set, makes the ranks GPU ranks joined by NCCL: the workers
	// must host GPU ranks (WorkerConfig.GPU), and every placement of a
	// generation gets a fresh unique id from it, sent to every rank. Nil:
	// CPU ranks, joined by the TCP ring.
	NCCL UniqueIDSource
	// Security authenticates the engine's actor port and its links to the
	// workers; nil refuses to start (see Security).
	Security *Security
}

// Placement returns the engine's placer for cfg (actors.Config.Placement):
// it starts remoting on the engine's actor system and pings every worker
// once; a worker that refuses the engine (another build or model) fails
// the start.
func Placement(cfg Config) actors.NewPlacer {
	return func(sys *actor.ActorSystem, c actors.Config) (actors.Placer, error) {
		rc := cfg
		rc.defaults(&c)
		return newWorkerPool(sys, rc)
	}
}

func (r *Config) defaults(c *actors.Config) {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&r.Heartbeat, 250*time.Millisecond)
	def(&r.DownAfter, 2*time.Second)
	def(&r.SpawnTimeout, 10*time.Second)
	def(&r.RingDialTimeout, 10*time.Second)
	def(&r.RingOpTimeout, c.StepDeadline)
	if r.Listen == "" {
		r.Listen = "127.0.0.1:0"
	}
	if r.ModelDir == "" {
		r.ModelDir = c.Checkpoint.Dir
	}
	if r.RanksPerWorker <= 0 && len(r.Workers) > 0 {
		r.RanksPerWorker = (c.TP + len(r.Workers) - 1) / len(r.Workers)
	}
	if r.Build == "" {
		r.Build = Build()
	}
}

// Build identifies this binary for the worker handshake: the module
// version, the VCS revision (+dirty), the Go version and the rank protocol.
// When the revision is unknown (a plain `go build` outside a VCS checkout,
// `go test`), the SHA-256 of the executable's own content stands in for it,
// so two different binaries never pass for the same build. COHORT_BUILD_ID
// overrides it (tests; deliberately compatible builds).
func Build() string {
	if v := os.Getenv("COHORT_BUILD_ID"); v != "" {
		return v
	}
	return buildOnce()
}

var buildOnce = sync.OnceValue(func() string {
	version, rev, dirty, goVersion := "unknown", "unknown", "", "unknown"
	if info, ok := debug.ReadBuildInfo(); ok {
		version, goVersion = info.Main.Version, info.GoVersion
		for _, s := range info.Settings {
			switch {
			case s.Key == "vcs.revision":
				rev = s.Value
			case s.Key == "vcs.modified" && s.Value == "true":
				dirty = "+dirty"
			}
		}
	}
	if rev == "unknown" {
		rev = "unknown sha256:" + executableHash()
	}
	return fmt.Sprintf("cohort %s rev %s%s %s rank-protocol %d", version, rev, dirty, goVersion, ProtocolVersion)
})

// executableHash is the hex SHA-256 of the running executable, or a note
// saying why it could not be read.
func executableHash() string {
	path, err := os.Executable()
	if err != nil {
		return "unreadable(" + err.Error() + ")"
	}
	f, err := os.Open(path)
	if err != nil {
		return "unreadable(" + err.Error() + ")"
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "unreadable(" + err.Error() + ")"
	}
	return hex.EncodeToString(h.Sum(nil))
}

// remoteOptions configures gRPC for ranks: keepalive on both ends, so a
// silent partition breaks the connection within seconds, and short connect
// attempts, so a restarted worker is reached again quickly. grpc-go pings
// no more often than every 10 s from a client; the server side pings every
// second. The worker heartbeat (Config.DownAfter) is the tighter bound.
func remoteOptions(creds grpc.DialOption, serverCreds grpc.ServerOption, g *guard) []remote.ConfigOption {
	return []remote.ConfigOption{
		remote.WithDialOptions(
			creds,
			grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 2 * time.Second, PermitWithoutStream: true}),
			grpc.WithConnectParams(grpc.ConnectParams{MinConnectTimeout: 2 * time.Second}),
		),
		remote.WithServerOptions(append(g.serverOptions(),
			serverCreds,
			grpc.KeepaliveParams(keepalive.ServerParameters{Time: time.Second, Timeout: 2 * time.Second}),
			grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		)...),
	}
}

// startRemote starts actor remoting of sys on listen (host:port; port 0
// picks one) with the given kinds, authenticated by sec and guarded by g,
// and returns it.
func startRemote(sys *actor.ActorSystem, listen string, sec *Security, g *guard, kinds ...*remote.Kind) (rem *remote.Remote, err error) {
	serverCreds, dialCreds, err := sec.grpcCredentials()
	if err != nil {
		return nil, err
	}
	host, portStr, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, fmt.Errorf("remote: address %q: %w", listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("remote: address %q: bad port: %w", listen, err)
	}
	cfg := remote.Configure(host, port, append(remoteOptions(dialCreds, serverCreds, g), remote.WithKinds(kinds...))...)
	cfg.MaxRetryCount = 1 // one connect attempt per endpoint; the next message tries again
	rem = remote.NewRemote(sys, cfg)
	defer func() {
		if r := recover(); r != nil { // remote.Start panics when it cannot listen
			rem, err = nil, fmt.Errorf("remote: listening on %s: %v", listen, r)
		}
	}()
	rem.Start()
	return rem, nil
}
