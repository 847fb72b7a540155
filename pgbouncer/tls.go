package pgbouncer

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"path/filepath"
	"time"
)

// tlsLevel says how much TLS a cluster speaks.
type tlsLevel int

const (
	tlsOff      tlsLevel = iota // the default: plaintext only, as before
	tlsAllow                    // TLS offered, plaintext still accepted
	tlsRequired                 // the application user must use TLS
)

// WithTLS makes the cluster speak TLS with certificates it generates at
// start (a throwaway ECDSA CA and a server certificate for 127.0.0.1 and
// localhost, in the cluster's temporary directory):
//
//   - PostgreSQL runs with ssl=on;
//   - every PgBouncer offers TLS to its clients (client_tls_sslmode=allow)
//     and logs in to PostgreSQL over TLS, verifying the certificate
//     (server_tls_sslmode=verify-full).
//
// Plaintext clients are still accepted, so the DSNs the Cluster returns
// (sslmode=disable) keep working; add sslmode=require, or sslmode=verify-full
// with sslrootcert=CAFile(), to a DSN to use TLS. See WithTLSRequired to
// refuse plaintext.
//
// The Docker back end writes the certificates into its containers (naming
// also PostgreSQL's network alias, which PgBouncer verifies) and the CA into
// a temporary directory of the host for CAFile.
func WithTLS() Option {
	return func(o *options) error {
		if o.tls < tlsAllow {
			o.tls = tlsAllow
		}
		return nil
	}
}

// WithTLSRequired is WithTLS where plaintext is refused to the application
// user and the admin console: PgBouncer runs with client_tls_sslmode=require,
// and PostgreSQL's pg_hba.conf accepts the application user only on hostssl
// lines. The superuser (SuperuserDSN) stays trusted over plaintext for setup
// and fault injection. Both back ends offer it, like WithTLS.
func WithTLSRequired() Option {
	return func(o *options) error {
		o.tls = tlsRequired
		return nil
	}
}

// The names of the TLS files in the cluster's directory.
const (
	tlsCAFile   = "ca.crt"
	tlsCertFile = "server.crt"
	tlsKeyFile  = "server.key"
)

// tlsFiles are PEM files of a generated CA and the server certificate it
// signed.
type tlsFiles struct {
	caPEM, certPEM, keyPEM []byte
}

// generateTLS makes a throwaway CA and a server certificate for the
// loopback and the host names hosts, valid from an hour ago (clock skew) for
// a day.
func generateTLS(hosts ...string) (tlsFiles, error) {
	var f tlsFiles
	now := time.Now()
	serial := func() (*big.Int, error) { return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127)) }

	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return f, fmt.Errorf("pgbouncer: CA key: %w", err)
	}
	caSerial, err := serial()
	if err != nil {
		return f, fmt.Errorf("pgbouncer: %w", err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          caSerial,
		Subject:               pkix.Name{CommonName: "pgadvisory test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return f, fmt.Errorf("pgbouncer: CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return f, fmt.Errorf("pgbouncer: %w", err)
	}

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return f, fmt.Errorf("pgbouncer: server key: %w", err)
	}
	srvSerial, err := serial()
	if err != nil {
		return f, fmt.Errorf("pgbouncer: %w", err)
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: srvSerial,
		Subject:      pkix.Name{CommonName: "localhost"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     append([]string{"localhost"}, hosts...),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return f, fmt.Errorf("pgbouncer: server certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return f, fmt.Errorf("pgbouncer: %w", err)
	}
	f.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	f.certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srvDER})
	f.keyPEM = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	return f, nil
}

// writeTLS generates the certificates into the cluster's directory, owned
// by the OS user the servers run as (PostgreSQL refuses a key file that
// others can read), and returns the settings that point at them.
func (lc *localCluster) writeTLS() (*bouncerTLS, error) {
	f, err := generateTLS()
	if err != nil {
		return nil, err
	}
	for name, content := range map[string][]byte{tlsCAFile: f.caPEM, tlsCertFile: f.certPEM, tlsKeyFile: f.keyPEM} {
		if err := lc.writeFile(name, string(content)); err != nil {
			return nil, err
		}
	}
	clientMode := "allow"
	if lc.opts.tls == tlsRequired {
		clientMode = "require"
	}
	return &bouncerTLS{
		clientMode: clientMode,
		certFile:   filepath.Join(lc.dir, tlsCertFile),
		keyFile:    filepath.Join(lc.dir, tlsKeyFile),
		caFile:     filepath.Join(lc.dir, tlsCAFile),
		serverMode: "verify-full",
	}, nil
}

// postgresTLSSettings are the -c settings that turn TLS on in PostgreSQL.
func postgresTLSSettings(t *bouncerTLS) []string {
	if t == nil {
		return nil
	}
	return []string{"ssl=on", "ssl_cert_file=" + t.certFile, "ssl_key_file=" + t.keyFile}
}

// withSSLMode returns the URL DSN d with its sslmode replaced.
func withSSLMode(d, mode string) string {
	u, err := url.Parse(d)
	if err != nil {
		return d // the harness's own DSNs always parse
	}
	q := u.Query()
	q.Set("sslmode", mode)
	u.RawQuery = q.Encode()
	return u.String()
}

// CAFile returns the path of the PEM file of the CA that signed the servers'
// certificate, for sslrootcert with sslmode=verify-full, or "" when the
// cluster was started without WithTLS. The file is removed by Close.
func (c *Cluster) CAFile() string { return c.caFile }

// TLS reports whether the cluster was started with WithTLS or
// WithTLSRequired.
func (c *Cluster) TLS() bool { return c.caFile != "" }
