package main

import (
	"context"
	"crypto/tls"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestActorPortsMutualTLS: with certificates from `cohort gen-certs`, two
// TLS workers and `serve --workers` with the same cluster certificate answer
// a completion, while a rogue client on a worker's port is refused at the
// TLS handshake: without a client certificate, with a certificate of
// another CA, and in plaintext gRPC (whose protoactor Ping never reaches
// the worker's actor, so no answer comes back).
func TestActorPortsMutualTLS(t *testing.T) {
	dir := tinyDir(t)
	certs, rogue := t.TempDir(), t.TempDir()
	for _, out := range []string{certs, rogue} {
		if err := dispatch(context.Background(), []string{"gen-certs", "--out", out, "--hosts", "127.0.0.1"}, io.Discard); err != nil {
			t.Fatal(err)
		}
	}
	tlsFlags := func(d string) string {
		return "--tls-cert " + filepath.Join(d, "node.pem") + " --tls-key " + filepath.Join(d, "node-key.pem") +
			" --tls-ca " + filepath.Join(d, "ca.pem")
	}
	addrs := []string{startWorker(t, tlsFlags(certs)+" --model "+dir), startWorker(t, tlsFlags(certs)+" --model "+dir)}

	t.Run("rogue clients refused", func(t *testing.T) {
		other, err := tls.LoadX509KeyPair(filepath.Join(rogue, "node.pem"), filepath.Join(rogue, "node-key.pem"))
		if err != nil {
			t.Fatal(err)
		}
		for name, cfg := range map[string]*tls.Config{
			"no client certificate": {InsecureSkipVerify: true, MinVersion: tls.VersionTLS13},
			"another CA":            {InsecureSkipVerify: true, MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{other}},
		} {
			conn, err := tls.Dial("tcp", addrs[0], cfg)
			if err == nil {
				// TLS 1.3: the server's verdict on the client certificate
				// arrives with the first read.
				conn.SetDeadline(time.Now().Add(10 * time.Second))
				_, err = conn.Read(make([]byte, 1))
				conn.Close()
			}
			if err == nil || !strings.Contains(err.Error(), "certificate") {
				t.Errorf("%s: %v, want a refused handshake", name, err)
			}
		}
		// Plaintext protoactor remoting: the worker's host actor never answers.
		sys := actor.NewActorSystem()
		cfg := remote.Configure("127.0.0.1", 0, remote.WithDialOptions(grpc.WithTransportCredentials(insecure.NewCredentials())))
		cfg.MaxRetryCount = 1
		rem := remote.NewRemote(sys, cfg)
		rem.Start()
		defer rem.Shutdown(false)
		pid := actor.NewPID(addrs[0], "cohort-worker")
		if _, err := sys.Root.RequestFuture(pid, &actor.Touch{}, 3*time.Second).Result(); err == nil {
			t.Error("a plaintext peer got an answer from the worker")
		}
	})

	t.Run("cluster members serve", func(t *testing.T) {
		args := append([]string{"serve", "--model", dir, "--port", "0", "--tp", "2", "--workers", strings.Join(addrs, ","),
			"--served-model-name", "tiny", "--max-model-len", "512", "--kv-budget-mib", "64"}, strings.Fields(tlsFlags(certs))...)
		serveOneCompletion(t, args)
	})

	t.Run("plaintext engine refused", func(t *testing.T) {
		err := dispatch(context.Background(), []string{"serve", "--model", dir, "--port", "0", "--tp", "2",
			"--workers", strings.Join(addrs, ",")}, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "TLS") {
			t.Fatalf("serve without TLS or --insecure: %v", err)
		}
	})
}
