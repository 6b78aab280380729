package httpapi

import (
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/crmd/crmd/engine"
	"github.com/crmd/crmd/objects"
)

// DefaultInboundRate is how many requests a second an inbound webhook URL
// takes by default.
const DefaultInboundRate = 50

// inboundPrefix is where inbound webhook URLs live.
const inboundPrefix = "/api/in/"

// redactPath hides the token of an inbound webhook URL: it is the URL's
// only credential, so it never goes to a log.
func redactPath(p string) string {
	if strings.HasPrefix(p, inboundPrefix) {
		return inboundPrefix + "[token]"
	}
	return p
}

// inbound takes a request posted to an inbound webhook's URL. It needs no
// API key: the token in the URL names the webhook and its business.
func (a *api) inbound(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
	token := ps.ByName("token")
	if wait, ok := a.limits.take(token, time.Now()); !ok {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
		a.writeError(w, r, &apiError{status: http.StatusTooManyRequests, code: codeRateLimited,
			message: "too many requests to this inbound webhook; retry after the time in Retry-After"})
		return
	}
	target, err := a.eng.FindInbound(r.Context(), token)
	if errors.Is(err, objects.ErrNotFound) {
		a.notFound(w, r) // the same answer as any unknown URL
		return
	}
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	if ri, ok := r.Context().Value(ctxKey{}).(*reqInfo); ok {
		ri.business = target.BusinessID
	}
	raw, err := readBody(w, r, a.maxBody)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	payload, err := decodeObject(raw)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	key := r.Header.Get("webhook-id")
	if key == "" {
		key = r.Header.Get("Idempotency-Key")
	}
	if len(key) > 255 {
		a.writeError(w, r, badRequest("the idempotency key (webhook-id or Idempotency-Key) is longer than 255 characters"))
		return
	}
	ans, err := a.eng.Inbound(r.Context(), engine.InboundRequest{Target: target, Raw: raw, Payload: plainNumbers(payload).(map[string]any),
		Headers: r.Header, Query: r.URL.Query(), Key: key})
	var se *engine.SignatureError
	switch {
	case errors.As(err, &se):
		a.writeError(w, r, &apiError{status: http.StatusUnauthorized, code: codeUnauthorized, message: se.Reason})
		return
	case errors.Is(err, objects.ErrNotFound) && ans == nil:
		var nf *objects.NotFoundError
		if !errors.As(err, &nf) { // the webhook is gone, not a record
			a.notFound(w, r)
			return
		}
		a.writeError(w, r, err)
		return
	case err != nil:
		a.writeError(w, r, err)
		return
	}
	if ans.Replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	writeJSON(w, ans.Status, ans.Body)
}

// plainNumbers turns the json.Numbers of a decoded body into float64, the
// numbers expressions compute with.
func plainNumbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		f, err := x.Float64()
		if err != nil {
			return x.String()
		}
		return f
	case map[string]any:
		for k, e := range x {
			x[k] = plainNumbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = plainNumbers(e)
		}
	}
	return v
}

// limiter is a token bucket per inbound webhook token, in this process.
type limiter struct {
	mu      sync.Mutex
	rate    float64 // tokens a second
	burst   float64
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

// maxBuckets bounds the limiter's memory: past it, the buckets start over.
const maxBuckets = 100_000

func newLimiter(rate, burst float64) *limiter {
	return &limiter{rate: rate, burst: burst, buckets: map[string]*bucket{}}
}

// take takes a token for key, or says how long until one is there.
func (l *limiter) take(key string, now time.Time) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.buckets[key]
	if !ok {
		if len(l.buckets) >= maxBuckets {
			l.buckets = map[string]*bucket{}
		}
		b = &bucket{tokens: l.burst, at: now}
		l.buckets[key] = b
	}
	b.tokens = min(l.burst, b.tokens+now.Sub(b.at).Seconds()*l.rate)
	b.at = now
	if b.tokens >= 1 {
		b.tokens--
		return 0, true
	}
	return time.Duration((1 - b.tokens) / l.rate * float64(time.Second)), false
}
