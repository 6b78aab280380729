package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/crmd/crmd/engine"
	"github.com/crmd/crmd/engine/delivery"
	"github.com/crmd/crmd/httpapi"
	"github.com/crmd/crmd/objects"
	"github.com/crmd/crmd/objects/storetest"
)

// hookWait bounds every wait for something the dispatcher does: only a
// guard against a hang, never what makes a test pass.
const hookWait = 20 * time.Second

// newEnvWith is newEnv with the handler's options given.
func newEnvWith(t *testing.T, kind string, opts httpapi.Options, eopts engine.Options) *env {
	t.Helper()
	ctx := context.Background()
	eng := engine.New(storetest.Open(t, kind), eopts)
	srv := httptest.NewServer(httpapi.New(eng, opts))
	t.Cleanup(srv.Close)
	e := &env{t: t, url: srv.URL, eng: eng, biz: map[string]string{}, keys: map[string]string{}, ids: map[string]string{}, tokens: map[string]string{}}
	for _, name := range []string{"a", "b"} {
		b, err := eng.CreateBusiness(ctx, "business "+name)
		if err != nil {
			t.Fatal(err)
		}
		e.biz[name] = b.ID
		key, _, err := eng.CreateAPIKey(ctx, b.ID, name)
		if err != nil {
			t.Fatal(err)
		}
		e.keys[name] = key
	}
	return e
}

// A hit is one request a receiver got.
type hit struct {
	path   string
	header http.Header
	body   []byte
}

// receiver is a real webhook receiver over loopback: it sends every request
// it gets to got and answers with status.
type receiver struct {
	t      *testing.T
	url    string
	got    chan hit
	hits   atomic.Int64
	status atomic.Int64
}

func newReceiver(t *testing.T) *receiver {
	t.Helper()
	r := &receiver{t: t, got: make(chan hit, 256)}
	r.status.Store(http.StatusOK)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.hits.Add(1)
		select {
		case r.got <- hit{path: req.URL.Path, header: req.Header.Clone(), body: body}:
		default: // counted in hits; the test sees more hits than it read
		}
		w.WriteHeader(int(r.status.Load()))
	}))
	t.Cleanup(srv.Close)
	r.url = srv.URL
	return r
}

// next waits for the receiver's next request.
func (r *receiver) next() hit {
	r.t.Helper()
	select {
	case h := <-r.got:
		return h
	case <-time.After(hookWait):
		r.t.Fatalf("the receiver got no request in %s", hookWait)
		return hit{}
	}
}

// loopback is the policy that lets deliveries reach the test's receivers.
func loopback(t *testing.T) *delivery.Policy {
	t.Helper()
	allow, err := delivery.ParseAllow("127.0.0.0/8, ::1/128")
	if err != nil {
		t.Fatal(err)
	}
	return &delivery.Policy{Allow: allow}
}

// dispatch runs the engine's dispatcher with policy p until the test ends.
// Call it after newReceiver, so that it stops before the receiver closes.
func (e *env) dispatch(p *delivery.Policy) {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- e.eng.RunDispatcher(ctx, engine.DispatcherOptions{Client: delivery.NewClient(p, delivery.ClientOptions{})})
	}()
	e.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			e.t.Errorf("the dispatcher: %v", err)
		}
	})
}

func (e *env) deliveries(biz, status string) []*objects.Delivery {
	e.t.Helper()
	ds, err := e.eng.Deliveries(context.Background(), e.biz[biz], status, 100)
	if err != nil {
		e.t.Fatal(err)
	}
	return ds
}

