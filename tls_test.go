package acemq_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tlsFront terminates TLS with a fresh self-signed certificate for
// 127.0.0.1 and forwards the bytes to the broker at plain. It returns the
// amqps:// URL and the pool that trusts the certificate.
func tlsFront(t *testing.T, plain string) (string, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "acemq test broker"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(cert)

	u, err := url.Parse(plain)
	require.NoError(t, err)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
	})
	require.NoError(t, err)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	track := func(c net.Conn) { mu.Lock(); conns = append(conns, c); mu.Unlock() }
	wg.Go(func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", u.Host)
			if err != nil {
				in.Close()
				continue
			}
			track(in)
			track(out)
			wg.Go(func() { _, _ = io.Copy(out, in); out.Close() })
			wg.Go(func() { _, _ = io.Copy(in, out); in.Close() })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	front := *u
	front.Scheme = "amqps"
	front.Host = ln.Addr().String()
	return front.String(), pool
}

func TestWithTLSReachesTheBrokerOverAMQPS(t *testing.T) {
	t.Parallel()
	plain := acemqtest.RabbitMQ(t)
	amqps, pool := tlsFront(t, plain)

	t.Run("trusted", func(t *testing.T) {
		c := connectURL(t, amqps, acemq.WithTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}))
		q := acemqtestQueue(t)
		acemqtest.DeleteQueuesAfter(t, plain, q)
		require.NoError(t, c.Declare(ctxT(t), acemq.Queue{Name: q}))
		require.NoError(t, acemq.NewPublisher[OrderPlaced](c, "", q).Send(ctxT(t), OrderPlaced{OrderID: "over tls"}))
		assert.Contains(t, string(take(t, c, q).Body), "over tls")
		require.NoError(t, c.Close())
	})
	t.Run("untrusted", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := acemq.Connect(ctx, amqps, acemq.WithLogger(quiet), acemq.WithTLS(&tls.Config{MinVersion: tls.VersionTLS12}))
		require.Error(t, err, "a certificate nobody trusts must not be accepted")
		assert.True(t, strings.Contains(err.Error(), "certificate"), "error %q does not name the certificate", err)
		assert.Contains(t, err.Error(), "does not verify", "no retry fixes a certificate: Connect fails at once")
		assert.NotErrorIs(t, err, context.DeadlineExceeded, "Connect retried until ctx ended")
		u, _ := url.Parse(amqps)
		if pw, ok := u.User.Password(); ok && pw != "" {
			assert.NotContains(t, err.Error(), ":"+pw+"@", "the password leaked into the error")
		}
	})
}
