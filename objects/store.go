package objects

import (
	"context"
	"time"
)

// A Business is one tenant: its records, keys and rules are its own, and no
// path leads from one business to another's.
type Business struct {
	ID        string
	Name      string
	CreatedAt time.Time
}

// An APIKey is a stored API key. The key itself is never stored, only its
// SHA-256 hash and a short prefix for people to recognise it by.
type APIKey struct {
	BusinessID string
	ID         string
	Name       string
	Prefix     string
	Hash       []byte
	CreatedAt  time.Time
	LastUsedAt time.Time // zero when never used
	RevokedAt  time.Time // zero when not revoked
}

// KeyUse is the last time a key was seen, for TouchAPIKeys.
type KeyUse struct {
	BusinessID string
	KeyID      string
	At         time.Time
}

// MaxPageSize is the most records List returns at once.
const MaxPageSize = 500

// Store keeps businesses, API keys and records. Every record operation is
// scoped to one business: a record of another business does not exist.
type Store interface {
	WebhookStore

	// Get returns one record, or a *NotFoundError.
	Get(ctx context.Context, businessID, object, id string) (*Record, error)
	// List returns up to limit records of an object after skipping offset
	// of them, oldest first, in an order that stays the same between calls.
	List(ctx context.Context, businessID, object string, limit, offset int) ([]*Record, error)
	// Write runs fn in a transaction of the business: when fn returns an
	// error nothing it did is kept; when Write returns nil, everything fn
	// did is durable.
	Write(ctx context.Context, businessID string, fn func(Tx) error) error

	// CreateBusiness stores a new business; ErrConflict when the name is taken.
	CreateBusiness(ctx context.Context, b *Business) error
	// Business returns the business with the given id or name, or ErrNotFound.
	Business(ctx context.Context, idOrName string) (*Business, error)
	// Businesses returns all businesses, oldest first.
	Businesses(ctx context.Context) ([]*Business, error)

	// CreateAPIKey stores a new key.
	CreateAPIKey(ctx context.Context, k *APIKey) error
	// APIKeys returns the keys of a business, oldest first.
	APIKeys(ctx context.Context, businessID string) ([]*APIKey, error)
	// APIKeyByHash returns the key with the given hash, or ErrNotFound.
	APIKeyByHash(ctx context.Context, hash []byte) (*APIKey, error)
	// RevokeAPIKey marks a key revoked; ErrNotFound when the business has no
	// such key. Revoking a revoked key keeps its first revocation time.
	RevokeAPIKey(ctx context.Context, businessID, keyID string, at time.Time) error
	// TouchAPIKeys records when keys were last used, never moving a time back.
	TouchAPIKeys(ctx context.Context, uses []KeyUse) error

	// ActivePacks returns the active revision of each of a business's packs,
	// with their files, and the business's pack generation.
	ActivePacks(ctx context.Context, businessID string) ([]*PackRevision, int64, error)
	// PackGenerations returns the pack generation of each of the given
	// businesses that has one. A generation grows with every activation.
	PackGenerations(ctx context.Context, businessIDs []string) (map[string]int64, error)
	// PackRevisions returns every revision of a business's packs, without
	// their files, by pack and then newest first.
	PackRevisions(ctx context.Context, businessID string) ([]*PackRevision, error)
	// PackRevision returns one revision with its files, or ErrNotFound.
	PackRevision(ctx context.Context, businessID, pack string, revision int) (*PackRevision, error)

	// Ping reports whether the store is reachable.
	Ping(ctx context.Context) error
	// Close releases the store's resources.
	Close() error
}

// Tx is a write transaction within one business.
type Tx interface {
	WebhookTx

	// Get returns a record for update, or a *NotFoundError.
	Get(ctx context.Context, object, id string) (*Record, error)
	// Exists reports whether a record exists.
	Exists(ctx context.Context, object, id string) (bool, error)
	// Insert adds a new record.
	Insert(ctx context.Context, r *Record) error
	// Update replaces the fields and updated_at of an existing record.
	Update(ctx context.Context, r *Record) error
	// Delete removes a record, or returns a *NotFoundError.
	Delete(ctx context.Context, object, id string) error

	// Claim reserves a value (a unique key) of a unique field for a record.
	// When another record holds it, Claim returns that record's id and
	// reserves nothing.
	Claim(ctx context.Context, object, field, value, id string) (holder string, err error)
	// Release gives up a record's claim on a value.
	Release(ctx context.Context, object, field, value, id string) error
	// ReleaseField gives up every claim on a field's values.
	ReleaseField(ctx context.Context, object, field string) error
	// ScanRecords calls fn with each record of an object.
	ScanRecords(ctx context.Context, object string, fn func(*Record) error) error
	// CountRecords counts the records of an object.
	CountRecords(ctx context.Context, object string) (int, error)
	// FieldInUse reports whether any record of an object has a value for a
	// field, declared or not.
	FieldInUse(ctx context.Context, object, field string) (bool, error)

	// LockPacks takes the business's pack lock for the rest of the
	// transaction, so that activations follow one another.
	LockPacks(ctx context.Context) error
	// TxActivePacks is ActivePacks within the transaction.
	TxActivePacks(ctx context.Context) ([]*PackRevision, error)
	// SavePackRevision stores a new revision of a pack and sets its number,
	// one more than the pack's last.
	SavePackRevision(ctx context.Context, rev *PackRevision) error
	// ActivatePack makes a revision the active one of its pack and moves the
	// business's pack generation on.
	ActivatePack(ctx context.Context, pack string, revision int, by string, at time.Time) error
}

// A PackRevision is one stored version of a rule pack.
type PackRevision struct {
	BusinessID string
	Pack       string
	Revision   int
	Files      []PackFile
	Hash       string
	CreatedAt  time.Time
	CreatedBy  string
	Active     bool
}

// A PackFile is one file of a pack revision.
type PackFile struct {
	Name    string `json:"name"`
	Content string `json:"content"`
}
