package engine

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"hash/crc32"
	"math/big"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/crmd/crmd/objects"
)

// API keys look like ak_ followed by 32 random base62 characters (190 bits)
// and 6 characters of checksum, a CRC-32 of the rest, as GitHub's tokens do:
// a mistyped or truncated key is refused without asking the database.
const (
	keyPrefix    = "ak_"
	keyRandomLen = 32
	keyCheckLen  = 6
	keyLen       = len(keyPrefix) + keyRandomLen + keyCheckLen
	// KeyPrefixLen is how much of a key is kept to recognise it by.
	KeyPrefixLen = len(keyPrefix) + 8
)

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// newAPIKey returns a new random key.
func newAPIKey() string {
	key := keyPrefix + randomBase62(keyRandomLen)
	return key + keyChecksum(key)
}

// randomBase62 returns n random base62 characters.
func randomBase62(n int) string {
	var b strings.Builder
	b.Grow(n)
	limit := big.NewInt(int64(len(base62)))
	for range n {
		x, err := rand.Int(rand.Reader, limit)
		if err != nil {
			panic(err) // crypto/rand does not fail on supported platforms
		}
		b.WriteByte(base62[x.Int64()])
	}
	return b.String()
}

func keyChecksum(body string) string {
	sum := crc32.ChecksumIEEE([]byte(body))
	var out [keyCheckLen]byte
	for i := keyCheckLen - 1; i >= 0; i-- {
		out[i] = base62[sum%62]
		sum /= 62
	}
	return string(out[:])
}

// wellFormedKey reports whether s has the shape and checksum of a key.
func wellFormedKey(s string) bool {
	if len(s) != keyLen || !strings.HasPrefix(s, keyPrefix) {
		return false
	}
	for i := len(keyPrefix); i < len(s); i++ {
		if strings.IndexByte(base62, s[i]) < 0 {
			return false
		}
	}
	body := s[:keyLen-keyCheckLen]
	return subtle.ConstantTimeCompare([]byte(keyChecksum(body)), []byte(s[len(body):])) == 1
}

func hashKey(key string) []byte {
	h := sha256.Sum256([]byte(key))
	return h[:]
}

// An AuthError is a request that cannot be authenticated. Its message is
// safe to show to the caller.
type AuthError struct{ Reason string }

func (e *AuthError) Error() string { return e.Reason }

// A Principal is who a request acts for: a business, through one of its keys.
type Principal struct {
	BusinessID string
	KeyID      string
}

// Authenticate returns the business an API key belongs to, or an *AuthError.
// Each call asks the store, so a key revoked by any process is refused on
// the very next request.
func (e *Engine) Authenticate(ctx context.Context, key string) (Principal, error) {
	if key == "" {
		return Principal{}, &AuthError{"missing API key: send Authorization: Bearer <key> or X-API-Key: <key>"}
	}
	if !wellFormedKey(key) {
		return Principal{}, &AuthError{"malformed API key"}
	}
	h := hashKey(key)
	k, err := e.store.APIKeyByHash(ctx, h)
	if errors.Is(err, objects.ErrNotFound) {
		return Principal{}, &AuthError{"invalid API key"}
	}
	if err != nil {
		return Principal{}, fmt.Errorf("looking up an API key: %w", err)
	}
	if subtle.ConstantTimeCompare(k.Hash, h) != 1 {
		return Principal{}, &AuthError{"invalid API key"}
	}
	if !k.RevokedAt.IsZero() {
		return Principal{}, &AuthError{"API key revoked"}
	}
	e.keys.note(k.BusinessID, k.ID)
	return Principal{BusinessID: k.BusinessID, KeyID: k.ID}, nil
}

// keyUsage remembers when keys were last used and writes that down now and
// then, so that authenticating a read never writes.
type keyUsage struct {
	mu   sync.Mutex
	seen map[[2]string]time.Time
}

func newKeyUsage() *keyUsage { return &keyUsage{seen: map[[2]string]time.Time{}} }

func (u *keyUsage) note(businessID, keyID string) {
	t := now()
	u.mu.Lock()
	u.seen[[2]string{businessID, keyID}] = t
	u.mu.Unlock()
}