// waitDeliveries polls the store until cond holds of biz's deliveries.
func (e *env) waitDeliveries(biz, what string, cond func([]*objects.Delivery) bool) []*objects.Delivery {
	e.t.Helper()
	deadline := time.Now().Add(hookWait)
	for {
		ds := e.deliveries(biz, "")
		if cond(ds) {
			return ds
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("waiting %s for %s; deliveries: %s", hookWait, what, describeDeliveries(ds))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func describeDeliveries(ds []*objects.Delivery) string {
	var b strings.Builder
	for _, d := range ds {
		b.WriteString("\n  " + d.Endpoint + " " + d.Status + " attempts=" + jsonString(d.Attempts) + " last=" + jsonString(d.LastStatus) + " " + d.LastError)
	}
	return b.String()
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func (e *env) endpoint(biz, name string) *objects.Endpoint {
	e.t.Helper()
	eps, err := e.eng.Endpoints(context.Background(), e.biz[biz])
	if err != nil {
		e.t.Fatal(err)
	}
	for _, ep := range eps {
		if ep.Name == name {
			return ep
		}
	}
	e.t.Fatalf("no endpoint %s among %d", name, len(eps))
	return nil
}

// inboundToken is the token of an inbound webhook the env's packs made.
func (e *env) inboundToken(biz, name string) string {
	e.t.Helper()
	token, ok := e.tokens[biz+"/"+name]
	if !ok {
		e.t.Fatalf("no token of inbound webhook %s/%s", biz, name)
	}
	return token
}

func (e *env) inbound(biz, name string) *objects.Inbound {
	e.t.Helper()
	ins, err := e.eng.Inbounds(context.Background(), e.biz[biz])
	if err != nil {
		e.t.Fatal(err)
	}
	for _, in := range ins {
		if in.Name == name {
			return in
		}
	}
	e.t.Fatalf("no inbound webhook %s among %d", name, len(ins))
	return nil
}

// records lists every record of an object.
func (e *env) records(biz, object string) []map[string]any {
	e.t.Helper()
	r := e.do("GET", "/api/v1/"+object+"?limit=500", biz, "", nil)
	if r.status != http.StatusOK {
		e.t.Fatalf("listing %s: %d %s", object, r.status, r.raw)
	}
	var out []map[string]any
	for _, rec := range r.body["records"].([]any) {
		out = append(out, rec.(map[string]any))
	}
	return out
}

// event is the JSON body of a delivery.
type event struct {
	ID         string `json:"id"`
	Type       string `json:"type"`
	OccurredAt string `json:"occurred_at"`
	Business   string `json:"business"`
	Seq        int64  `json:"seq"`
	Data       struct {
		Object   string         `json:"object"`
		ID       string         `json:"id"`
		Record   map[string]any `json:"record"`
		Previous map[string]any `json:"previous"`
		Changed  []string       `json:"changed"`
	} `json:"data"`
}

func decodeEvent(t *testing.T, h hit) event {
	t.Helper()
	var ev event
	dec := json.NewDecoder(bytes.NewReader(h.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ev); err != nil {
		t.Fatalf("the delivery's body is not an event: %v\n%s", err, h.body)
	}
	return ev
}

const wonPack = `
pack: hooks
webhooks:
  - name: won-deals
    url: {receiver}/hooks/won
    events: [deals.updated]
    when: changed("stage") && record.stage == "won"
    headers: {X-Team: sales, Authorization: Bearer receiver-token}
`

func TestWebhookOutgoing(t *testing.T) {
	storetest.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := newEnv(t, kind)
		rcv := newReceiver(t)
		e.applyPack("a", strings.ReplaceAll(wonPack, "{receiver}", rcv.url))
		e.dispatch(loopback(t))

		e.create("deal", "a", "deals", `{"name":"Boiler","amount":4200}`)
		e.create("other", "a", "deals", `{"name":"Heat pump","amount":9000}`)
		// Updates that do not match when send nothing: no stage change, a
		// stage change to another stage, a create (not subscribed).
		for _, body := range []string{`{"amount":4300}`, `{"stage":"proposal"}`} {
			if r := e.do("PATCH", "/api/v1/deals/{deal}", "a", body, nil); r.status != http.StatusOK {
				t.Fatalf("PATCH %s: %d %s", body, r.status, r.raw)
			}
		}
		if ds := e.deliveries("a", ""); len(ds) != 0 {
			t.Fatalf("updates that do not match when queued deliveries:%s", describeDeliveries(ds))
		}
		// A dry run that would match queues nothing, but names the webhook.
		r := e.do("PATCH", "/api/v1/deals/{deal}?dry_run=true", "a", `{"stage":"won"}`, nil)
		if r.status != http.StatusOK || jsonOf(t, r.body["webhooks"]) != `["won-deals"]` {
			t.Fatalf("dry-run win: %d %s", r.status, r.raw)
		}
		if ds := e.deliveries("a", ""); len(ds) != 0 {
			t.Fatalf("a dry run queued deliveries:%s", describeDeliveries(ds))
		}

		if r := e.do("PATCH", "/api/v1/deals/{deal}", "a", `{"stage":"won"}`, nil); r.status != http.StatusOK {
			t.Fatalf("winning the deal: %d %s", r.status, r.raw)
		}
		h := rcv.next()
		if h.path != "/hooks/won" {
			t.Errorf("delivered to %s", h.path)
		}
		ev := decodeEvent(t, h)
		if ev.Type != "deals.updated" || ev.Seq < 1 || ev.Business != e.biz["a"] || ev.ID == "" || ev.OccurredAt == "" {
			t.Errorf("event = %s", h.body)
		}
		if ev.Data.Object != "deals" || ev.Data.ID != e.ids["deal"] || ev.Data.Record["id"] != e.ids["deal"] {
			t.Errorf("event data names %s %s: %s", ev.Data.Object, ev.Data.ID, h.body)
		}
		if ev.Data.Record["stage"] != "won" || ev.Data.Record["amount"] != 4300.0 || ev.Data.Record["name"] != "Boiler" {
			t.Errorf("data.record = %v", ev.Data.Record)
		}
		if ev.Data.Previous["stage"] != "proposal" {
			t.Errorf("data.previous = %v", ev.Data.Previous)
		}
		if !slices.Contains(ev.Data.Changed, "stage") || slices.Contains(ev.Data.Changed, "amount") || slices.Contains(ev.Data.Changed, "name") {
			t.Errorf("data.changed = %v", ev.Data.Changed)
		}
		// Signed with the endpoint's secret, with the headers crmd sets and
		// the pack's.
		ep := e.endpoint("a", "won-deals")
		if !strings.HasPrefix(ep.Secret, "whsec_") || ep.Disabled {
			t.Errorf("endpoint = %+v", ep)
		}
		if err := delivery.Verify(ep.Secret, h.header, h.body, time.Now()); err != nil {
			t.Errorf("the signature does not verify: %v\nheaders: %v", err, h.header)
		}
		other, _ := delivery.NewSecret()
		if err := delivery.Verify(other, h.header, h.body, time.Now()); err == nil {
			t.Error("the signature verifies with another secret")
		}
		if h.header.Get("X-Team") != "sales" || h.header.Get("Authorization") != "Bearer receiver-token" {
			t.Errorf("the pack's headers did not arrive: %v", h.header)
		}
		if h.header.Get("Content-Type") != "application/json" || h.header.Get("User-Agent") != "crmd-webhooks/1" {
			t.Errorf("headers: %v", h.header)
		}
		ds := e.waitDeliveries("a", "the delivery to succeed", func(ds []*objects.Delivery) bool {
			return len(ds) == 1 && ds[0].Status == objects.DeliverySucceeded
		})
		if d := ds[0]; d.Endpoint != "won-deals" || d.Attempts != 1 || d.LastStatus != 200 || d.MessageID != h.header.Get("webhook-id") || !bytes.Equal(d.Payload, h.body) {
			t.Errorf("delivery = %+v", d)
		}

		// Changing a won deal without changing its stage sends nothing; the
		// next event the receiver gets is the other deal's win.
		for _, body := range []string{`{"amount":5000}`, `{"stage":"won","description":"still won"}`} {
			if r := e.do("PATCH", "/api/v1/deals/{deal}", "a", body, nil); r.status != http.StatusOK {
				t.Fatalf("PATCH %s: %d %s", body, r.status, r.raw)
			}
		}
		if r := e.do("PATCH", "/api/v1/deals/{other}", "a", `{"stage":"won"}`, nil); r.status != http.StatusOK {
			t.Fatalf("winning the other deal: %d %s", r.status, r.raw)
		}
		h2 := rcv.next()
		ev2 := decodeEvent(t, h2)
		if ev2.Data.ID != e.ids["other"] || ev2.Seq <= ev.Seq || ev2.Data.Previous["stage"] != nil {
			t.Errorf("the next event is not the other deal's win after %d: %s", ev.Seq, h2.body)
		}
		if h2.header.Get("webhook-id") == h.header.Get("webhook-id") {
			t.Error("two deliveries share a webhook-id")
		}
		e.waitDeliveries("a", "both deliveries to succeed", func(ds []*objects.Delivery) bool {
			return len(ds) == 2 && ds[0].Status == objects.DeliverySucceeded && ds[1].Status == objects.DeliverySucceeded
		})
		if n := rcv.hits.Load(); n != 2 {
			t.Errorf("the receiver got %d requests, want 2", n)
		}
		// Business b has no such webhook.
		e.create("", "b", "deals", `{"name":"B deal"}`)
		if ds := e.deliveries("b", ""); len(ds) != 0 {
			t.Errorf("business b queued deliveries:%s", describeDeliveries(ds))
		}
	})
}

const refusedPack = `
pack: hooks
validations:
  - name: won deals have an amount
    object: deals
    when: record.stage == "won" && record.amount <= 0
    error: a won deal needs an amount
    field: amount
webhooks:
  - name: all-deals
    url: http://192.0.2.1/hook
    events: [deals.*]
`

func TestWebhookNotQueuedForRefusedWrite(t *testing.T) {
	storetest.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := newEnv(t, kind)
		e.applyPack("a", refusedPack)
		// No dispatcher runs: what is queued stays pending, to be counted.
		r := e.do("POST", "/api/v1/deals", "a", `{"name":"Free","stage":"won","amount":0}`, nil)
		if r.status != http.StatusUnprocessableEntity || r.body["field"] != "amount" {
			t.Fatalf("refused create: %d %s", r.status, r.raw)
		}
		if ds := e.deliveries("a", ""); len(ds) != 0 {
			t.Fatalf("a refused create queued deliveries:%s", describeDeliveries(ds))
		}
		e.create("deal", "a", "deals", `{"name":"Zero","amount":0}`)
		if ds := e.deliveries("a", objects.DeliveryPending); len(ds) != 1 || ds[0].Endpoint != "all-deals" || !strings.Contains(string(ds[0].Payload), `"type":"deals.created"`) {
			t.Fatalf("after one create:%s", describeDeliveries(ds))
		}
		r = e.do("PATCH", "/api/v1/deals/{deal}", "a", `{"stage":"won"}`, nil)
		if r.status != http.StatusUnprocessableEntity || r.body["field"] != "amount" {
			t.Fatalf("refused update: %d %s", r.status, r.raw)
		}
		if ds := e.deliveries("a", ""); len(ds) != 1 {
			t.Fatalf("a refused update queued deliveries:%s", describeDeliveries(ds))
		}
	})
}

const goneHookPack = `
pack: hooks
webhooks:
  - name: gone
    url: {receiver}/gone
    events: [deals.created]
`

func TestWebhookGoneDisablesEndpoint(t *testing.T) {
	storetest.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := newEnv(t, kind)
		rcv := newReceiver(t)
		rcv.status.Store(http.StatusGone)
		e.applyPack("a", strings.ReplaceAll(goneHookPack, "{receiver}", rcv.url))
		e.dispatch(loopback(t))

		e.create("first", "a", "deals", `{"name":"First"}`)
		if h := rcv.next(); decodeEvent(t, h).Data.ID != e.ids["first"] {
			t.Errorf("delivered %s", h.body)
		}
		ds := e.waitDeliveries("a", "the delivery to fail", func(ds []*objects.Delivery) bool {
			return len(ds) == 1 && ds[0].Status == objects.DeliveryFailed
		})
		if d := ds[0]; d.Attempts != 1 || d.LastStatus != http.StatusGone || d.LastError == "" {
			t.Errorf("failed delivery = %+v", d)
		}
		if n := rcv.hits.Load(); n != 1 {
			t.Errorf("a 410 was retried: %d requests", n)
		}
		ep := e.endpoint("a", "gone")
		if !ep.Disabled || !strings.Contains(ep.DisabledReason, "410") || ep.DisabledAt.IsZero() {
			t.Fatalf("after a 410 the endpoint = %+v", ep)
		}

		if err := e.eng.EnableEndpoint(context.Background(), e.biz["a"], "gone"); err != nil {
			t.Fatal(err)
		}
		if ep := e.endpoint("a", "gone"); ep.Disabled {
			t.Fatalf("enabled endpoint = %+v", ep)
		}
		// Enabled, it delivers again.
		rcv.status.Store(http.StatusNoContent)
		e.create("second", "a", "deals", `{"name":"Second"}`)
		if h := rcv.next(); decodeEvent(t, h).Data.ID != e.ids["second"] {
			t.Errorf("delivered %s", h.body)
		}
		e.waitDeliveries("a", "the second delivery to succeed", func(ds []*objects.Delivery) bool {
			return len(ds) == 2 && slices.ContainsFunc(ds, func(d *objects.Delivery) bool { return d.Status == objects.DeliverySucceeded })
		})
		if ep := e.endpoint("a", "gone"); ep.Disabled || !ep.FailingSince.IsZero() {
			t.Errorf("after a success the endpoint = %+v", ep)
		}
	})
}

