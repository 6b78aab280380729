// Package httpapi serves crmd over HTTP: the records API under /api/v1,
// health, and the mapping of engine errors to statuses and error bodies. It
// holds no business logic; every read and write goes to the engine.
package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/crmd/crmd/engine"
	"github.com/crmd/crmd/objects"
)

// DefaultMaxBody is the default limit on request bodies.
const DefaultMaxBody = 1 << 20

// Options configure the handler.
type Options struct {
	Logger  *slog.Logger
	MaxBody int64 // bytes; DefaultMaxBody when zero
	// InboundRate is how many requests a second each inbound webhook URL
	// takes, with bursts of twice as many; DefaultInboundRate when zero.
	InboundRate float64
}

type api struct {
	eng     *engine.Engine
	log     *slog.Logger
	maxBody int64
	limits  *limiter
}

// New returns the HTTP handler of crmd.
func New(eng *engine.Engine, opts Options) http.Handler {
	a := &api{eng: eng, log: opts.Logger, maxBody: opts.MaxBody}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	if a.maxBody <= 0 {
		a.maxBody = DefaultMaxBody
	}
	rate := opts.InboundRate
	if rate <= 0 {
		rate = DefaultInboundRate
	}
	a.limits = newLimiter(rate, 2*rate)
	r := httprouter.New()
	r.RedirectTrailingSlash = false
	r.RedirectFixedPath = false
	r.HandleMethodNotAllowed = true
	r.NotFound = http.HandlerFunc(a.notFound)
	r.MethodNotAllowed = http.HandlerFunc(a.methodNotAllowed)
	r.GlobalOPTIONS = http.HandlerFunc(options)

	r.GET("/healthz", a.healthz)
	r.GET("/api/v1/:object", a.authed(a.list))
	r.POST("/api/v1/:object", a.authed(a.create))
	r.GET("/api/v1/:object/:id", a.authed(a.get))
	r.PATCH("/api/v1/:object/:id", a.authed(a.update))
	r.DELETE("/api/v1/:object/:id", a.authed(a.remove))
	r.POST("/api/in/:token", a.inbound)
	return a.middleware(r)
}

// reqInfo travels with a request for the log line written when it ends.
type reqInfo struct {
	id       string
	business string
}

type ctxKey struct{}

func requestID(ctx context.Context) string {
	if ri, ok := ctx.Value(ctxKey{}).(*reqInfo); ok {
		return ri.id
	}
	return ""
}

// clientRequestID is the shape of a request id a client (or a proxy in
// front of crmd) may send to have it used for its request.
var clientRequestID = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

// middleware gives every request an id, answers a panic with a 500, and logs
// one line per request without its body, query or credentials.
func (a *api) middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ri := &reqInfo{id: r.Header.Get("X-Request-Id")}
		if !clientRequestID.MatchString(ri.id) {
			ri.id = objects.NewID()
		}
		w.Header().Set("X-Request-Id", ri.id)
		r = r.WithContext(context.WithValue(r.Context(), ctxKey{}, ri))
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				a.writeError(sw, r, fmt.Errorf("panic: %v", p))
			}
			attrs := []slog.Attr{
				slog.String("request_id", ri.id),
				slog.String("method", r.Method),
				slog.String("path", redactPath(r.URL.Path)),
				slog.Int("status", sw.status),
				slog.Duration("duration", time.Since(start)),
			}
			if ri.business != "" {
				attrs = append(attrs, slog.String("business", ri.business))
			}
			a.log.LogAttrs(r.Context(), slog.LevelInfo, "request", attrs...)
		}()
		next.ServeHTTP(sw, r)
	})
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (a *api) notFound(w http.ResponseWriter, r *http.Request) {
	a.writeError(w, r, &apiError{status: http.StatusNotFound, code: codeNotFound, message: "no such endpoint: " + r.Method + " " + redactPath(r.URL.Path)})
}

func (a *api) methodNotAllowed(w http.ResponseWriter, r *http.Request) {
	a.writeError(w, r, &apiError{status: http.StatusMethodNotAllowed, code: codeMethodNotAllowed,
		message: fmt.Sprintf("method %s is not allowed here; allowed: %s", r.Method, w.Header().Get("Allow"))})
}

// options answers OPTIONS with the allowed methods, which the router has
// put in the Allow header.
func options(w http.ResponseWriter, r *http.Request) {
	w.WriteHeader(http.StatusNoContent)
}

func (a *api) healthz(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := a.eng.Ping(ctx); err != nil {
		a.log.LogAttrs(r.Context(), slog.LevelWarn, "health check failed", slog.String("request_id", requestID(r.Context())), slog.String("err", err.Error()))
		a.writeError(w, r, &apiError{status: http.StatusServiceUnavailable, code: codeUnavailable, message: "the store is not reachable"})
		return
	}
	writeJSON(w, http.StatusOK, []byte(`{"status":"ok"}`))
}

type authedHandler func(w http.ResponseWriter, r *http.Request, ps httprouter.Params, v *engine.View)

// authed authenticates a request and takes the view of its business that
// the whole request uses. The business a request acts for comes from its
// key and from nowhere else.
func (a *api) authed(h authedHandler) httprouter.Handle {
	return func(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
		key, err := apiKey(r)
		if err != nil {
			a.writeError(w, r, err)
			return
		}
		p, err := a.eng.Authenticate(r.Context(), key)
		if err != nil {
			a.writeError(w, r, err)
			return
		}
		if ri, ok := r.Context().Value(ctxKey{}).(*reqInfo); ok {
			ri.business = p.BusinessID
		}
		v, err := a.eng.View(r.Context(), p.BusinessID)
		if err != nil {
			a.writeError(w, r, err)
			return
		}
		h(w, r, ps, v)
	}
}

// apiKey returns the key a request carries in Authorization: Bearer or in
// X-API-Key. Both may be sent if they agree.
func apiKey(r *http.Request) (string, error) {
	var bearer string
	if auth := r.Header.Get("Authorization"); auth != "" {
		scheme, cred, _ := strings.Cut(auth, " ")
		if !strings.EqualFold(scheme, "Bearer") {
			return "", &engine.AuthError{Reason: "unsupported Authorization scheme; use Authorization: Bearer <key>"}
		}
		bearer = strings.TrimSpace(cred)
		if bearer == "" {
			return "", &engine.AuthError{Reason: "missing API key after Bearer"}
		}
	}
	header := strings.TrimSpace(r.Header.Get("X-API-Key"))
	if bearer != "" && header != "" && bearer != header {
		return "", &engine.AuthError{Reason: "Authorization and X-API-Key carry different keys"}
	}
	if bearer != "" {
		return bearer, nil
	}
	return header, nil
}

func appendJSONString(b []byte, s string) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.Encode(s) // a string always encodes
	return append(b, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))...)
}
