package urls

import (
	"net/url"
	"slices"
	"strings"
	"testing"
)

func TestSplit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		in   string
		want []string
	}{
		{"one", "amqp://h/", []string{"amqp://h/"}},
		{"empty", "", []string{""}},
		{"two", "amqp://a/,amqp://b/", []string{"amqp://a/", "amqp://b/"}},
		{"spaces", " amqp://a/ , amqps://b/ ", []string{"amqp://a/", "amqps://b/"}},
		{"comma in a password", "amqp://u:x,y@a/,amqp://u:x,y@b/", []string{"amqp://u:x,y@a/", "amqp://u:x,y@b/"}},
		{"empty entry", "amqp://a/,,amqp://b/", []string{"amqp://a/", "", "amqp://b/"}},
		{"trailing comma", "amqp://a/,", []string{"amqp://a/", ""}},
		{"blank entry", "amqp://a/, ,amqp://b/", []string{"amqp://a/", "", "amqp://b/"}},
		{"memory mixed", "amqp://a/,memory://x", []string{"amqp://a/", "memory://x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := Split(tc.in); !slices.Equal(got, tc.want) {
				t.Errorf("Split(%q) = %q; want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in, want string
	}{
		{"password", "amqp://user:s3cret@host:5672/vh", "amqp://user:xxxxx@host:5672/vh"},
		{"no password", "amqp://user@host/", "amqp://user@host/"},
		{"no userinfo", "amqp://host/", "amqp://host/"},
		{"bad escape in the password", "amqp://user:pa%zz@host/", "amqp://user:xxxxx@host/"},
		{"bad escape in the path", "amqp://user:s3cret@host/%zz", "amqp://user:xxxxx@host/%zz"},
		{"an @ in the password", "amqp://user:a@b@host/", "amqp://user:xxxxx@host/"},
		{"list", "amqp://u:p1@a:5801/,amqp://u:p2@b:5802/", "amqp://u:xxxxx@a:5801/,amqp://u:xxxxx@b:5802/"},
		{"list with a bad entry", "amqp://u:p1@a/,amqp://u:p%zz@b/", "amqp://u:xxxxx@a/,amqp://u:xxxxx@b/"},
		{"comma in a password", "amqp://u:x,y@a/", "amqp://u:xxxxx@a/"},
		{"not a URL", "nonsense", "nonsense"},
		{"empty", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := Redact(tc.in); got != tc.want {
				t.Errorf("Redact(%q) = %q; want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestScrub(t *testing.T) {
	t.Parallel()
	list := "amqp://u:p/1@a/,amqp://u:s3cret@b/"
	msg := "dial amqp://u:s3cret@b/ failed: bad password s3cret (p%2F1)"
	got := Scrub(msg, list)
	if strings.Contains(got, "s3cret") || strings.Contains(got, "p%2F1") {
		t.Errorf("Scrub left a password: %q", got)
	}
}

// FuzzRedact builds URLs and lists of them around fuzzed passwords, escaped
// as Go's net/url writes them, and checks that Redact's output does not
// depend on the passwords at all: whatever they hold, no byte of them
// reaches the output. Raw fuzzed input must not make Redact panic, and an
// output never holds the password Password finds in the input.
func FuzzRedact(f *testing.F) {
	f.Add("s3cret", "p,q", "host:5672", "/vh", 2, "amqp://u:pw@h/")
	f.Add("a@b", ":", "h", "/%zz", 1, "amqp://u:p%zz@h/")
	f.Add("", "x", "[::1]:5672", "", 3, "amqps://u:p@h/,amqp://v:w@i/")
	f.Fuzz(func(t *testing.T, p1, p2, host, path string, n int, raw string) {
		_ = Redact(raw)
		if p := Password(raw); len(p) >= 3 && len(Split(raw)) == 1 && !strings.Contains(strings.Replace(raw, p, "", 1), p) {
			if strings.Contains(Redact(raw), p) {
				t.Fatalf("Redact(%q) = %q shows the password %q", raw, Redact(raw), p)
			}
		}
		if strings.ContainsAny(host+path, "@,") || strings.Contains(path, "://") || strings.ContainsAny(host, "/?#") {
			return
		}
		n = 1 + (n%3+3)%3
		build := func(pass string) string {
			entries := make([]string, n)
			for i := range entries {
				u := url.URL{Scheme: "amqp", User: url.UserPassword("user", pass), Host: host}
				entries[i] = u.String() + path
			}
			return strings.Join(entries, ",")
		}
		a, b := Redact(build(p1)), Redact(build(p2))
		if a != b {
			t.Fatalf("the output depends on the password:\n%q\n%q", a, b)
		}
		if p1 != "" && len(p1) >= 3 && !strings.Contains(build(""), p1) && strings.Contains(a, p1) {
			t.Fatalf("Redact(%q) = %q shows the password", build(p1), a)
		}
	})
}
