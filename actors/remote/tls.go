package remote

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// Security is how an actor-remote port (a worker's, or an engine's with
// --workers) authenticates its peers. With TLS set every connection, in and
// out, is mutual TLS 1.3 against the cluster's CA: a peer without a
// certificate signed by it is refused at the handshake, before any message
// reaches an actor. Plaintext needs Insecure, and a nil *Security, or one
// with neither, is refused: running the rank protocol unauthenticated must
// be a decision.
type Security struct {
	// Server and Client are the TLS configurations of the listening and the
	// dialling side (see LoadSecurity).
	Server, Client *tls.Config
	// Insecure allows plaintext (trusted networks, tests).
	Insecure bool
}

// ErrInsecure is returned when an actor port would run without TLS and
// without Security.Insecure.
var ErrInsecure = errors.New("remote: the actor-remote port needs mutual TLS (a certificate, its key and the cluster CA) or an explicit insecure setting")

// LoadSecurity reads a node certificate and key and the cluster CA (PEM
// files, e.g. from `cohort gen-certs`) into a mutual-TLS Security: the same
// certificate serves and dials, and peers must present one signed by the
// CA.
func LoadSecurity(certFile, keyFile, caFile string) (*Security, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("remote: TLS certificate %s: %w", certFile, err)
	}
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("remote: TLS CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("remote: TLS CA %s holds no PEM certificate", caFile)
	}
	return &Security{
		Server: &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert},
			ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert},
		Client: &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}, RootCAs: pool},
	}, nil
}

// grpcCredentials returns the server option and the dial option of s.
func (s *Security) grpcCredentials() (grpc.ServerOption, grpc.DialOption, error) {
	switch {
	case s != nil && s.Server != nil && s.Client != nil:
		return grpc.Creds(credentials.NewTLS(s.Server)), grpc.WithTransportCredentials(credentials.NewTLS(s.Client)), nil
	case s != nil && s.Insecure:
		return grpc.Creds(insecure.NewCredentials()), grpc.WithTransportCredentials(insecure.NewCredentials()), nil
	}
	return nil, nil, ErrInsecure
}
