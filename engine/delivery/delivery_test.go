package delivery

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestSignatureVector checks Sign against the test vector the Standard
// Webhooks libraries share (their own test suites use it), so a receiver
// using any of them verifies what crmd signs.
func TestSignatureVector(t *testing.T) {
	const (
		secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
		msgID  = "msg_p5jXN8AQM9LWM0D4loKWxJek"
		body   = `{"test": 2432232314}`
		want   = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	)
	ts := time.Unix(1614265330, 0)
	got, err := Sign(secret, msgID, ts, []byte(body))
	if err != nil || got != want {
		t.Fatalf("Sign = %q, %v; want %q", got, err, want)
	}
	h := http.Header{}
	if err := SetHeaders(h, secret, msgID, ts, []byte(body)); err != nil {
		t.Fatal(err)
	}
	if err := Verify(secret, h, []byte(body), ts.Add(time.Minute)); err != nil {
		t.Errorf("Verify of a signed message: %v", err)
	}
	h.Set("webhook-signature", "v1,bad v2,x "+want) // any listed v1 signature may match
	if err := Verify(secret, h, []byte(body), ts); err != nil {
		t.Errorf("Verify with several signatures: %v", err)
	}
	for name, mutate := range map[string]func(h http.Header) ([]byte, time.Time){
		"another body":    func(h http.Header) ([]byte, time.Time) { return []byte(`{"test": 1}`), ts },
		"too old":         func(h http.Header) ([]byte, time.Time) { return []byte(body), ts.Add(6 * time.Minute) },
		"from the future": func(h http.Header) ([]byte, time.Time) { return []byte(body), ts.Add(-6 * time.Minute) },
		"no signature":    func(h http.Header) ([]byte, time.Time) { h.Del("webhook-signature"); return []byte(body), ts },
		"another id":      func(h http.Header) ([]byte, time.Time) { h.Set("webhook-id", "msg_x"); return []byte(body), ts },
	} {
		h := http.Header{}
		SetHeaders(h, secret, msgID, ts, []byte(body))
		b, now := mutate(h)
		if err := Verify(secret, h, b, now); err == nil {
			t.Errorf("%s: Verify accepted it", name)
		}
	}
	if err := VerifyHMAC("s3cret", "sha256=a7d3b6b8ba9dd6d5bb28e0a0d7d4f93c1d3e4a73e6c6a2e4b0bd2a4a4b1c9e10", []byte("x")); err == nil {
		t.Error("VerifyHMAC accepted a wrong signature")
	}
	// GitHub's documented example: secret "It's a Secret to Everybody",
	// body "Hello, World!".
	if err := VerifyHMAC("It's a Secret to Everybody", "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
		[]byte("Hello, World!")); err != nil {
		t.Errorf("VerifyHMAC of GitHub's example: %v", err)
	}
}

func TestBlocked(t *testing.T) {
	for _, c := range []struct {
		addr    string
		blocked bool
	}{
		{"127.0.0.1", true}, {"::1", true}, {"10.1.2.3", true}, {"172.16.0.1", true}, {"192.168.1.1", true},
		{"169.254.169.254", true}, {"fe80::1", true}, {"fc00::1", true}, {"fd00:ec2::254", true}, {"100.64.0.1", true},
		{"224.0.0.1", true}, {"ff02::1", true}, {"0.0.0.0", true}, {"::", true}, {"255.255.255.255", true},
		{"::ffff:127.0.0.1", true}, {"::ffff:10.0.0.1", true}, {"::ffff:169.254.169.254", true},
		{"93.184.216.34", false}, {"2606:2800:220:1::1", false}, {"8.8.8.8", false}, {"::ffff:8.8.8.8", false},
	} {
		reason, blocked := Blocked(netip.MustParseAddr(c.addr))
		if blocked != c.blocked {
			t.Errorf("Blocked(%s) = %q, %v; want %v", c.addr, reason, blocked, c.blocked)
		}
	}
}

func TestCheckURL(t *testing.T) {
	p := &Policy{}
	for _, bad := range []string{"ftp://example.com/x", "http:///x", "https://user:pw@example.com/", "http://127.0.0.1/",
		"http://[::ffff:127.0.0.1]/", "http://169.254.169.254/latest/meta-data", "gopher://x"} {
		if err := p.CheckURL(bad); err == nil {
			t.Errorf("CheckURL(%s) accepted it", bad)
		}
	}
	if err := p.CheckURL("https://hooks.example.com/x?a=1"); err != nil {
		t.Errorf("CheckURL of a public URL: %v", err)
	}
}

func TestNextAttempt(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	for made := 1; made < len(Schedule); made++ {
		next, ok := NextAttempt(made, now, 0)
		d := next.Sub(now)
		if !ok || d < Schedule[made]*9/10 || d > Schedule[made]*11/10 {
			t.Errorf("NextAttempt(%d) = %s, %v; want about %s", made, d, ok, Schedule[made])
		}
	}
	if _, ok := NextAttempt(len(Schedule), now, 0); ok {
		t.Errorf("NextAttempt after %d attempts has another", len(Schedule))
	}
	if next, _ := NextAttempt(1, now, time.Hour); next.Sub(now) != time.Hour {
		t.Errorf("Retry-After of an hour gave %s", next.Sub(now))
	}
	if next, _ := NextAttempt(1, now, 100*time.Hour); next.Sub(now) != 24*time.Hour {
		t.Errorf("Retry-After is not capped at 24 h: %s", next.Sub(now))
	}
}