// logSink is a slog handler that hands the engine's log records to the
// test, so that it can wait for what the dispatcher did.
type logSink struct{ ch chan slog.Record }

func newLogSink() *logSink { return &logSink{ch: make(chan slog.Record, 256)} }

func (h *logSink) Enabled(context.Context, slog.Level) bool { return true }
func (h *logSink) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *logSink) WithGroup(string) slog.Handler            { return h }
func (h *logSink) Handle(_ context.Context, r slog.Record) error {
	select {
	case h.ch <- r.Clone():
	default:
	}
	return nil
}

// waitFor waits for a record with message msg and returns its attributes.
func (h *logSink) waitFor(t *testing.T, msg string) map[string]string {
	t.Helper()
	timeout := time.After(hookWait)
	for {
		select {
		case r := <-h.ch:
			if r.Message != msg {
				continue
			}
			attrs := map[string]string{}
			r.Attrs(func(a slog.Attr) bool {
				attrs[a.Key] = a.Value.String()
				return true
			})
			return attrs
		case <-timeout:
			t.Fatalf("no log record %q in %s", msg, hookWait)
			return nil
		}
	}
}

func TestWebhookSSRFRefusesLoopback(t *testing.T) {
	storetest.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		logs := newLogSink()
		e := newEnvWith(t, kind, httpapi.Options{}, engine.Options{Logger: slog.New(logs)})
		rcv := newReceiver(t)
		e.applyPack("a", strings.ReplaceAll(goneHookPack, "{receiver}", rcv.url))
		e.dispatch(&delivery.Policy{})

		e.create("deal", "a", "deals", `{"name":"Internal"}`)
		// The dispatcher logs the failed attempt before recording it. The
		// policy refuses before connecting: by then nothing was sent and
		// nothing can be in flight.
		attrs := logs.waitFor(t, "webhook delivery failed")
		if !strings.Contains(attrs["err"], "refused: loopback address 127.0.0.1") || attrs["webhook"] != "gone" || attrs["status"] != "0" || attrs["retrying"] != "true" {
			t.Errorf("the failed attempt: %v", attrs)
		}
		if n := rcv.hits.Load(); n != 0 {
			t.Errorf("the receiver on loopback got %d requests", n)
		}
		t.Run("the refusal is recorded", func(t *testing.T) {
			ds := e.waitDeliveries("a", "an attempt to be recorded", func(ds []*objects.Delivery) bool {
				return len(ds) == 1 && ds[0].Attempts > 0
			})
			if d := ds[0]; !strings.Contains(d.LastError, "refused") || d.LastStatus != 0 || d.Status != objects.DeliveryPending {
				t.Errorf("delivery to loopback = %+v", d)
			}
			if n := rcv.hits.Load(); n != 0 {
				t.Errorf("the receiver on loopback got %d requests", n)
			}
		})
	})
}

