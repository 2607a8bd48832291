// Package login logs in to a RabbitMQ broker or a PostgreSQL database, to
// tell that it is ready: acemqtest uses it to probe and to delete, package
// acemqtest/container to wait for the containers it starts. It links no
// database driver and no Docker client.
package login

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/md5"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
)

// Postgres logs in to the PostgreSQL database rawURL names, as the user it
// names, and runs SELECT 1: what "ready" means for a database, whatever
// the image. It speaks the frontend protocol itself (trust, password, MD5
// and SCRAM-SHA-256 authentication, no TLS), so neither acemqtest nor
// acemqtest/container needs a driver.
func Postgres(ctx context.Context, rawURL string) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return fmt.Errorf("parsing the PostgreSQL URL: %w", err)
	}
	user := u.User.Username()
	if user == "" {
		user = "postgres"
	}
	password, _ := u.User.Password()
	database := strings.TrimPrefix(u.Path, "/")
	if database == "" {
		database = user
	}
	c, err := Dial(ctx, "tcp", u.Host)
	if err != nil {
		return err
	}
	defer c.Close()
	s := &pgSession{w: c, r: bufio.NewReader(c)}
	if err := s.startup(user, database, password); err != nil {
		return err
	}
	if err := s.send('Q', []byte("SELECT 1\x00")); err != nil {
		return err
	}
	if err := s.untilReady(); err != nil {
		return err
	}
	return s.send('X', nil)
}

// pgSession is one connection's frontend side.
type pgSession struct {
	w io.Writer
	r *bufio.Reader
}

// send writes a message of type typ.
func (s *pgSession) send(typ byte, body []byte) error {
	msg := make([]byte, 5, 5+len(body))
	msg[0] = typ
	binary.BigEndian.PutUint32(msg[1:5], uint32(4+len(body)))
	_, err := s.w.Write(append(msg, body...))
	return err
}

