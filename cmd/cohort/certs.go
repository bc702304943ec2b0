package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"cohort/actors/remote"
)

// runGenCerts writes a cluster CA and one node certificate signed by it, for
// mutual TLS on the actor ports: every engine and worker of the cluster is
// started with the same --tls-cert node.pem --tls-key node-key.pem --tls-ca
// ca.pem. The CA key is written too, so more node certificates can be made;
// keep it off the serving hosts.
func runGenCerts(_ context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("gen-certs", flag.ContinueOnError)
	out := fs.String("out", "certs", "directory to write ca.pem, ca-key.pem, node.pem and node-key.pem into")
	hosts := fs.String("hosts", "127.0.0.1,::1,localhost", "comma-separated IPs and names the node certificate is valid for (every --listen / --workers host)")
	days := fs.Int("days", 365, "validity in days")
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	if *days < 1 {
		return errors.New("gen-certs: --days must be at least 1")
	}
	if err := os.MkdirAll(*out, 0o700); err != nil {
		return fmt.Errorf("gen-certs: %w", err)
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("gen-certs: %w", err)
	}
	ca := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: "cohort cluster CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(0, 0, *days), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, MaxPathLenZero: true}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("gen-certs: CA: %w", err)
	}
	nodeKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("gen-certs: %w", err)
	}
	node := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: "cohort node"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(0, 0, *days),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	for _, h := range strings.Split(*hosts, ",") {
		if h = strings.TrimSpace(h); h == "" {
			continue
		} else if ip := net.ParseIP(h); ip != nil {
			node.IPAddresses = append(node.IPAddresses, ip)
		} else {
			node.DNSNames = append(node.DNSNames, h)
		}
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return fmt.Errorf("gen-certs: %w", err)
	}
	nodeDER, err := x509.CreateCertificate(rand.Reader, node, caCert, &nodeKey.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("gen-certs: node: %w", err)
	}
	files := []struct {
		name string
		typ  string
		der  func() ([]byte, error)
		mode os.FileMode
	}{
		{"ca.pem", "CERTIFICATE", func() ([]byte, error) { return caDER, nil }, 0o644},
		{"ca-key.pem", "EC PRIVATE KEY", func() ([]byte, error) { return x509.MarshalECPrivateKey(caKey) }, 0o600},
		{"node.pem", "CERTIFICATE", func() ([]byte, error) { return nodeDER, nil }, 0o644},
		{"node-key.pem", "EC PRIVATE KEY", func() ([]byte, error) { return x509.MarshalECPrivateKey(nodeKey) }, 0o600},
	}
	for _, f := range files {
		der, err := f.der()
		if err != nil {
			return fmt.Errorf("gen-certs: %s: %w", f.name, err)
		}
		path := filepath.Join(*out, f.name)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: der}), f.mode); err != nil {
			return fmt.Errorf("gen-certs: %w", err)
		}
	}
	fmt.Fprintf(stdout, "cohort: wrote %s/{ca,ca-key,node,node-key}.pem (node valid for %s); start every engine and worker with\n"+
		"  --tls-cert %[1]s/node.pem --tls-key %[1]s/node-key.pem --tls-ca %[1]s/ca.pem\n", *out, *hosts)
	return nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}

// securityFlags are the actor-port authentication flags of serve and worker.
type securityFlags struct {
	cert, key, ca string
	insecure      bool
}

func (s *securityFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&s.cert, "tls-cert", "", "PEM certificate of this node for mutual TLS on the actor port (cohort gen-certs makes one)")
	fs.StringVar(&s.key, "tls-key", "", "PEM private key of --tls-cert")
	fs.StringVar(&s.ca, "tls-ca", "", "PEM CA of the cluster: peers must present a certificate signed by it")
	fs.BoolVar(&s.insecure, "insecure", false, "run the actor port in plaintext, unauthenticated (trusted networks only)")
}

// security resolves the flags: mutual TLS when all three files are given,
// plaintext only with --insecure, an error otherwise.
func (s *securityFlags) security() (*remote.Security, error) {
	switch n := btoi(s.cert != "") + btoi(s.key != "") + btoi(s.ca != ""); {
	case n == 3 && s.insecure:
		return nil, errors.New("--insecure and --tls-* exclude each other")
	case n == 3:
		return remote.LoadSecurity(s.cert, s.key, s.ca)
	case n > 0:
		return nil, errors.New("--tls-cert, --tls-key and --tls-ca go together")
	case s.insecure:
		return &remote.Security{Insecure: true}, nil
	}
	return nil, fmt.Errorf("%w: give --tls-cert, --tls-key and --tls-ca (`cohort gen-certs` makes them), or --insecure", remote.ErrInsecure)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