const actionPack = `
pack: hooks
validations:
  - name: no negative amounts
    object: deals
    when: record.amount < 0
    error: an amount is not negative
    field: amount
automations:
  - name: announce new deals
    object: deals
    on: create
    actions:
      - webhook:
          name: chat
          url: {receiver}/chat
          headers: {X-Team: ops}
          payload:
            text: = "Deal " + record.name
            amount: = record.amount
            id: = record.id
`

func TestWebhookAction(t *testing.T) {
	storetest.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := newEnv(t, kind)
		rcv := newReceiver(t)
		e.applyPack("a", strings.ReplaceAll(actionPack, "{receiver}", rcv.url))
		e.dispatch(loopback(t))

		// A refused write runs no after-save action.
		if r := e.do("POST", "/api/v1/deals", "a", `{"name":"Minus","amount":-1}`, nil); r.status != http.StatusUnprocessableEntity {
			t.Fatalf("refused create: %d %s", r.status, r.raw)
		}
		if ds := e.deliveries("a", ""); len(ds) != 0 {
			t.Fatalf("a refused write queued deliveries:%s", describeDeliveries(ds))
		}
		e.create("deal", "a", "deals", `{"name":"Boiler","amount":4200}`)
		h := rcv.next()
		var body map[string]any
		if err := json.Unmarshal(h.body, &body); err != nil {
			t.Fatalf("body: %v %s", err, h.body)
		}
		if h.path != "/chat" || len(body) != 3 || body["text"] != "Deal Boiler" || body["amount"] != 4200.0 || body["id"] != e.ids["deal"] {
			t.Errorf("the action sent %s to %s", h.body, h.path)
		}
		if err := delivery.Verify(e.endpoint("a", "chat").Secret, h.header, h.body, time.Now()); err != nil {
			t.Errorf("the signature does not verify: %v", err)
		}
		if h.header.Get("X-Team") != "ops" {
			t.Errorf("headers: %v", h.header)
		}
		e.waitDeliveries("a", "the delivery to succeed", func(ds []*objects.Delivery) bool {
			return len(ds) == 1 && ds[0].Status == objects.DeliverySucceeded && ds[0].Endpoint == "chat"
		})
	})
}

