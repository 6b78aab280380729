package objects

import (
	"context"
	"time"
)

// Webhooks are kept in the store in four parts:
//
//   - endpoints: per business, a name (a subscription's, or the name a
//     webhook action sends as) with its signing secret and its state. The
//     secret is generated once and kept across pack revisions.
//   - events and deliveries: the outbox. A write that matches subscriptions
//     inserts its event and one delivery per subscription in its own
//     transaction, so that a write that rolls back sends nothing and one that
//     commits is delivered at least once.
//   - inbound webhooks: per business, a name with the token of its URL.
//   - inbound answers: what an inbound webhook answered to a request with an
//     idempotency key, so that a repeat gets the same answer.

// An Event is something that happened to a record, as its deliveries send
// it.
type Event struct {
	ID         string
	Seq        int64  // increases per business
	Type       string // deals.updated
	Object     string
	RecordID   string
	OccurredAt time.Time
	Payload    []byte // the JSON deliveries send
}

// Delivery states.
const (
	DeliveryPending   = "pending"
	DeliverySucceeded = "succeeded"
	DeliveryFailed    = "failed"
)

// A Delivery is one message to one endpoint and the story of its attempts.
type Delivery struct {
	ID         string
	BusinessID string
	MessageID  string // webhook-id: the event's id, or the action's message id
	Endpoint   string
	URL        string
	Headers    map[string]string
	// EventID is the event whose payload the delivery sends; the store
	// keeps the payload once, with the event. A webhook action's message
	// has no event, and the delivery keeps its Payload.
	EventID       string
	Payload       []byte // filled in by ClaimDeliveries from the event when EventID is set
	Status        string
	Attempts      int
	NextAttemptAt time.Time
	LastStatus    int    // HTTP status of the last attempt, 0 for none
	LastError     string // why the last attempt failed
	LastResponse  []byte // at most 64 KiB of the last response's body
	CreatedAt     time.Time
	UpdatedAt     time.Time
	Secret        string // the endpoint's, filled in by ClaimDeliveries
}

// An Endpoint is where deliveries of one name go, with its secret and state.
type Endpoint struct {
	BusinessID     string
	Name           string
	Secret         string
	Disabled       bool
	DisabledReason string
	DisabledAt     time.Time
	FailingSince   time.Time // zero while the last attempt succeeded
	CreatedAt      time.Time
}

// An Attempt is the outcome of one delivery attempt, as the dispatcher
// records it.
type Attempt struct {
	BusinessID string
	Endpoint   string
	DeliveryID string
	Owner      string // the lease holder recording it; ignored if it lost the lease
	At         time.Time
	OK         bool
	Status     int
	Error      string
	Response   []byte
	// Next is when to try again; zero when no attempt is left, which marks
	// the delivery failed.
	Next time.Time
	// Disable, when set, disables the endpoint with this reason (a 410, or
	// failing for too long); FailingFor is how long the endpoint may fail
	// before it is disabled.
	Disable    string
	FailingFor time.Duration
}

// An Inbound is an inbound webhook: the hash of its URL's token and its
// signing secret.
type Inbound struct {
	BusinessID string
	Name       string
	TokenHash  string // hex SHA-256 of the token, which is shown once
	TokenHint  string // the token's first characters, to tell it apart
	Secret     string // for inbound webhooks that verify signatures
	CreatedAt  time.Time
	RotatedAt  time.Time
}

// An InboundAnswer is what an inbound webhook answered to a request with an
// idempotency key.
type InboundAnswer struct {
	Status int
	Body   []byte
	At     time.Time
}

// WebhookStore is the store's side of webhooks.
type WebhookStore interface {
	// ClaimDeliveries leases up to limit due deliveries of enabled endpoints
	// to owner until the lease ends; a delivery whose lease ended (its owner
	// died) is due again. Each comes with its endpoint's secret.
	ClaimDeliveries(ctx context.Context, owner string, now time.Time, lease time.Duration, limit int) ([]*Delivery, error)
	// RecordAttempts records the outcomes of attempts, in order and in one
	// transaction: each releases its delivery's lease (unless its owner lost
	// it) and updates the endpoint: it fails since the first of a row of
	// failures, and is disabled when Disable says so or it has failed for
	// longer than FailingFor.
	RecordAttempts(ctx context.Context, as []Attempt) error
	// NextDeliveryAt returns when the next pending delivery is due.
	NextDeliveryAt(ctx context.Context) (time.Time, bool, error)
	// DeliveryWakeups signals when a committed write has added deliveries:
	// in this process, and on PostgreSQL in every process.
	DeliveryWakeups() <-chan struct{}

	// Deliveries lists a business's deliveries, newest first, of one
	// status or all ("").
	Deliveries(ctx context.Context, businessID, status string, limit int) ([]*Delivery, error)
	// ReplayDelivery makes a delivery pending again, due at once, with its
	// attempts counted afresh.
	ReplayDelivery(ctx context.Context, businessID, id string, now time.Time) error
	// Endpoints lists a business's endpoints.
	Endpoints(ctx context.Context, businessID string) ([]*Endpoint, error)
	// EnableEndpoint enables a disabled endpoint.
	EnableEndpoint(ctx context.Context, businessID, name string) error
	// DisableEndpoint disables an endpoint, for reason; its deliveries wait,
	// pending, until it is enabled. Disabling a disabled endpoint keeps its
	// first reason.
	DisableEndpoint(ctx context.Context, businessID, name, reason string, at time.Time) error

	// InboundByTokenHash finds an inbound webhook by its token's hash.
	InboundByTokenHash(ctx context.Context, hash string) (*Inbound, error)
	// Inbounds lists a business's inbound webhooks.
	Inbounds(ctx context.Context, businessID string) ([]*Inbound, error)
	// RotateInbound replaces an inbound webhook's token.
	RotateInbound(ctx context.Context, businessID, name, tokenHash, tokenHint string, at time.Time) error
	// PruneInboundAnswers forgets answers older than before.
	PruneInboundAnswers(ctx context.Context, before time.Time) error
}

// WebhookTx is a write transaction's side of webhooks.
type WebhookTx interface {
	// NextEventSeq takes the business's next event sequence number.
	NextEventSeq(ctx context.Context) (int64, error)
	// InsertEvent adds an event to the outbox.
	InsertEvent(ctx context.Context, e *Event) error
	// InsertDelivery adds a delivery; it is due at d.NextAttemptAt.
	InsertDelivery(ctx context.Context, d *Delivery) error
	// EnsureEndpoint creates an endpoint with secret unless one of that
	// name exists.
	EnsureEndpoint(ctx context.Context, name, secret string, at time.Time) error
	// EnsureInbound creates an inbound webhook with a token (its hash and
	// hint) and secret unless one of that name exists; it reports whether
	// it created one.
	EnsureInbound(ctx context.Context, name, tokenHash, tokenHint, secret string, at time.Time) (bool, error)
	// ReserveInboundKey reserves an idempotency key of an inbound webhook
	// for this transaction. When an answer younger than since is stored
	// under it, it reserves nothing and returns that answer. On PostgreSQL
	// a concurrent reservation of the same key waits for the first.
	ReserveInboundKey(ctx context.Context, inbound, key string, since, at time.Time) (*InboundAnswer, error)
	// SaveInboundAnswer stores the answer of a reserved key.
	SaveInboundAnswer(ctx context.Context, inbound, key string, a *InboundAnswer) error
	// HolderOf returns the id of the record that holds a value of a unique
	// field, or "".
	HolderOf(ctx context.Context, object, field, value string) (string, error)
}