func (u *keyUsage) take() []objects.KeyUse {
	u.mu.Lock()
	seen := u.seen
	u.seen = map[[2]string]time.Time{}
	u.mu.Unlock()
	uses := make([]objects.KeyUse, 0, len(seen))
	for k, t := range seen {
		uses = append(uses, objects.KeyUse{BusinessID: k[0], KeyID: k[1], At: t})
	}
	return uses
}

// FlushKeyUsage writes down when keys were last used.
func (e *Engine) FlushKeyUsage(ctx context.Context) error {
	uses := e.keys.take()
	if len(uses) == 0 {
		return nil
	}
	if err := e.store.TouchAPIKeys(ctx, uses); err != nil {
		return fmt.Errorf("recording when API keys were last used: %w", err)
	}
	return nil
}

// KeyUsageInterval is how often a serving engine writes down key usage; an
// API key's last_used_at is this much behind at most.
const KeyUsageInterval = 10 * time.Second

// Run does the engine's background work until ctx is done: it picks up pack
// activations made by any process every PackPollInterval, and writes down
// key usage every KeyUsageInterval and one last time at the end.
func (e *Engine) Run(ctx context.Context) {
	keys := time.NewTicker(KeyUsageInterval)
	defer keys.Stop()
	packs := time.NewTicker(PackPollInterval)
	defer packs.Stop()
	for {
		select {
		case <-packs.C:
			if err := e.refresh(ctx); err != nil && ctx.Err() == nil {
				e.log.Warn("refreshing rule packs", "err", err)
			}
		case <-keys.C:
			if err := e.FlushKeyUsage(ctx); err != nil {
				e.log.Warn("flushing key usage", "err", err)
			}
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			if err := e.FlushKeyUsage(fctx); err != nil {
				e.log.Warn("flushing key usage", "err", err)
			}
			cancel()
			return
		}
	}
}

// MaxBusinessNameLen bounds business names.
const MaxBusinessNameLen = 200

// CreateBusiness creates a business. Names are unique.
func (e *Engine) CreateBusiness(ctx context.Context, name string) (*objects.Business, error) {
	if err := checkLabel("business name", name, MaxBusinessNameLen, true); err != nil {
		return nil, err
	}
	b := &objects.Business{ID: objects.NewID(), Name: name, CreatedAt: now()}
	if err := e.store.CreateBusiness(ctx, b); err != nil {
		return nil, err
	}
	return b, nil
}

// Business returns a business by id or name.
func (e *Engine) Business(ctx context.Context, idOrName string) (*objects.Business, error) {
	return e.store.Business(ctx, idOrName)
}

// Businesses returns every business.
func (e *Engine) Businesses(ctx context.Context) ([]*objects.Business, error) {
	return e.store.Businesses(ctx)
}

// CreateAPIKey makes a new key for a business and returns it. The key itself
// is returned this once; only its hash is stored.
func (e *Engine) CreateAPIKey(ctx context.Context, businessID, name string) (string, *objects.APIKey, error) {
	if err := checkLabel("key name", name, 200, false); err != nil {
		return "", nil, err
	}
	key := newAPIKey()
	k := &objects.APIKey{
		BusinessID: businessID,
		ID:         objects.NewID(),
		Name:       name,
		Prefix:     key[:KeyPrefixLen],
		Hash:       hashKey(key),
		CreatedAt:  now(),
	}
	if err := e.store.CreateAPIKey(ctx, k); err != nil {
		return "", nil, err
	}
	return key, k, nil
}

// APIKeys returns the keys of a business.
func (e *Engine) APIKeys(ctx context.Context, businessID string) ([]*objects.APIKey, error) {
	return e.store.APIKeys(ctx, businessID)
}

// RevokeAPIKey revokes a key of a business.
func (e *Engine) RevokeAPIKey(ctx context.Context, businessID, keyID string) error {
	return e.store.RevokeAPIKey(ctx, businessID, keyID, now())
}

func checkLabel(what, s string, maxLen int, required bool) error {
	switch {
	case required && strings.TrimSpace(s) == "":
		return fmt.Errorf("%s must not be empty", what)
	case s != strings.TrimSpace(s):
		return fmt.Errorf("%s must not start or end with spaces", what)
	case len([]rune(s)) > maxLen:
		return fmt.Errorf("%s must be at most %d characters", what, maxLen)
	case strings.ContainsFunc(s, unicode.IsControl):
		return fmt.Errorf("%s must not contain control characters", what)
	}
	return nil
}
