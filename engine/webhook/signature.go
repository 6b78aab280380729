// Package webhook holds the store-independent primitives of crmd's webhooks:
// signing and verifying them the Standard Webhooks way
// (https://www.standardwebhooks.com), refusing to connect where a webhook
// must never go (SSRF), sending one delivery attempt with quick retries, and
// the durable schedule of the attempts that follow. The dispatcher in engine
// claims deliveries from the store and uses these; nothing here touches a
// store.
package webhook

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The Standard Webhooks headers. http.Header canonicalizes them
// (Webhook-Id); HTTP header names are case-insensitive on the wire.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// Tolerance is how far a webhook-timestamp may be from now, either way,
// for Verify to accept it: it bounds how long a captured request can be
// replayed, while allowing for clock skew and a slow sender.
const Tolerance = 5 * time.Minute

const (
	secretPrefix = "whsec_"
	// secretBytes is the key length of new secrets: 256 bits, the size of
	// the HMAC-SHA256 block's useful key.
	secretBytes = 32
	// The spec asks for keys of 24 to 64 bytes.
	minKeyBytes = 24
	maxKeyBytes = 64
	// maxMsgIDLen keeps a webhook-id a short token: it is also the
	// receiver's idempotency key.
	maxMsgIDLen = 256
)

var (
	// ErrBadSecret means the secret given to sign or verify with is not
	// usable. It is the caller's configuration that is wrong, not the
	// request.
	ErrBadSecret = errors.New("unusable webhook secret")
	// ErrMissingHeader means a request lacks a header that carries its
	// signature.
	ErrMissingHeader = errors.New("missing signature header")
	// ErrTimestamp means a request's webhook-timestamp is not a number or
	// is too far from now.
	ErrTimestamp = errors.New("bad webhook timestamp")
	// ErrSignature means no signature on a request matches its content.
	ErrSignature = errors.New("signature mismatch")
)

// NewSecret returns a new signing secret: whsec_ and the base64 of 32
// random bytes.
func NewSecret() (string, error) {
	key := make([]byte, secretBytes)
	if _, err := rand.Read(key); err != nil {
		return "", fmt.Errorf("generating a webhook secret: %w", err)
	}
	return secretPrefix + base64.StdEncoding.EncodeToString(key), nil
}

// decodeSecret returns the HMAC key of a whsec_ secret. Its errors never
// hold the secret.
func decodeSecret(secret string) ([]byte, error) {
	encoded, ok := strings.CutPrefix(secret, secretPrefix)
	if !ok {
		return nil, fmt.Errorf("%w: it does not start with %s", ErrBadSecret, secretPrefix)
	}
	key, err := base64.StdEncoding.DecodeString(encoded)
	if err != nil {
		return nil, fmt.Errorf("%w: the part after %s is not standard base64", ErrBadSecret, secretPrefix)
	}
	if len(key) < minKeyBytes || len(key) > maxKeyBytes {
		return nil, fmt.Errorf("%w: its key is %d bytes, not %d to %d", ErrBadSecret, len(key), minKeyBytes, maxKeyBytes)
	}
	return key, nil
}

// Sign returns the webhook-signature value of a message: "v1," and the
// base64 HMAC-SHA256 of "<msgID>.<unix seconds>.<body>". The message id
// may not hold a dot, which would make the signed content ambiguous, nor
// anything a header cannot carry.
func Sign(secret, msgID string, ts time.Time, body []byte) (string, error) {
	key, err := decodeSecret(secret)
	if err != nil {
		return "", err
	}
	if err := checkMsgID(msgID); err != nil {
		return "", err
	}
	return "v1," + signature(key, msgID, ts.Unix(), body), nil
}