const inboundPack = `
pack: inbound
objects:
  leads:
    fields:
      email: {unique: true}
validations:
  - name: refuse me
    object: leads
    when: record.last_name == "refuse-me"
    error: this last name is refused
    field: last_name
automations:
  - name: call new leads
    object: leads
    on: create
    actions:
      - create:
          object: tasks
          fields: {name: = "Call " + record.name, lead_id: = record.id}
inbound:
  - name: web-form
    object: leads
    match_on: email
    when: 'payload.email != nil'
    mapping:
      first_name: = payload.first_name
      last_name: = payload.last_name
      email: = payload.email
      source: web
  - name: signed-form
    object: leads
    match_on: email
    verify: standard-webhooks
    mapping:
      first_name: = payload.first_name
      email: = payload.email
      source: partner
`

// inboundMaxBody is the body limit of the inbound tests' server.
const inboundMaxBody = 1024

func TestInboundWebhook(t *testing.T) {
	storetest.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := newEnvWith(t, kind, httpapi.Options{MaxBody: inboundMaxBody}, engine.Options{})
		e.applyPack("a", inboundPack)
		token := e.inboundToken("a", "web-form")
		if !strings.HasPrefix(token, "in_") || len(token) != 35 {
			t.Fatalf("token %q", token)
		}
		// The store keeps the token's hash and first characters, not the token.
		if in := e.inbound("a", "web-form"); in.TokenHash != engine.HashInboundToken(token) || in.TokenHint != token[:7] ||
			strings.Contains(in.TokenHash, token[3:]) {
			t.Fatalf("stored %+v for token %q", in, token)
		}
		// Applying the pack again makes no new token: the URL in use stays.
		if res := e.applyPack("a", inboundPack+"\n# again\n"); len(res.NewInbound) != 0 {
			t.Fatalf("a new revision made inbound tokens again: %+v", res.NewInbound)
		}
		e.ids["token"] = token
		e.run([]scenario{
			{name: "new lead", method: "POST", path: "/api/in/{token}", key: "-", body: `{"first_name":"Ada","last_name":"Lovelace","email":"ada@analytical.io","extra":{"n":1}}`,
				status: 201, want: map[string]any{"object": "leads"}},
		})
		r := e.do("POST", "/api/in/{token}", "", `{"first_name":"Ada","last_name":"Lovelace","email":"ada@analytical.io"}`, nil)
		if r.status != http.StatusOK {
			t.Fatalf("the same email again: %d %s", r.status, r.raw)
		}
		id, _ := r.body["id"].(string)
		if id == "" || len(r.body) != 2 || r.body["object"] != "leads" {
			t.Fatalf("the answer: %s", r.raw)
		}
		e.ids["ada"] = id
		if n := e.count("a", "leads"); n != 1 {
			t.Fatalf("%v leads after posting one email twice", n)
		}
		e.run([]scenario{
			{name: "match_on updates", method: "POST", path: "/api/in/{token}", key: "-", body: `{"first_name":"Augusta","last_name":"King","email":"ada@analytical.io"}`,
				status: 200, want: map[string]any{"object": "leads", "id": "{ada}"}},
			{name: "the lead was updated", method: "GET", path: "/api/v1/leads/{ada}", status: 200,
				want: map[string]any{"first_name": "Augusta", "last_name": "King", "email": "ada@analytical.io", "source": "web"}},
			{name: "no email is declined", method: "POST", path: "/api/in/{token}", key: "-", body: `{"first_name":"Nobody"}`,
				status: 202, want: map[string]any{"declined": true, "inbound": "web-form"}},
			{name: "a validation refuses", method: "POST", path: "/api/in/{token}", key: "-", body: `{"first_name":"R","last_name":"refuse-me","email":"r@example.io"}`,
				status: 422, want: map[string]any{"field": "last_name", "code": "validation_failed", "error": "this last name is refused"}},
			{name: "malformed JSON", method: "POST", path: "/api/in/{token}", key: "-", body: `{"email":`, status: 400},
			{name: "not an object", method: "POST", path: "/api/in/{token}", key: "-", body: `["a"]`, status: 400},
			{name: "unknown token", method: "POST", path: "/api/in/in_" + strings.Repeat("x", 32), key: "-", body: `{"email":"u@example.io"}`, status: 404},
			{name: "not a token", method: "POST", path: "/api/in/nope", key: "-", body: `{"email":"u@example.io"}`, status: 404},
			{name: "only POST", method: "GET", path: "/api/in/{token}", key: "-", status: 405},
			{name: "too large", method: "POST", path: "/api/in/{token}", key: "-",
				body: `{"email":"big@example.io","first_name":"` + strings.Repeat("x", inboundMaxBody) + `"}`, status: 413},
			{name: "an API key is no use", method: "POST", path: "/api/in/in_" + strings.Repeat("y", 32), body: `{"email":"u@example.io"}`, status: 404},
		})
		if n := e.count("a", "leads"); n != 1 {
			t.Errorf("%v leads after the refused, declined and malformed requests, want 1", n)
		}
		// The token leaks nowhere in an answer.
		if r := e.do("POST", "/api/in/in_"+strings.Repeat("z", 32), "", `{}`, nil); strings.Contains(string(r.raw), "zzzz") {
			t.Errorf("a 404 shows the token: %s", r.raw)
		}

		// The automation ran for the inbound-created lead, once.
		var tasks int
		for _, task := range e.records("a", "tasks") {
			if task["lead_id"] == e.ids["ada"] {
				tasks++
				if task["name"] != "Call Ada Lovelace" {
					t.Errorf("task = %v", task)
				}
			}
		}
		if tasks != 1 {
			t.Errorf("%d tasks for the inbound lead, want 1", tasks)
		}

		// Idempotency: a repeat with the same webhook-id gets the same answer
		// and writes nothing, even with another body.
		key := map[string]string{"webhook-id": "msg_form_1"}
		first := e.do("POST", "/api/in/{token}", "", `{"first_name":"Grace","email":"grace@navy.io"}`, key)
		if first.status != http.StatusCreated {
			t.Fatalf("new lead with a webhook-id: %d %s", first.status, first.raw)
		}
		if first.header.Get("Idempotent-Replayed") != "" {
			t.Error("a first request is marked replayed")
		}
		leads, taskCount := e.count("a", "leads"), e.count("a", "tasks")
		for _, body := range []string{`{"first_name":"Grace","email":"grace@navy.io"}`, `{"first_name":"Other","email":"other@navy.io"}`} {
			again := e.do("POST", "/api/in/{token}", "", body, key)
			if again.status != first.status || !bytes.Equal(again.raw, first.raw) || again.header.Get("Idempotent-Replayed") != "true" {
				t.Errorf("repeat: %d %s (replayed %q), want %d %s", again.status, again.raw, again.header.Get("Idempotent-Replayed"), first.status, first.raw)
			}
		}
		idem := map[string]string{"Idempotency-Key": "msg_form_1"}
		if again := e.do("POST", "/api/in/{token}", "", `{"first_name":"Third","email":"third@navy.io"}`, idem); !bytes.Equal(again.raw, first.raw) {
			t.Errorf("Idempotency-Key repeat: %d %s", again.status, again.raw)
		}
		if e.count("a", "leads") != leads || e.count("a", "tasks") != taskCount {
			t.Error("a repeated request wrote")
		}
		if g := e.do("GET", "/api/v1/leads/"+first.body["id"].(string), "a", "", nil); g.body["first_name"] != "Grace" {
			t.Errorf("a repeated request changed the lead: %s", g.raw)
		}
		// A declined request's answer is kept too.
		decl := map[string]string{"webhook-id": "msg_form_2"}
		if r := e.do("POST", "/api/in/{token}", "", `{"first_name":"No email"}`, decl); r.status != http.StatusAccepted {
			t.Fatalf("declined: %d %s", r.status, r.raw)
		}
		if r := e.do("POST", "/api/in/{token}", "", `{"email":"late@navy.io"}`, decl); r.status != http.StatusAccepted || r.header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("repeat of a declined request: %d %s", r.status, r.raw)
		}
		if r := e.do("POST", "/api/in/{token}", "", `{}`, map[string]string{"webhook-id": strings.Repeat("k", 256)}); r.status != http.StatusBadRequest {
			t.Errorf("a 256-character key: %d %s", r.status, r.raw)
		}
		if e.count("a", "leads") != leads {
			t.Error("declined requests wrote")
		}

		// Rotation: the old token stops at once, the new one works.
		newToken, err := e.eng.RotateInbound(context.Background(), e.biz["a"], "web-form")
		if err != nil {
			t.Fatal(err)
		}
		if newToken == token || e.inbound("a", "web-form").TokenHash != engine.HashInboundToken(newToken) {
			t.Fatalf("rotated token %q, old %q", newToken, token)
		}
		e.ids["new"] = newToken
		e.run([]scenario{
			{name: "old token after rotation", method: "POST", path: "/api/in/{token}", key: "-", body: `{"email":"rot@example.io"}`, status: 404},
			{name: "new token after rotation", method: "POST", path: "/api/in/{new}", key: "-", body: `{"email":"rot@example.io"}`, status: 201},
		})
		// Business b has no inbound webhooks; a's are not its.
		if ins, err := e.eng.Inbounds(context.Background(), e.biz["b"]); err != nil || len(ins) != 0 {
			t.Errorf("business b's inbound webhooks: %v %v", ins, err)
		}
		if n := e.count("b", "leads"); n != 0 {
			t.Errorf("business b has %v leads", n)
		}
	})
}