// receive reads one message.
func (s *pgSession) receive() (byte, []byte, error) {
	var head [5]byte
	if _, err := io.ReadFull(s.r, head[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(head[1:5])
	if n < 4 || n > 1<<20 {
		return 0, nil, fmt.Errorf("a message of %d bytes, not PostgreSQL's protocol", n)
	}
	body := make([]byte, n-4)
	if _, err := io.ReadFull(s.r, body); err != nil {
		return 0, nil, err
	}
	return head[0], body, nil
}

// startup sends the startup message, answers the server's authentication
// request and reads on until the server is ready for a query.
func (s *pgSession) startup(user, database, password string) error {
	var b bytes.Buffer
	_ = binary.Write(&b, binary.BigEndian, uint32(0))
	_ = binary.Write(&b, binary.BigEndian, uint32(196608)) // protocol 3.0
	for _, kv := range []string{"user", user, "database", database} {
		b.WriteString(kv)
		b.WriteByte(0)
	}
	b.WriteByte(0)
	msg := b.Bytes()
	binary.BigEndian.PutUint32(msg[0:4], uint32(len(msg)))
	if _, err := s.w.Write(msg); err != nil {
		return err
	}
	var scram *scramClient
	for {
		typ, body, err := s.receive()
		if err != nil {
			return err
		}
		switch typ {
		case 'E':
			return pgError(body)
		case 'Z':
			return nil
		case 'R':
			if len(body) < 4 {
				return errors.New("a short authentication request")
			}
			code, data := binary.BigEndian.Uint32(body[:4]), body[4:]
			switch code {
			case 0: // AuthenticationOk
			case 3: // cleartext
				err = s.send('p', append([]byte(password), 0))
			case 5: // MD5, salted with data
				inner := md5.Sum([]byte(password + user))
				outer := md5.Sum(append([]byte(hex.EncodeToString(inner[:])), data...))
				err = s.send('p', append([]byte("md5"+hex.EncodeToString(outer[:])), 0))
			case 10: // SASL: data lists the mechanisms
				if !bytes.Contains(data, []byte("SCRAM-SHA-256\x00")) {
					return fmt.Errorf("the server offers no SASL mechanism acemqtest speaks (%q)", data)
				}
				scram = newSCRAM(password)
				first := scram.clientFirst()
				var m bytes.Buffer
				m.WriteString("SCRAM-SHA-256\x00")
				_ = binary.Write(&m, binary.BigEndian, uint32(len(first)))
				m.WriteString(first)
				err = s.send('p', m.Bytes())
			case 11: // SASL continue: the server's first message
				if scram == nil {
					return errors.New("a SASL continuation before SASL began")
				}
				var final string
				if final, err = scram.clientFinal(string(data)); err == nil {
					err = s.send('p', []byte(final))
				}
			case 12: // SASL final: the server's signature
				if scram == nil {
					return errors.New("a SASL outcome before SASL began")
				}
				err = scram.verify(string(data))
			default:
				return fmt.Errorf("authentication method %d, which acemqtest does not speak", code)
			}
			if err != nil {
				return err
			}
		}
	}
}

// untilReady reads the answer to a query up to ReadyForQuery.
func (s *pgSession) untilReady() error {
	var queryErr error
	for {
		typ, body, err := s.receive()
		if err != nil {
			return err
		}
		switch typ {
		case 'E':
			queryErr = pgError(body)
		case 'Z':
			return queryErr
		}
	}
}

// pgError turns an ErrorResponse into an error with its message and code.
func pgError(body []byte) error {
	var msg, code string
	for _, f := range bytes.Split(body, []byte{0}) {
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case 'M':
			msg = string(f[1:])
		case 'C':
			code = string(f[1:])
		}
	}
	return fmt.Errorf("postgres: %s (SQLSTATE %s)", msg, code)
}

// scramClient is the client side of SCRAM-SHA-256 (RFC 7677) as PostgreSQL
// uses it: the user name goes in the startup message, not in SCRAM's.
type scramClient struct {
	password  string
	firstBare string // client-first-message-bare
	nonce     string
	serverSig []byte // expected in the server's final message
}

func newSCRAM(password string) *scramClient {
	var b [18]byte
	_, _ = rand.Read(b[:])
	return &scramClient{password: password, nonce: base64.StdEncoding.EncodeToString(b[:])}
}

// clientFirst returns client-first-message.
func (c *scramClient) clientFirst() string {
	c.firstBare = "n=,r=" + c.nonce
	return "n,," + c.firstBare
}

// clientFinal answers server-first-message with client-final-message.
func (c *scramClient) clientFinal(serverFirst string) (string, error) {
	var nonce, salt64, iters string
	for _, attr := range strings.Split(serverFirst, ",") {
		k, v, _ := strings.Cut(attr, "=")
		switch k {
		case "r":
			nonce = v
		case "s":
			salt64 = v
		case "i":
			iters = v
		}
	}
	salt, err := base64.StdEncoding.DecodeString(salt64)
	if err != nil || !strings.HasPrefix(nonce, c.nonce) || len(nonce) == len(c.nonce) {
		return "", fmt.Errorf("a SCRAM server-first-message acemqtest cannot use: %q", serverFirst)
	}
	n, err := strconv.Atoi(iters)
	if err != nil || n < 1 {
		return "", fmt.Errorf("SCRAM iteration count %q", iters)
	}
	salted, err := pbkdf2.Key(sha256.New, c.password, salt, n, sha256.Size)
	if err != nil {
		return "", err
	}
	clientKey := hmacSHA256(salted, "Client Key")
	storedKey := sha256.Sum256(clientKey)
	withoutProof := "c=biws,r=" + nonce // biws: base64 of the "n,," header
	authMessage := c.firstBare + "," + serverFirst + "," + withoutProof
	proof := hmacSHA256(storedKey[:], authMessage)
	for i := range proof {
		proof[i] ^= clientKey[i]
	}
	c.serverSig = hmacSHA256(hmacSHA256(salted, "Server Key"), authMessage)
	return withoutProof + ",p=" + base64.StdEncoding.EncodeToString(proof), nil
}

// verify checks server-final-message, which proves the server knew the
// password too.
func (c *scramClient) verify(serverFinal string) error {
	v, ok := strings.CutPrefix(serverFinal, "v=")
	if !ok {
		return fmt.Errorf("SCRAM: the server ended with %q", serverFinal)
	}
	sig, err := base64.StdEncoding.DecodeString(v)
	if err != nil || !hmac.Equal(sig, c.serverSig) {
		return errors.New("SCRAM: the server's signature does not match")
	}
	return nil
}

func hmacSHA256(key []byte, msg string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(msg))
	return h.Sum(nil)
}
