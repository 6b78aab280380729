package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"

	"github.com/crmd/crmd/engine/delivery"
	"github.com/crmd/crmd/objects"
	"github.com/crmd/crmd/rules"
)

// eventNames are what events call the ops.
var eventNames = map[Op]string{Create: "created", Update: "updated", Delete: "deleted"}

// emit queues the event of a write for the subscriptions it matches: the
// event and one delivery per subscription, in the write's transaction. It
// runs after the write's after-save automations.
func (t *txn) emit(obj *objects.Object, op Op, rec, old *objects.Record, env *rules.Env) error {
	subs := t.rs.SubscriptionsFor(obj.Name, eventNames[op])
	if len(subs) == 0 {
		return nil
	}
	var matched []*rules.Subscription
	for _, s := range subs {
		if s.When != nil {
			ok, err := s.When.Bool(env)
			if err != nil {
				return ruleFailed("webhook "+s.Name, err)
			}
			if !ok {
				continue
			}
		}
		matched = append(matched, s)
		if t.trace != nil {
			t.trace.Webhooks = append(t.trace.Webhooks, s.Name)
		}
	}
	if len(matched) == 0 || t.dryRun {
		return nil
	}
	seq, err := t.tx.NextEventSeq(t.ctx)
	if err != nil {
		return err
	}
	ev := &objects.Event{ID: objects.NewID(), Seq: seq, Type: obj.Name + "." + eventNames[op], Object: obj.Name, RecordID: rec.ID, OccurredAt: t.now}
	ev.Payload = eventPayload(t.biz, ev, obj, op, rec, old)
	if err := t.tx.InsertEvent(t.ctx, ev); err != nil {
		return err
	}
	for _, s := range matched {
		if err := t.deliver(s.Name, s.URL, s.Headers, ev.ID, nil); err != nil {
			return err
		}
	}
	return nil
}

// deliver queues one delivery, due now, of the event eventID or of body.
// Its webhook-id is its own: one message to one endpoint, the same on
// every attempt.
func (t *txn) deliver(endpoint, url string, headers map[string]string, eventID string, body []byte) error {
	if t.dryRun {
		return nil
	}
	id := objects.NewID()
	return t.tx.InsertDelivery(t.ctx, &objects.Delivery{ID: id, MessageID: "msg_" + id, Endpoint: endpoint, URL: url,
		Headers: headers, EventID: eventID, Payload: body, NextAttemptAt: t.now, CreatedAt: t.now})
}

// eventPayload is the JSON an event's deliveries send:
//
//	{"id", "type", "occurred_at", "business", "seq",
//	 "data": {"object", "id", "record", "previous", "changed"}}
//
// record is the record after the write (its last values, on delete);
// previous (the values before) and changed (the fields whose values
// changed) are there on update only.
func eventPayload(business string, ev *objects.Event, obj *objects.Object, op Op, rec, old *objects.Record) []byte {
	b := make([]byte, 0, 1024)
	b = append(b, `{"id":`...)
	b = appendJSON(b, ev.ID)
	b = append(b, `,"type":`...)
	b = appendJSON(b, ev.Type)
	b = append(b, `,"occurred_at":`...)
	b = appendJSON(b, ev.OccurredAt.UTC().Format(objects.TimeLayout))
	b = append(b, `,"business":`...)
	b = appendJSON(b, business)
	b = append(b, `,"seq":`...)
	b = appendJSON(b, ev.Seq)
	b = append(b, `,"data":{"object":`...)
	b = appendJSON(b, obj.Name)
	b = append(b, `,"id":`...)
	b = appendJSON(b, rec.ID)
	b = append(b, `,"record":`...)
	b = obj.AppendJSON(b, rec)
	if op == Update && old != nil {
		b = append(b, `,"previous":`...)
		b = obj.AppendJSON(b, old)
		changed := []string{}
		for _, f := range obj.Fields {
			if !objects.SameValue(rec.Fields[f.Name], old.Fields[f.Name]) {
				changed = append(changed, f.Name)
			}
		}
		b = append(b, `,"changed":`...)
		b = appendJSON(b, changed)
	}
	return append(b, "}}"...)
}