func TestInboundRateLimit(t *testing.T) {
	storetest.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := newEnvWith(t, kind, httpapi.Options{InboundRate: 1}, engine.Options{})
		e.applyPack("a", inboundPack)
		e.ids["token"] = e.inboundToken("a", "web-form")
		// The bucket starts with a burst of 2 (twice the rate): the first
		// two requests always pass. It refills at 1 a second, so requests
		// are refused soon after; keep sending until one is, so that a slow
		// machine cannot make this flaky.
		deadline := time.Now().Add(hookWait)
		var passed int
		for {
			r := e.do("POST", "/api/in/{token}", "", `{"first_name":"no email"}`, nil)
			if r.status == http.StatusTooManyRequests {
				checkEnvelope(t, r)
				if r.body["code"] != "rate_limited" {
					t.Errorf("429 body: %s", r.raw)
				}
				// Less than a token is left, refilling at 1 a second.
				if ra := r.header.Get("Retry-After"); ra != "1" {
					t.Errorf("Retry-After = %q, want 1", ra)
				}
				break
			}
			if r.status != http.StatusAccepted {
				t.Fatalf("request %d: %d %s", passed+1, r.status, r.raw)
			}
			passed++
			if time.Now().After(deadline) {
				t.Fatalf("no 429 after %d requests", passed)
			}
		}
		if passed < 2 {
			t.Errorf("refused after %d requests; the burst is 2", passed)
		}
		// The limit is per token.
		if r := e.do("POST", "/api/in/in_"+strings.Repeat("x", 32), "", `{}`, nil); r.status != http.StatusNotFound {
			t.Errorf("another token: %d %s", r.status, r.raw)
		}
		// The API is not limited by it.
		if r := e.do("GET", "/api/v1/leads", "a", "", nil); r.status != http.StatusOK {
			t.Errorf("the API: %d %s", r.status, r.raw)
		}
	})
}