// receiver is a webhook receiver: it answers with fn and counts requests,
// checking each is a signed JSON POST.
func receiver(t *testing.T, secret string, fn func(n int, w http.ResponseWriter, r *http.Request)) (*httptest.Server, *atomic.Int32) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := int(hits.Add(1))
		body, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" || r.Header.Get("X-Extra") != "yes" {
			t.Errorf("request %d: %s, Content-Type %q, X-Extra %q", n, r.Method, r.Header.Get("Content-Type"), r.Header.Get("X-Extra"))
		}
		if err := Verify(secret, r.Header, body, time.Now()); err != nil {
			t.Errorf("request %d: signature: %v", n, err)
		}
		fn(n, w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

func loopback(t *testing.T) *Policy {
	allow, err := ParseAllow("127.0.0.0/8, ::1")
	if err != nil {
		t.Fatal(err)
	}
	return &Policy{Allow: allow}
}

func TestSend(t *testing.T) {
	secret, err := NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	req := func(url string) Request {
		return Request{URL: url, Headers: map[string]string{"X-Extra": "yes"}, MsgID: "msg_1", Secret: secret, Body: []byte(`{"a":1}`)}
	}
	ctx := context.Background()
	c := NewClient(loopback(t), ClientOptions{RetryWaitMax: 10 * time.Millisecond})

	t.Run("fails twice then succeeds", func(t *testing.T) {
		srv, hits := receiver(t, secret, func(n int, w http.ResponseWriter, r *http.Request) {
			if n <= 2 {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
		})
		res := c.Send(ctx, req(srv.URL))
		if !res.OK() || res.Tries != 3 || hits.Load() != 3 {
			t.Errorf("result %+v after %d requests; want success on the third", res, hits.Load())
		}
	})
	t.Run("410 is gone, not retried", func(t *testing.T) {
		srv, hits := receiver(t, secret, func(_ int, w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusGone) })
		res := c.Send(ctx, req(srv.URL))
		if res.OK() || !res.Gone() || hits.Load() != 1 {
			t.Errorf("result %+v after %d requests", res, hits.Load())
		}
	})
	t.Run("redirects are not followed", func(t *testing.T) {
		other, otherHits := receiver(t, secret, func(int, http.ResponseWriter, *http.Request) {})
		srv, _ := receiver(t, secret, func(_ int, w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, other.URL+"/?token=x", http.StatusFound)
		})
		res := c.Send(ctx, req(srv.URL))
		if res.OK() || res.Status != http.StatusFound || !strings.Contains(res.Err, "not followed") || otherHits.Load() != 0 {
			t.Errorf("result %+v; the redirect's target got %d requests", res, otherHits.Load())
		}
		if strings.Contains(res.Err, "token=x") {
			t.Errorf("the error shows the query: %s", res.Err)
		}
	})
	t.Run("a long Retry-After ends the attempt", func(t *testing.T) {
		srv, hits := receiver(t, secret, func(_ int, w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "120")
			w.WriteHeader(http.StatusTooManyRequests)
		})
		res := c.Send(ctx, req(srv.URL))
		if res.OK() || res.RetryAfter != 2*time.Minute || hits.Load() != 1 {
			t.Errorf("result %+v after %d requests", res, hits.Load())
		}
	})
	t.Run("a Retry-After date", func(t *testing.T) {
		srv, _ := receiver(t, secret, func(_ int, w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", time.Now().Add(time.Hour).UTC().Format(http.TimeFormat))
			w.WriteHeader(http.StatusServiceUnavailable)
		})
		res := c.Send(ctx, req(srv.URL))
		if res.RetryAfter < 58*time.Minute || res.RetryAfter > time.Hour {
			t.Errorf("RetryAfter %s from a date an hour away", res.RetryAfter)
		}
	})
	t.Run("response bodies are kept up to 64 KiB", func(t *testing.T) {
		srv, _ := receiver(t, secret, func(_ int, w http.ResponseWriter, r *http.Request) {
			w.Write([]byte(strings.Repeat("x", 100_000)))
		})
		res := c.Send(ctx, req(srv.URL))
		if !res.OK() || len(res.Body) != MaxResponse {
			t.Errorf("kept %d bytes, ok %v", len(res.Body), res.OK())
		}
	})
	t.Run("a receiver that hangs up fails", func(t *testing.T) {
		srv, _ := receiver(t, secret, func(_ int, w http.ResponseWriter, r *http.Request) {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
		})
		res := NewClient(loopback(t), ClientOptions{RetryMax: -1}).Send(ctx, req(srv.URL))
		if res.OK() || res.Err == "" {
			t.Errorf("result %+v", res)
		}
	})
	t.Run("a slow receiver times out", func(t *testing.T) {
		release := make(chan struct{})
		srv, _ := receiver(t, secret, func(_ int, w http.ResponseWriter, r *http.Request) { <-release })
		defer close(release)
		res := NewClient(loopback(t), ClientOptions{RetryMax: -1, Timeout: 50 * time.Millisecond}).Send(ctx, req(srv.URL))
		if res.OK() || res.Err == "" {
			t.Errorf("result %+v", res)
		}
	})
	t.Run("loopback is refused by default, by address and by name", func(t *testing.T) {
		srv, hits := receiver(t, secret, func(int, http.ResponseWriter, *http.Request) {})
		strict := NewClient(&Policy{}, ClientOptions{})
		byName := strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)
		for _, u := range []string{srv.URL, byName} {
			res := strict.Send(ctx, req(u))
			if res.OK() || !strings.Contains(res.Err, "refused") {
				t.Errorf("%s: result %+v", u, res)
			}
		}
		if hits.Load() != 0 {
			t.Errorf("the receiver got %d requests", hits.Load())
		}
	})
}
