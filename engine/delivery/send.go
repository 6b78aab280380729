package delivery

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-retryablehttp"
)

// MaxResponse is how much of a response body is read and kept.
const MaxResponse = 64 << 10

// ClientOptions configure a Client.
type ClientOptions struct {
	// Timeout bounds each HTTP request (default 15 s): success is a 2xx
	// within it.
	Timeout time.Duration
	// RetryMax is how many quick retries an attempt makes after a
	// connection error, a 5xx or a 429 (default 2; -1 for none).
	RetryMax int
	// RetryWaitMax caps the wait between quick retries (default 2 s). A
	// Retry-After longer than it ends the attempt and is left to the
	// durable schedule.
	RetryWaitMax time.Duration
	UserAgent    string
	Logger       *slog.Logger
}

// A Client sends webhooks, one attempt at a time.
type Client struct {
	policy *Policy
	opts   ClientOptions
	rc     *retryablehttp.Client
}

// NewClient returns a client that connects only where p allows.
func NewClient(p *Policy, o ClientOptions) *Client {
	if o.Timeout <= 0 {
		o.Timeout = 15 * time.Second
	}
	switch {
	case o.RetryMax == 0:
		o.RetryMax = 2
	case o.RetryMax < 0:
		o.RetryMax = 0
	}
	if o.RetryWaitMax <= 0 {
		o.RetryWaitMax = 2 * time.Second
	}
	if o.UserAgent == "" {
		o.UserAgent = "crmd-webhooks/1"
	}
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second, Control: p.Control}
	transport := &http.Transport{
		Proxy:                 nil, // a proxy would connect for us, past the policy
		DialContext:           dialer.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	rc := retryablehttp.NewClient()
	rc.HTTPClient = &http.Client{
		Transport: transport,
		Timeout:   o.Timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse // a redirect is a failure, not followed
		},
	}
	rc.Logger = nil
	rc.RetryMax = o.RetryMax
	rc.RetryWaitMin = 100 * time.Millisecond
	rc.RetryWaitMax = o.RetryWaitMax
	rc.CheckRetry = func(ctx context.Context, resp *http.Response, err error) (bool, error) {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		if err != nil && strings.Contains(err.Error(), "refused: ") {
			return false, nil // the policy will not change its mind
		}
		if resp != nil {
			if ra, ok := retryAfter(resp.Header.Get("Retry-After"), time.Now()); ok && ra > o.RetryWaitMax {
				return false, nil
			}
		}
		return retryablehttp.DefaultRetryPolicy(ctx, resp, err)
	}
	rc.Backoff = func(min, max time.Duration, n int, resp *http.Response) time.Duration {
		return retryablehttp.DefaultBackoff(min, max, n, resp) // capped: longer Retry-After stopped the retries above
	}
	rc.PrepareRetry = sign // a fresh timestamp on every retry
	rc.ErrorHandler = func(resp *http.Response, err error, _ int) (*http.Response, error) {
		return resp, err // the last response, as it is: Send classifies it
	}
	return &Client{policy: p, opts: o, rc: rc}
}

// signing is what a request is signed with, carried by its context so that
// retries are signed afresh.
type signing struct {
	r     *Request
	tries int
}

type signingKey struct{}

func sign(h *http.Request) error {
	sg := h.Context().Value(signingKey{}).(*signing)
	sg.tries++
	return SetHeaders(h.Header, sg.r.Secret, sg.r.MsgID, time.Now(), sg.r.Body)
}

// A Request is one message to send.
type Request struct {
	URL     string
	Headers map[string]string
	MsgID   string
	Secret  string
	Body    []byte
}

// A Result is what an attempt came to.
type Result struct {
	Status     int
	Body       []byte
	Err        string
	RetryAfter time.Duration
	Tries      int
	Duration   time.Duration
}

// OK reports a 2xx.
func (r Result) OK() bool { return r.Status >= 200 && r.Status < 300 && r.Err == "" }

// Gone reports a 410: the receiver wants no more.
func (r Result) Gone() bool { return r.Status == http.StatusGone }

// Send makes one attempt: a signed POST, with quick retries.
func (c *Client) Send(ctx context.Context, r Request) Result {
	start := time.Now()
	res := Result{}
	defer func() { res.Duration = time.Since(start) }()
	if err := c.policy.CheckURL(r.URL); err != nil {
		res.Err = err.Error()
		return res
	}
	sg := &signing{r: &r}
	ctx = context.WithValue(ctx, signingKey{}, sg)
	req, err := retryablehttp.NewRequestWithContext(ctx, http.MethodPost, r.URL, r.Body)
	if err != nil {
		res.Err = err.Error()
		return res
	}
	for k, v := range r.Headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", c.opts.UserAgent)
	if err := sign(req.Request); err != nil {
		res.Err = "signing: " + err.Error()
		return res
	}
	resp, err := c.rc.Do(req)
	res.Tries = sg.tries
	if resp != nil {
		defer resp.Body.Close()
		res.Status = resp.StatusCode
		res.Body, _ = io.ReadAll(io.LimitReader(resp.Body, MaxResponse))
		res.RetryAfter, _ = retryAfter(resp.Header.Get("Retry-After"), time.Now())
		if resp.StatusCode >= 300 && resp.StatusCode < 400 {
			res.Err = fmt.Sprintf("redirect to %q not followed", redact(resp.Header.Get("Location")))
		} else if resp.StatusCode < 200 || resp.StatusCode >= 300 {
			res.Err = fmt.Sprintf("the receiver answered %d", resp.StatusCode)
		}
	}
	if err != nil && res.Err == "" {
		res.Err = cleanError(err)
	}
	return res
}

// retryAfter reads a Retry-After header: seconds or an HTTP date.
func retryAfter(v string, now time.Time) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	if s, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && s >= 0 {
		return time.Duration(s) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(0, t.Sub(now)), true
	}
	return 0, false
}

// cleanError says why a request failed without the URL's query (which may
// carry a token).
func cleanError(err error) string {
	var ue interface{ Unwrap() error }
	msg := err.Error()
	if errors.As(err, &ue) {
		if inner := errors.Unwrap(err); inner != nil {
			msg = inner.Error()
		}
	}
	if i := strings.Index(msg, "refused: "); i >= 0 {
		return msg[i:]
	}
	return redact(msg)
}

// redact drops query strings from URLs in s.
func redact(s string) string {
	if i := strings.IndexByte(s, '?'); i >= 0 {
		return s[:i] + "?…"
	}
	return s
}