func TestInboundSignedWebhook(t *testing.T) {
	storetest.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := newEnvWith(t, kind, httpapi.Options{MaxBody: inboundMaxBody}, engine.Options{})
		e.applyPack("a", inboundPack)
		in := e.inbound("a", "signed-form")
		if !strings.HasPrefix(in.Secret, "whsec_") {
			t.Fatalf("inbound secret %q", in.Secret)
		}
		e.ids["token"] = e.inboundToken("a", "signed-form")
		body := `{"first_name":"Signed","email":"signed@partner.io"}`
		signed := func(secret, msgID string, ts time.Time, body string) map[string]string {
			h := http.Header{}
			if err := delivery.SetHeaders(h, secret, msgID, ts, []byte(body)); err != nil {
				t.Fatal(err)
			}
			return map[string]string{"webhook-id": h.Get("webhook-id"), "webhook-timestamp": h.Get("webhook-timestamp"), "webhook-signature": h.Get("webhook-signature")}
		}
		other, _ := delivery.NewSecret()
		for _, c := range []struct {
			name string
			hdr  map[string]string
			body string
		}{
			{"unsigned", nil, body},
			{"another secret", signed(other, "msg_a", time.Now(), body), body},
			{"another body", signed(in.Secret, "msg_b", time.Now(), body), `{"first_name":"Forged","email":"signed@partner.io"}`},
			{"too old", signed(in.Secret, "msg_c", time.Now().Add(-time.Hour), body), body},
			{"another inbound's secret", signed(e.inbound("a", "web-form").Secret, "msg_d", time.Now(), body), body},
		} {
			r := e.do("POST", "/api/in/{token}", "", c.body, c.hdr)
			if r.status != http.StatusUnauthorized {
				t.Errorf("%s: %d %s", c.name, r.status, r.raw)
				continue
			}
			checkEnvelope(t, r)
		}
		if n := e.count("a", "leads"); n != 0 {
			t.Fatalf("%v leads after unsigned requests", n)
		}
		hdr := signed(in.Secret, "msg_ok", time.Now(), body)
		r := e.do("POST", "/api/in/{token}", "", body, hdr)
		if r.status != http.StatusCreated || r.body["object"] != "leads" {
			t.Fatalf("signed: %d %s", r.status, r.raw)
		}
		// The signed request's webhook-id is its idempotency key, but an
		// unsigned request with it gets no stored answer.
		if u := e.do("POST", "/api/in/{token}", "", body, map[string]string{"webhook-id": "msg_ok"}); u.status != http.StatusUnauthorized {
			t.Errorf("unsigned with a used webhook-id: %d %s", u.status, u.raw)
		}
		if again := e.do("POST", "/api/in/{token}", "", body, signed(in.Secret, "msg_ok", time.Now(), body)); again.status != http.StatusCreated || !bytes.Equal(again.raw, r.raw) {
			t.Errorf("signed repeat: %d %s", again.status, again.raw)
		}
		if n := e.count("a", "leads"); n != 1 {
			t.Errorf("%v leads, want 1", n)
		}
	})
}
