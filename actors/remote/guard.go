package remote

import (
	"context"
	"strings"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A guard filters what peers may do on an actor port, below protoactor:
// protoactor delivers a remote Stop or PoisonPill to any local actor, so the
// guard reads every message batch as it arrives on the gRPC stream and drops
// the lifecycle messages a peer has no business sending. The diagnostic RPCs
// (ListProcesses, GetProcessDiagnostics), which list a system's actors, are
// refused. Mutual TLS decides who may connect at all; the guard decides what
// a connected peer may stop.

// Lifecycle messages (protobuf type names) the guard checks.
var lifecycleTypes = map[string]bool{"actor.Stop": true, "actor.PoisonPill": true}

// stopAllowed decides whether the peer that opened a stream (its actor
// system id, as it announced itself) may stop or poison the local actor id.
type stopAllowed func(peer, target string) bool

// workerStopAllowed: on a worker only the engine that spawned a rank (its
// name starts with rank-<engine system id>-) may stop it; the worker's host
// actor is stopped by nobody.
func workerStopAllowed(peer, target string) bool {
	return peer != "" && strings.HasPrefix(target, "rank-"+peer+"-")
}

// engineStopAllowed: no peer may stop an engine's actors.
func engineStopAllowed(string, string) bool { return false }

// guard is the interceptor pair of one actor port.
type guard struct {
	allow   stopAllowed
	dropped atomic.Int64 // lifecycle messages refused
}

func (g *guard) serverOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.StreamInterceptor(g.stream), grpc.UnaryInterceptor(g.unary)}
}

func (g *guard) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	return nil, status.Errorf(codes.PermissionDenied, "remote: %s is not served on this actor port", info.FullMethod)
}

func (g *guard) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if info.FullMethod != "/remote.Remoting/Receive" {
		return status.Errorf(codes.PermissionDenied, "remote: %s is not served on this actor port", info.FullMethod)
	}
	return h(srv, &guardedStream{ServerStream: ss, g: g})
}

// guardedStream filters the messages of one peer's stream.
type guardedStream struct {
	grpc.ServerStream
	g    *guard
	peer string // the system id of its ConnectRequest
}

func (s *guardedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	rm, ok := m.(*remote.RemoteMessage)
	if !ok {
		return nil
	}
	switch t := rm.MessageType.(type) {
	case *remote.RemoteMessage_ConnectRequest:
		if sc := t.ConnectRequest.GetServerConnection(); sc != nil && s.peer == "" {
			s.peer = sc.SystemId
		}
	case *remote.RemoteMessage_MessageBatch:
		s.filter(t.MessageBatch)
	}
	return nil
}

// filter drops the lifecycle messages of b its peer may not send.
func (s *guardedStream) filter(b *remote.MessageBatch) {
	kept := b.Envelopes[:0]
	for _, env := range b.Envelopes {
		if int(env.TypeId) < len(b.TypeNames) && lifecycleTypes[b.TypeNames[env.TypeId]] {
			target := ""
			if int(env.Target) < len(b.Targets) && b.Targets[env.Target] != nil {
				target = b.Targets[env.Target].Id
			}
			if !s.g.allow(s.peer, target) {
				s.g.dropped.Add(1)
				continue
			}
		}
		kept = append(kept, env)
	}
	b.Envelopes = kept
}