// SetHeaders sets the webhook-id, webhook-timestamp and webhook-signature
// headers of a message sent at ts, replacing any already in h.
func SetHeaders(h http.Header, secret, msgID string, ts time.Time, body []byte) error {
	sig, err := Sign(secret, msgID, ts, body)
	if err != nil {
		return err
	}
	h.Set(HeaderID, msgID)
	h.Set(HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	h.Set(HeaderSignature, sig)
	return nil
}

func checkMsgID(id string) error {
	if id == "" || len(id) > maxMsgIDLen {
		return fmt.Errorf("a webhook message id is 1 to %d characters, not %d", maxMsgIDLen, len(id))
	}
	for _, c := range []byte(id) {
		if c <= ' ' || c >= 0x7f || c == '.' {
			return fmt.Errorf("the webhook message id %q holds %q; it may hold printable ASCII other than space and dot", id, c)
		}
	}
	return nil
}

// signature is the base64 HMAC-SHA256 of the signed content of a message.
func signature(key []byte, msgID string, unix int64, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(msgID))
	mac.Write([]byte{'.'})
	mac.Write(strconv.AppendInt(nil, unix, 10))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// Verify checks an inbound request signed the Standard Webhooks way: the
// three headers are there, webhook-timestamp is within Tolerance of now,
// and one of the v1 signatures in webhook-signature (space-separated, to
// allow a sender to rotate its secret) matches. Signatures of other
// versions are ignored. Its errors wrap ErrBadSecret, ErrMissingHeader,
// ErrTimestamp or ErrSignature and never hold a secret or a signature.
func Verify(secret string, h http.Header, body []byte, now time.Time) error {
	key, err := decodeSecret(secret)
	if err != nil {
		return err
	}
	id := h.Get(HeaderID)
	stamp := h.Get(HeaderTimestamp)
	sigs := strings.Join(h.Values(HeaderSignature), " ")
	for _, hv := range [...]struct{ name, value string }{{HeaderID, id}, {HeaderTimestamp, stamp}, {HeaderSignature, sigs}} {
		if hv.value == "" {
			return fmt.Errorf("%w: %s", ErrMissingHeader, hv.name)
		}
	}
	unix, err := strconv.ParseInt(stamp, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %s %q is not unix seconds", ErrTimestamp, HeaderTimestamp, clip(stamp))
	}
	if err := checkTimestamp(time.Unix(unix, 0), now); err != nil {
		return err
	}
	want := []byte(signature(key, id, unix, body))
	versions := 0
	for _, entry := range strings.Split(sigs, " ") {
		version, sig, ok := strings.Cut(entry, ",")
		if !ok || version != "v1" {
			continue
		}
		versions++
		if hmac.Equal([]byte(sig), want) {
			return nil
		}
	}
	if versions == 0 {
		return fmt.Errorf("%w: %s holds no v1 signature", ErrSignature, HeaderSignature)
	}
	return fmt.Errorf("%w: none of the %d v1 signatures in %s matches the body", ErrSignature, versions, HeaderSignature)
}

func checkTimestamp(ts, now time.Time) error {
	switch d := now.Sub(ts); {
	case d > Tolerance:
		return fmt.Errorf("%w: %s is %s old; at most %s is accepted", ErrTimestamp, HeaderTimestamp, d.Round(time.Second), Tolerance)
	case d < -Tolerance:
		return fmt.Errorf("%w: %s is %s in the future; at most %s is accepted", ErrTimestamp, HeaderTimestamp, (-d).Round(time.Second), Tolerance)
	}
	return nil
}

// clip shortens a value from a request for an error message.
func clip(s string) string {
	const max = 32
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}

// VerifyHMAC checks an inbound request signed the way GitHub and many
// others do: header is the hex HMAC-SHA256 of the body, keyed with the
// secret's bytes as written, optionally after "sha256=". Its errors wrap
// ErrBadSecret, ErrMissingHeader or ErrSignature and never hold a secret
// or a signature.
func VerifyHMAC(secret, header string, body []byte) error {
	if secret == "" {
		return fmt.Errorf("%w: it is empty", ErrBadSecret)
	}
	value := strings.TrimSpace(header)
	if len(value) >= len("sha256=") && strings.EqualFold(value[:len("sha256=")], "sha256=") {
		value = value[len("sha256="):]
	}
	if value == "" {
		return fmt.Errorf("%w: the signature header is missing or empty", ErrMissingHeader)
	}
	got, err := hex.DecodeString(value)
	if err != nil {
		return fmt.Errorf("%w: the signature is not hex", ErrSignature)
	}
	if len(got) != sha256.Size {
		return fmt.Errorf("%w: the signature is %d bytes; an HMAC-SHA256 is %d", ErrSignature, len(got), sha256.Size)
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	if !hmac.Equal(got, mac.Sum(nil)) {
		return fmt.Errorf("%w: the HMAC-SHA256 of the body does not match", ErrSignature)
	}
	return nil
}
