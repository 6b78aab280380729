package engine

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/crmd/crmd/engine/delivery"
	"github.com/crmd/crmd/objects"
	"github.com/crmd/crmd/rules"
)

// InboundIdempotency is how long an inbound webhook remembers the answer to
// a request with an idempotency key.
const InboundIdempotency = 24 * time.Hour

// An InboundRequest is a request posted to an inbound webhook's URL.
type InboundRequest struct {
	Target  *InboundTarget // from FindInbound
	Raw     []byte         // the body as sent, for signatures
	Payload map[string]any // the body, decoded
	Headers http.Header
	Query   map[string][]string
	// Key is the request's idempotency key (webhook-id or Idempotency-Key),
	// or "".
	Key string
}

// An InboundAnswer is what an inbound webhook answers.
type InboundAnswer struct {
	Status int
	Body   []byte
	// Replayed is set when the answer is the stored answer to an earlier
	// request with the same idempotency key.
	Replayed bool
}

// An InboundTarget is what a token leads to.
type InboundTarget struct {
	BusinessID string
	Name       string
	stored     *objects.Inbound
}

// ErrSignature means an inbound webhook that verifies signatures got a
// request without a valid one.
type SignatureError struct{ Reason string }

func (e *SignatureError) Error() string { return e.Reason }

// FindInbound returns the business and name of the inbound webhook of a
// token; objects.ErrNotFound when no inbound webhook has it.
func (e *Engine) FindInbound(ctx context.Context, token string) (*InboundTarget, error) {
	if !strings.HasPrefix(token, "in_") || len(token) != 35 {
		return nil, objects.ErrNotFound
	}
	in, err := e.store.InboundByTokenHash(ctx, HashInboundToken(token))
	if err != nil {
		return nil, err
	}
	return &InboundTarget{BusinessID: in.BusinessID, Name: in.Name, stored: in}, nil
}

// Inbound takes a request to an inbound webhook: it checks its signature
// when the webhook says so, decides with when whether to take it, maps it
// into a record and writes it through the engine, as an update of the
// record whose match_on field has the same value, or as a new record. A
// request with an idempotency key that was answered in the last 24 hours
// gets the same answer and writes nothing.
func (e *Engine) Inbound(ctx context.Context, req InboundRequest) (*InboundAnswer, error) {
	stored := req.Target.stored
	v, err := e.View(ctx, stored.BusinessID)
	if err != nil {
		return nil, err
	}
	in, ok := v.snap.Rules.Inbound(stored.Name)
	if !ok {
		return nil, objects.ErrNotFound // its pack no longer declares it
	}
	switch in.Verify {
	case rules.VerifyStandard:
		if err := delivery.Verify(stored.Secret, req.Headers, req.Raw, now()); err != nil {
			return nil, &SignatureError{Reason: "the request's Standard Webhooks signature does not verify: " + err.Error()}
		}
	case rules.VerifyHMAC:
		if err := delivery.VerifyHMAC(stored.Secret, req.Headers.Get(in.HMACHeader), req.Raw); err != nil {
			return nil, &SignatureError{Reason: "the request's " + in.HMACHeader + " signature does not verify: " + err.Error()}
		}
	}
	env := rules.NewInboundEnv(req.Payload, lowerHeaders(req.Headers), firstValues(req.Query))
	obj, err := v.Object(in.Object)
	if err != nil {
		return nil, err
	}
	var answer *InboundAnswer
	err = e.store.Write(ctx, stored.BusinessID, func(tx objects.Tx) error {
		answer = nil
		at := now()
		if req.Key != "" {
			prev, err := tx.ReserveInboundKey(ctx, in.Name, req.Key, at.Add(-InboundIdempotency), at)
			if err != nil {
				return err
			}
			if prev != nil {
				answer = &InboundAnswer{Status: prev.Status, Body: prev.Body, Replayed: true}
				return nil
			}
		}
		a, err := v.inboundWrite(ctx, tx, in, obj, env)
		if err != nil {
			return err
		}
		answer = a
		if req.Key != "" {
			return tx.SaveInboundAnswer(ctx, in.Name, req.Key, &objects.InboundAnswer{Status: a.Status, Body: a.Body, At: at})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return answer, nil
}

// inboundWrite decides, maps and writes, in the request's transaction.
func (v *View) inboundWrite(ctx context.Context, tx objects.Tx, in *rules.Inbound, obj *objects.Object, env *rules.Env) (*InboundAnswer, error) {
	if in.When != nil {
		take, err := in.When.Bool(env)
		if err != nil {
			return nil, ruleFailed("inbound webhook "+in.Name, err)
		}
		if !take {
			body, _ := json.Marshal(map[string]any{"declined": true, "inbound": in.Name})
			return &InboundAnswer{Status: http.StatusAccepted, Body: body}, nil
		}
	}
	fields := make(map[string]any, len(in.Mapping))
	for _, fv := range in.Mapping {
		val, err := fv.Value.Eval(env)
		if err != nil {
			if missing(err) {
				continue // the payload has no such value: the field stays unset
			}
			var fe *objects.FieldError
			if errors.As(err, &fe) {
				return nil, fe
			}
			return nil, ruleFailed("the mapping of "+fv.Field.Name, err)
		}
		if val != nil {
			fields[fv.Field.Name] = val
		}
	}
	t := v.newTxn(ctx, tx, false, false)
	c := change{op: Create, object: obj.Name, patch: fields}
	status := http.StatusCreated
	if in.MatchOn != nil {
		if val, set := fields[in.MatchOn.Name]; set {
			holder, err := tx.HolderOf(ctx, obj.Name, in.MatchOn.Name, in.MatchOn.UniqueKey(val))
			if err != nil {
				return nil, err
			}
			if holder != "" {
				c.op, c.id, status = Update, holder, http.StatusOK
			}
		}
	}
	rec, err := t.apply(c, 0, nil)
	if err != nil {
		return nil, err
	}
	body, _ := json.Marshal(map[string]string{"object": obj.Name, "id": rec.ID})
	return &InboundAnswer{Status: status, Body: body}, nil
}

// missing reports whether an expression failed because the payload lacked
// what it reads: payload.contact.email when there is no contact.
func missing(err error) bool {
	return strings.Contains(err.Error(), "from <nil>")
}

func lowerHeaders(h http.Header) map[string]string {
	out := make(map[string]string, len(h))
	for k, vs := range h {
		if len(vs) > 0 {
			out[strings.ToLower(k)] = vs[0]
		}
	}
	return out
}

func firstValues(q map[string][]string) map[string]string {
	out := make(map[string]string, len(q))
	for k, vs := range q {
		if len(vs) > 0 {
			out[k] = vs[0]
		}
	}
	return out
}
