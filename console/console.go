package console

import (
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"

	"github.com/acemq/acemq"
)

//go:embed assets
var assets embed.FS

// page is the one HTML page; the script fills it from the JSON API.
var page = template.Must(template.ParseFS(assets, "assets/index.html"))

// csrfHeader carries the page's CSRF token on every write.
const csrfHeader = "X-Acemq-Csrf"

// maxRequestBody bounds the JSON a write request may send (an edited body
// included).
const maxRequestBody = 4 << 20

// console is one Handler.
type console struct {
	conn *acemq.Conn
	cfg  config
	csrf string
	mux  *http.ServeMux
}

// Handler returns the console of conn: a web page and its JSON API, the
// assets embedded, served from the root of whatever path it is mounted on
// (mount it with http.StripPrefix under a prefix). It is read-only unless
// given Write, serves only loopback clients unless given Auth or Token,
// and refuses cross-origin writes (http.CrossOriginProtection) and writes
// without the page's CSRF token. It starts no goroutine: every read and
// action runs in the request that asked for it, and a request that ends
// early (the page closed) puts back every message it held.
func Handler(conn *acemq.Conn, opts ...Option) http.Handler {
	c := &console{conn: conn, cfg: config{logger: slog.Default()}}
	for _, o := range opts {
		if o != nil {
			o.apply(&c.cfg)
		}
	}
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	c.csrf = hex.EncodeToString(b[:])

	mux := http.NewServeMux()
	static, _ := fs.Sub(assets, "assets")
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /{$}", c.index)
	mux.HandleFunc("GET /api/overview", c.overview)
	mux.HandleFunc("GET /api/deadletters", c.deadLetters)
	mux.HandleFunc("GET /api/message", c.message)
	mux.HandleFunc("GET /api/keys", c.keys)
	mux.HandleFunc("GET /api/outbox", c.outboxRows)
	mux.HandleFunc("POST /api/outbox/replay", c.writes(c.outboxReplay))
	mux.HandleFunc("POST /api/replay", c.writes(c.replay))
	mux.HandleFunc("POST /api/edit", c.writes(c.edit))
	mux.HandleFunc("POST /api/discard", c.writes(c.discard))
	mux.HandleFunc("POST /api/release", c.writes(c.release))
	c.mux = mux
	return http.NewCrossOriginProtection().Handler(c)
}

// ServeHTTP admits the request (Auth, or loopback only) and serves it.
func (c *console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if c.conn == nil {
		http.Error(w, "acemq: console: Handler was given a nil Conn", http.StatusInternalServerError)
		return
	}
	if c.cfg.auth == nil {
		if !loopback(r.RemoteAddr) {
			http.Error(w, "acemq: console: serving loopback clients only; give the console an Auth (or -token) to serve others", http.StatusForbidden)
			return
		}
	} else if err := c.cfg.auth(r); err != nil {
		http.Error(w, "acemq: console: "+err.Error(), http.StatusUnauthorized)
		return
	}
	if t := r.URL.Query().Get("token"); c.cfg.token && t != "" && r.Method == http.MethodGet {
		// Token admitted it from the link: keep it in a cookie the page's
		// own requests carry, out of the address bar's history.
		http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: t, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
	}
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; object-src 'none'; frame-ancestors 'none'")
	w.Header().Set("Referrer-Policy", "no-referrer")
	c.mux.ServeHTTP(w, r)
}

// loopback reports whether addr (host:port) is a loopback address.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// writes guards an action: only with Write, and only with the page's CSRF
// token.
func (c *console) writes(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !c.cfg.write {
			http.Error(w, "acemq: console: read-only; start it with -write (console.Write) to change queues", http.StatusForbidden)
			return
		}
		if subtle.ConstantTimeCompare([]byte(r.Header.Get(csrfHeader)), []byte(c.csrf)) != 1 {
			http.Error(w, "acemq: console: the request lacks the page's CSRF token", http.StatusForbidden)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxRequestBody)
		h(w, r)
	}
}

func (c *console) index(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	err := page.Execute(w, map[string]any{"CSRF": c.csrf, "Write": c.cfg.write})
	if err != nil {
		c.cfg.logger.Warn("acemq: console: rendering the page", "error", err)
	}
}

// who names the operator of r.
func (c *console) who(r *http.Request) string {
	if c.cfg.who != nil {
		if s := c.cfg.who(r); s != "" {
			return s
		}
	}
	return "console@" + r.RemoteAddr
}

// reply writes v as JSON.
func reply(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(v)
}

// fail writes err as a JSON error with status.
func fail(w http.ResponseWriter, status int, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
}

// decodeBody reads r's JSON body into v.
func decodeBody(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return errors.New("acemq: console: the request's JSON: " + err.Error())
	}
	return nil
}
