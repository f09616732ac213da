package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// TLSFiles are the PEM files of a TLS server started with Options.TLS: a test CA made for the
// server, the server's certificate for 127.0.0.1 and localhost and its key, and a client
// certificate and key signed by the same CA.
type TLSFiles struct {
	CAFile, CertFile, KeyFile     string
	ClientCertFile, ClientKeyFile string
}

// ClientConfig returns a TLS client configuration that trusts the test CA, for server name
// 127.0.0.1, presenting the client certificate when withCert is set.
func (f *TLSFiles) ClientConfig(withCert bool) (*tls.Config, error) {
	pemCA, err := os.ReadFile(f.CAFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemCA) {
		return nil, fmt.Errorf("redistest: no certificate in %s", f.CAFile)
	}
	cfg := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
	if withCert {
		cert, err := tls.LoadX509KeyPair(f.ClientCertFile, f.ClientKeyFile)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// makeTLSFiles writes a fresh CA, server and client certificates with their keys into dir.
// Keys are ECDSA P-256, and certificates are valid from an hour ago for a day.
func makeTLSFiles(dir string) (*TLSFiles, error) {
	f := &TLSFiles{
		CAFile: filepath.Join(dir, "ca.crt"), CertFile: filepath.Join(dir, "server.crt"),
		KeyFile: filepath.Join(dir, "server.key"), ClientCertFile: filepath.Join(dir, "client.crt"),
		ClientKeyFile: filepath.Join(dir, "client.key"),
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	ca := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "flightdeck test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	if err := writePEM(f.CAFile, "CERTIFICATE", caDER); err != nil {
		return nil, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	leaf := func(certFile, keyFile, cn string, usage x509.ExtKeyUsage) error {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		tmpl := &x509.Certificate{
			SerialNumber: serial(), Subject: pkix.Name{CommonName: cn},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		}
		if usage == x509.ExtKeyUsageServerAuth {
			tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
			tmpl.DNSNames = []string{"localhost"}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			return err
		}
		kb, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return err
		}
		if err := writePEM(certFile, "CERTIFICATE", der); err != nil {
			return err
		}
		return writePEM(keyFile, "PRIVATE KEY", kb)
	}
	if err := leaf(f.CertFile, f.KeyFile, "127.0.0.1", x509.ExtKeyUsageServerAuth); err != nil {
		return nil, err
	}
	if err := leaf(f.ClientCertFile, f.ClientKeyFile, "flightdeck test client", x509.ExtKeyUsageClientAuth); err != nil {
		return nil, err
	}
	return f, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}