func appendJSON(b []byte, v any) []byte {
	out, err := json.Marshal(v)
	if err != nil {
		panic(err) // strings, numbers and string slices always encode
	}
	return append(b, out...)
}

// ensureWebhooks gives every endpoint and inbound webhook of rs a secret
// and token, unless it has them: they are generated once and kept across
// revisions. It returns the inbound webhooks it made, with their tokens,
// which are shown this once: the store keeps only their hashes.
func ensureWebhooks(ctx context.Context, tx objects.Tx, rs *rules.Ruleset, at time.Time) ([]NewInbound, error) {
	for _, name := range rs.Endpoints() {
		secret, err := delivery.NewSecret()
		if err != nil {
			return nil, err
		}
		if err := tx.EnsureEndpoint(ctx, name, secret, at); err != nil {
			return nil, err
		}
	}
	var made []NewInbound
	for _, in := range rs.Inbounds() {
		secret, err := delivery.NewSecret()
		if err != nil {
			return nil, err
		}
		token := NewInboundToken()
		created, err := tx.EnsureInbound(ctx, in.Name, HashInboundToken(token), inboundHint(token), secret, at)
		if err != nil {
			return nil, err
		}
		if created {
			made = append(made, NewInbound{Name: in.Name, Token: token})
		}
	}
	return made, nil
}

// A NewInbound is an inbound webhook just made, with the token of its URL
// (/api/in/<token>).
type NewInbound struct {
	Name  string
	Token string
}

// HashInboundToken is what the store keeps of an inbound webhook's token:
// its SHA-256, in hex.
func HashInboundToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// inboundHint is what stays readable of a token: in_ and four characters.
func inboundHint(token string) string { return token[:7] }

// NewInboundToken returns a new inbound webhook token: in_ and 32 random
// base62 characters (190 bits).
func NewInboundToken() string { return "in_" + randomBase62(32) }

// Endpoints lists a business's webhook endpoints, with their secrets.
func (e *Engine) Endpoints(ctx context.Context, businessID string) ([]*objects.Endpoint, error) {
	return e.store.Endpoints(ctx, businessID)
}

// Deliveries lists a business's newest deliveries, of one status or all.
func (e *Engine) Deliveries(ctx context.Context, businessID, status string, limit int) ([]*objects.Delivery, error) {
	return e.store.Deliveries(ctx, businessID, status, limit)
}

// ReplayDelivery sends a delivery again, from its first attempt.
func (e *Engine) ReplayDelivery(ctx context.Context, businessID, id string) error {
	return e.store.ReplayDelivery(ctx, businessID, id, now())
}

// EnableEndpoint enables a disabled webhook; its pending deliveries go out.
func (e *Engine) EnableEndpoint(ctx context.Context, businessID, name string) error {
	return e.store.EnableEndpoint(ctx, businessID, name)
}

// DisableEndpoint disables a webhook, for reason: its deliveries wait,
// pending, until it is enabled.
func (e *Engine) DisableEndpoint(ctx context.Context, businessID, name, reason string) error {
	return e.store.DisableEndpoint(ctx, businessID, name, reason, now())
}

// Inbounds lists a business's inbound webhooks, with their tokens' hints.
func (e *Engine) Inbounds(ctx context.Context, businessID string) ([]*objects.Inbound, error) {
	return e.store.Inbounds(ctx, businessID)
}

// RotateInbound gives an inbound webhook a new token and returns it; the
// old one stops working at once.
func (e *Engine) RotateInbound(ctx context.Context, businessID, name string) (string, error) {
	token := NewInboundToken()
	return token, e.store.RotateInbound(ctx, businessID, name, HashInboundToken(token), inboundHint(token), now())
}
